"""The constrained search's rules, without weights: a scripted decoder whose favourite tokens are traps.

The fake decoder prefers, after every token, a full stop and a comma over the word the sentence
needs, and the first word it prefers begins no template sentence: the search must still find
"turn on the lamp", and it must never spend a decoder call on ", , ," or on a text that a full
stop closed before its sentence did.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.asr.whisper_templates import TemplateDecoding, _constrained
from voiced.intents import IntentRecognizer

TEMPLATES = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences:
          - "turn on [the] {name}"
lists:
  name:
    values: ["lamp", "kitchen light"]
"""

VOCAB = [" turn", " on", " the", " lamp", ".", ",", " lost", " kitchen", " light"]


class _Scripted:
    """Just what the search uses of WhisperModel: eot, n_text_ctx, text() and decode_step()."""

    eot = len(VOCAB)
    n_text_ctx = 448

    def __init__(self) -> None:
        self.seen: list[str] = []
        """The text the decoder had been fed at each call (the fake's "cache" is that token list)."""

    def text(self, tokens: list[int]) -> str:
        return "".join(VOCAB[t] for t in tokens if t < len(VOCAB))

    def decode_step(self, tokens: np.ndarray, k, v, cross_k, cross_v, offset: int):
        row = np.full(len(VOCAB) + 1, -8.0, np.float32)
        history = (k or []) + tokens[0].tolist()
        self.seen.append(self.text(history))
        row[VOCAB.index(".")] = 0.0  # the traps: a full stop first, a comma after a comma
        row[VOCAB.index(",")] = 0.0 if self.text(history).endswith(",") else -3.0
        row[VOCAB.index(" lost")] = -0.5
        words = [VOCAB[t] for t in history if t < len(VOCAB)]
        wanted = {0: " turn", 1: " on", 2: " the", 3: " lamp"}.get(sum(w.strip() not in ".," for w in words))
        if wanted is not None:
            row[VOCAB.index(wanted)] = -1.0
        else:
            row[self.eot] = -0.2
        return row[np.newaxis, np.newaxis], history, history


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("search") / "intents.yaml"
    path.write_text(TEMPLATES)
    return IntentRecognizer.load([path]).sentence_space()


@pytest.mark.parametrize("reward", [None, 1.0])
def test_search_finds_the_sentence_past_marks_and_a_wrong_first_word(space, reward: float | None) -> None:
    model = _Scripted()
    found = _constrained(model, space, TemplateDecoding(token_reward=reward), None, None, 500, [99])  # type: ignore[arg-type]
    assert found is not None
    assert model.text(found[0]).strip(" .") == "turn on the lamp"
    assert not any(", ," in t or ",," in t for t in model.seen)
    # a full stop only closes a whole sentence (and nothing but the end of text follows it)
    assert {t.strip() for t in model.seen if "." in t} <= {"turn on the lamp.", "turn on the kitchen light."}


def test_depth_first_completion_when_the_budget_runs_out(space) -> None:
    model = _Scripted()
    found = _constrained(model, space, TemplateDecoding(token_reward=None, max_steps=1, complete=True),
                         None, None, 500, [99])  # type: ignore[arg-type]
    assert found is not None and model.text(found[0]).strip(" .") == "turn on the lamp"
    without = _constrained(_Scripted(), space, TemplateDecoding(token_reward=None, max_steps=1, complete=False),
                           None, None, 500, [99])  # type: ignore[arg-type]
    assert without is None

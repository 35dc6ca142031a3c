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

from voiced.asr.whisper_template_search import _constrained
from voiced.asr.whisper_templates import TemplateDecoding
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


def _cached(tokens: np.ndarray, k, offset: int) -> tuple[list[int], object]:
    """The fakes' cache: token ids (+1, so that none is 0) at their positions of a [1, 1, n_text_ctx, 1]
    K cache, as the real one holds each position's K there. Returns the whole history and the cache with
    ``tokens`` written after it; positions past the history must be zeros, as in a real cache."""
    import onnxruntime as ort

    cache = k.numpy().copy()
    assert not cache[0, 0, offset:].any(), "the cache holds more than the tokens before offset"
    history = [int(t) - 1 for t in cache[0, 0, :offset, 0]] + tokens[0].tolist()
    cache[0, 0, offset:offset + tokens.shape[1], 0] = tokens[0] + 1
    return history, ort.OrtValue.ortvalue_from_numpy(cache)


class _Scripted:
    """Just what the search uses of WhisperModel: eot, the cache's sizes, text() and decode_step()."""

    eot = len(VOCAB)
    n_text_ctx = 448
    n_text_layer = n_text_state = 1

    def __init__(self) -> None:
        self.seen: list[str] = []
        """The text the decoder had been fed at each call (the fake's "cache" is that token list)."""

    def text(self, tokens: list[int]) -> str:
        return "".join(VOCAB[t] for t in tokens if t < len(VOCAB))

    def decode_step(self, tokens: np.ndarray, k, v, cross_k, cross_v, offset: int):
        row = np.full(len(VOCAB) + 1, -8.0, np.float32)
        history, cache = _cached(tokens, k, offset)
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
        return row[np.newaxis, np.newaxis], cache, cache


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


class _Table:
    """A decoder that gives each next word a fixed log-probability by the words before it."""

    def __init__(self, vocab: list[str], table: dict[str, dict[str, float]]) -> None:
        self.vocab, self.table = vocab, table
        self.eot = len(vocab)
        self.n_text_ctx = 448
        self.n_text_layer = self.n_text_state = 1
        self.calls = 0

    def text(self, tokens: list[int]) -> str:
        return "".join(self.vocab[t] for t in tokens if t < len(self.vocab))

    def decode_step(self, tokens: np.ndarray, k, v, cross_k, cross_v, offset: int):
        self.calls += 1
        history, cache = _cached(tokens, k, offset)
        row = np.full(len(self.vocab) + 1, -9.0, np.float32)
        for word, logp in self.table.get(self.text(history[1:]).strip(), {}).items():
            row[self.eot if word == "<eot>" else self.vocab.index(word)] = logp
        return row[np.newaxis, np.newaxis], cache, cache


def test_search_goes_on_past_a_short_sentence_for_a_longer_more_probable_one(tmp_path: Path) -> None:
    """"turn on the kitchen" ends first in the search's order (its last word is cheap, " light"
    is not), but "turn on the kitchen light" is more probable per token, which is how the choice
    is made: ``search_on`` calls after the first sentence find it; none keep the short one."""
    (tmp_path / "intents.yaml").write_text(TEMPLATES.replace('["lamp", "kitchen light"]', '["kitchen", "kitchen light"]'))
    space = IntentRecognizer.load([tmp_path / "intents.yaml"]).sentence_space()
    vocab = [" turn", " on", " the", " kitchen", " light", " lost"]
    lost = 1.5  # logits: " lost", no template word, takes most of the mass of each of the first words
    table = {"": {" turn": 0.0, " lost": lost}, "turn": {" on": 0.0, " lost": lost},
             "turn on": {" the": 0.0, " lost": lost}, "turn on the": {" kitchen": 0.0, " lost": lost},
             "turn on the kitchen": {"<eot>": 0.0, " light": -0.8}, "turn on the kitchen light": {"<eot>": 0.0}}
    short, longer = (_constrained(_Table(vocab, table), space, TemplateDecoding(search_on=calls),  # type: ignore[arg-type]
                                  None, None, 500, [99]) for calls in (0, 5))
    assert short is not None and longer is not None
    assert "".join(vocab[t] for t in short[0]) == " turn on the kitchen"
    assert "".join(vocab[t] for t in longer[0]) == " turn on the kitchen light"
    assert longer[2] / (len(longer[0]) + 1) > short[2] / (len(short[0]) + 1)


def test_the_search_goes_on_past_a_short_sentence_only_when_it_already_wins(tmp_path: Path) -> None:
    """``search_on_winning`` (on by default): the longer sentence is looked for only when the short
    one found first already reaches ``wins_at`` (what it needs to beat the free transcript), so a
    free transcript kept without the extra calls is kept with them."""
    (tmp_path / "intents.yaml").write_text(TEMPLATES.replace('["lamp", "kitchen light"]', '["kitchen", "kitchen light"]'))
    space = IntentRecognizer.load([tmp_path / "intents.yaml"]).sentence_space()
    vocab = [" turn", " on", " the", " kitchen", " light", " lost"]
    table = {"": {" turn": 0.0, " lost": 1.5}, "turn": {" on": 0.0, " lost": 1.5},
             "turn on": {" the": 0.0, " lost": 1.5}, "turn on the": {" kitchen": 0.0, " lost": 1.5},
             "turn on the kitchen": {"<eot>": 0.0, " light": -0.8}, "turn on the kitchen light": {"<eot>": 0.0}}

    def found(wins_at: float) -> str:
        hit = _constrained(_Table(vocab, table), space, TemplateDecoding(), None, None, 500, [99],  # type: ignore[arg-type]
                           wins_at=wins_at)
        assert hit is not None
        return "".join(vocab[t] for t in hit[0])

    short = _constrained(_Table(vocab, table), space, TemplateDecoding(), None, None, 500, [99])  # type: ignore[arg-type]
    assert short is not None and "".join(vocab[t] for t in short[0]) == " turn on the kitchen"  # no bar: never on
    per_token = short[2] / (len(short[0]) + 1)
    assert found(per_token) == " turn on the kitchen light"  # the first sentence wins: the better one is found
    assert found(-np.inf) == " turn on the kitchen light"
    assert found(per_token + 1e-6) == " turn on the kitchen"  # it would not win: stop as before
    without = _constrained(_Table(vocab, table), space, TemplateDecoding(search_on_winning=0), None, None, 500,  # type: ignore[arg-type]
                           [99], wins_at=-np.inf)
    assert without is not None and "".join(vocab[t] for t in without[0]) == " turn on the kitchen"


def test_unfinished_beginnings_are_reported_for_alignment(space) -> None:
    """No sentence within the budget: the search hands back what it extended (deepest "turn on the"
    included), which decode_with_templates aligns to template sentences."""
    vocab = [" turn", " on", " the", " kitchen", " light"]
    table = {"": {" turn": -1.0}, "turn": {" on": -1.0}, "turn on": {" the": -1.0}}
    unfinished: list[tuple[float, list[int]]] = []
    found = _constrained(_Table(vocab, table), space, TemplateDecoding(max_steps=3, complete=False),
                         None, None, 500, [99], unfinished=unfinished)  # type: ignore[arg-type]
    assert found is None
    assert ["".join(vocab[t] for t in tokens) for _, tokens in unfinished] == [" turn", " turn on", " turn on the"]


@pytest.mark.parametrize(("text", "cased"), [
    (" Turn on the", True), (" TV", True), (" TVs", True), (" off", True), (" OFFICE", True), (" 50%", True),
    (" OffIce", False), (" tImeRS", False), (" hIgH", False), (" Turn on the kItchen", False),
])
def test_words_are_cased_as_whisper_writes_them(text: str, cased: bool) -> None:
    from voiced.asr.whisper_template_search import _cased

    assert _cased(text) is cased


@pytest.mark.parametrize("bad", [{"search_on": -1}, {"search_on_winning": -1}, {"align_partials": -1},
                                 {"align_partials": 101}])
def test_search_settings_are_validated(bad: dict[str, int]) -> None:
    from voiced.errors import ConfigError

    with pytest.raises(ConfigError, match=next(iter(bad))):
        TemplateDecoding(**bad)


def test_a_unit_sign_whisper_writes_as_a_token_of_its_own_is_followed(tmp_path: Path) -> None:
    """Whisper writes "50%." as " 50" + "%.": a piece without a letter or digit was never offered,
    so a template's "{brightness}%" could be reached only through " percent"."""
    (tmp_path / "intents.yaml").write_text(TEMPLATES.replace('"turn on [the] {name}"', '"set [the] {name} to {brightness}%"')
                                           + "  brightness:\n    range: {from: 0, to: 100}\n")
    space = IntentRecognizer.load([tmp_path / "intents.yaml"]).sentence_space()
    vocab = [" set", " the", " lamp", " to", " 50", "%", "%.", "#"]
    table = {"": {" set": 0.0}, "set": {" the": 0.0}, "set the": {" lamp": 0.0}, "set the lamp": {" to": 0.0},
             "set the lamp to": {" 50": 0.0}, "set the lamp to 50": {"#": 0.0, "%.": -0.1, "%": -0.5},
             "set the lamp to 50%.": {"<eot>": 0.0}, "set the lamp to 50%": {"<eot>": 0.0}}
    found = _constrained(_Table(vocab, table), space, TemplateDecoding(), None, None, 500, [99])  # type: ignore[arg-type]
    assert found is not None and "".join(vocab[t] for t in found[0]) == " set the lamp to 50%."


def test_a_decimal_point_goes_on_into_the_number_where_a_full_stop_would_end_the_sentence(tmp_path: Path) -> None:
    """Whisper writes "21.5" as " 21" + "." + "5". A full stop ends the search's sentence (only the
    end of text after it), so "... to 39.5°" came out "... to 39." and "21.5 degrees" not at all."""
    (tmp_path / "intents.yaml").write_text(
        TEMPLATES.replace('"turn on [the] {name}"', '"set [the] {name} to {temperature} degrees"')
        + "  temperature:\n    range: {from: 0, to: 100, fractions: halves}\n")
    space = IntentRecognizer.load([tmp_path / "intents.yaml"]).sentence_space()
    vocab = [" set", " the", " lamp", " to", " 21", ".", "5", " degrees"]
    table = {"": {" set": 0.0}, "set": {" the": 0.0}, "set the": {" lamp": 0.0}, "set the lamp": {" to": 0.0},
             "set the lamp to": {" 21": 0.0}, "set the lamp to 21": {".": 0.0, " degrees": -4.0},
             "set the lamp to 21.": {"5": 0.0}, "set the lamp to 21.5": {" degrees": 0.0},
             "set the lamp to 21.5 degrees": {"<eot>": 0.0}, "set the lamp to 21 degrees": {"<eot>": 0.0}}
    found = _constrained(_Table(vocab, table), space, TemplateDecoding(), None, None, 500, [99])  # type: ignore[arg-type]
    assert found is not None and "".join(vocab[t] for t in found[0]) == " set the lamp to 21.5 degrees"

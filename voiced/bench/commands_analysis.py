"""``voiced bench commands --analyze``: why template-aware decoding missed a command's intent.

Run on the development split only (the test split is never looked at while choosing). Each
command whose intent came out wrong is put in one class:

- ``search_none``: the constrained search found no template sentence within its budget;
- ``search_worse``: it found one, but the reference sentence, forced through the decoder, scores
  better per token (end of text counted): a wider search would have found it;
- ``model_prefers_wrong``: the model scores the wrong template sentence at least as well as the
  reference: no search fixes that;
- ``free_was_a_command``: the free transcript already was a (wrong) template sentence, so no
  constrained search ran;
- ``margin_chose_free``: the constrained sentence had the right intent but the free transcript
  won by more than the margin.

The reference is tokenized with the model's real BPE (``tokenizer.json`` of the CTranslate2
weights) as Whisper would likely write it: lower case or a capital first letter, with or
without a closing mark; its best-scoring rendering counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from voiced.asr.whisper import WhisperRecognizer
    from voiced.asr.whisper_templates import Choice
    from voiced.bench.commands import Command

__all__ = ["CLASSES", "classify"]

CLASSES = ("search_none", "search_worse", "model_prefers_wrong", "free_was_a_command", "margin_chose_free")


def _renderings(text: str) -> list[str]:
    cased = {text, text[:1].upper() + text[1:]}
    return [f" {t}{end}" for t in sorted(cased) for end in ("", ".", "?", "!")]


def classify(whisper: WhisperRecognizer, commands: Sequence[Command], audio: Sequence[np.ndarray],
             choices: Sequence[Choice], intent_of: Callable[[str], object], tokenizer_json: Path) -> dict[str, object]:
    """Class counts of the wrong-intent commands among ``commands`` (pass the development split only)
    given their ``choices`` (already judged with the chosen margin), and one line per miss
    (reference, constrained and free text with their per-token scores)."""
    from tokenizers import Tokenizer

    from voiced.asr.whisper import log_mel
    from voiced.asr.whisper_templates import _score

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    model = whisper.model
    counts: Counter[str] = Counter()
    misses: list[str] = []
    right = 0
    for command, samples, choice in zip(commands, audio, choices):
        free = choice.free
        wanted = (command.intent, command.slots)
        if intent_of(model.text(choice.tokens)) == wanted:
            right += 1
            continue
        cross_k, cross_v, _, initial = whisper._free(log_mel(whisper._heard(samples), model.n_mels))[1]  # encoded again
        ref_score = max(_score(model, cross_k, cross_v, initial, ids) / (len(ids) + 1)
                        for ids in (tokenizer.encode(r, add_special_tokens=False).ids for r in _renderings(command.text)))
        constrained = choice.constrained
        if constrained is None or choice.constrained_logprob is None:
            kind, con_score, con_text = "search_none", None, None
        else:
            con_score = choice.constrained_logprob / (len(constrained[0]) + 1)
            con_text = model.text(constrained[0])
            if constrained == choice.free:
                kind = "free_was_a_command"
            elif intent_of(con_text) == wanted:
                kind = "margin_chose_free"
            elif ref_score > con_score:
                kind = "search_worse"
            else:
                kind = "model_prefers_wrong"
        counts[kind] += 1
        free_score = choice.free_logprob / (len(free[0]) + 1)
        misses.append(f"{kind}: ref {command.text!r} {ref_score:.2f} | templates {con_text!r} "
                      f"{'-' if con_score is None else f'{con_score:.2f}'} | free {model.text(free[0])!r} {free_score:.2f}")
    return {"commands": len(commands), "intent_right": right,
            "wrong_by_class": {k: counts[k] for k in CLASSES}, "misses": misses}

"""Word error rate with one stated normalizer, so every engine is scored the same way.

Normalizer: lower case; every character that is not a letter, digit, apostrophe or space
becomes a space; apostrophes are kept inside words ("don't"); no number normalization
("10" and "ten" differ). ``numbers_as_words``: numbers in digits, "%" and "°" are read out as
words first ("50%" and "fifty percent" agree), for the spoken commands whose references and
transcripts write the same words either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from voiced.asr.spoken_length import SIGN_WORDS, number_words

__all__ = ["NORMALIZER", "normalize", "numbers_as_words", "word_errors", "wer"]

NORMALIZER = "lower case, punctuation dropped (apostrophes inside words kept), no number normalization"

_DROP = re.compile(r"[^\w' ]+|_")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def numbers_as_words(text: str) -> str:
    """``text`` with its numbers in digits, "%" and "°" read out as words: "Set it to 21.5°" ->
    "Set it to  twenty one point five  degrees "."""
    for sign, words in SIGN_WORDS.items():
        text = text.replace(sign, f" {words} ")
    return _NUMBER.sub(lambda m: f" {number_words(m.group())} ", _THOUSANDS.sub("", text))


def normalize(text: str) -> list[str]:
    """The words of ``text`` as the WER counts them."""
    words = _DROP.sub(" ", text.lower()).split()
    return [w.strip("'") for w in words if w.strip("'")]


def word_errors(reference: str, hypothesis: str, spoken_numbers: bool = False) -> tuple[int, int]:
    """(edit distance in words, reference words) after normalization (``spoken_numbers``: with
    ``numbers_as_words`` first)."""
    if spoken_numbers:
        reference, hypothesis = numbers_as_words(reference), numbers_as_words(hypothesis)
    ref, hyp = normalize(reference), normalize(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1], len(ref)


def wer(pairs: Iterable[tuple[str, str]], spoken_numbers: bool = False) -> float:
    """Corpus WER in percent over (reference, hypothesis) pairs (``spoken_numbers``: see ``word_errors``)."""
    errors = words = 0
    for ref, hyp in pairs:
        e, n = word_errors(ref, hyp, spoken_numbers)
        errors += e
        words += n
    return round(100.0 * errors / words, 2) if words else 0.0

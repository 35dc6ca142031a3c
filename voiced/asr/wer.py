"""Word error rate with one stated normalizer, so every engine is scored the same way.

Normalizer: lower case; every character that is not a letter, digit, apostrophe or space
becomes a space; apostrophes are kept inside words ("don't"); no number normalization
("10" and "ten" differ).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["NORMALIZER", "normalize", "word_errors", "wer"]

NORMALIZER = "lower case, punctuation dropped (apostrophes inside words kept), no number normalization"

_DROP = re.compile(r"[^\w' ]+|_")


def normalize(text: str) -> list[str]:
    """The words of ``text`` as the WER counts them."""
    words = _DROP.sub(" ", text.lower()).split()
    return [w.strip("'") for w in words if w.strip("'")]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, reference words) after normalization."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1], len(ref)


def wer(pairs: Iterable[tuple[str, str]]) -> float:
    """Corpus WER in percent over (reference, hypothesis) pairs."""
    errors = words = 0
    for ref, hyp in pairs:
        e, n = word_errors(ref, hyp)
        errors += e
        words += n
    return round(100.0 * errors / words, 2) if words else 0.0

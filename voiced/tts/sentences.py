"""Text checks and sentence cutting: what one model call gets.

espeak-ng already splits text into sentences (at ``.``, ``?``, ``!``, paragraph breaks …);
voiced keeps that split, drops sentences without phonemes, and cuts a sentence longer
than a cap at its last clause mark (``, ; :`` …) or space before the cap, so one model
call stays bounded in time and memory and a run-on sentence still starts playing early.
"""

from __future__ import annotations

import re

from collections.abc import Sequence
from dataclasses import dataclass

from voiced.tts.errors import TextError

__all__ = ["Sentence", "check_text", "split_long"]

# Where espeak-ng's IPA output may be cut with the least damage, best first.
_CLAUSE_MARKS = frozenset(",;:—–")
_WORD_BREAK = " "


@dataclass(frozen=True)
class Sentence:
    """One unit of synthesis: a sentence (or part of a long one) as phonemes and model ids."""

    index: int
    """Position in the text, from 0."""
    phonemes: tuple[str, ...]
    """Phonemes as espeak-ng (or the codepoint phonemizer) gave them."""
    ids: tuple[int, ...]
    """Model input: BOS, pad, phonemes each followed by pad, EOS."""

    @property
    def text(self) -> str:
        """The phonemes as one string (for logs)."""
        return "".join(self.phonemes)


def check_text(text: object, max_chars: int) -> str:
    """``text`` if it is a non-blank string of at most ``max_chars`` characters, else TextError."""
    if not isinstance(text, str):
        raise TextError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise TextError("text is empty")
    if len(text) > max_chars:
        raise TextError(f"text is {len(text)} characters long; the limit is {max_chars} (max_text_chars)")
    # control characters (a NUL crashed espeak-ng's bridge: found by fuzzing) and lone surrogates
    # (which cannot be encoded for it) are read as spaces
    return _CONTROL.sub(" ", text)


_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def split_long(phonemes: Sequence[str], limit: int) -> list[list[str]]:
    """Cut ``phonemes`` into parts of at most ``limit``, at a clause mark, else a space, else anywhere."""
    rest = list(phonemes)
    parts: list[list[str]] = []
    while len(rest) > limit:
        window = rest[:limit]
        cut = _last_index(window, _CLAUSE_MARKS)
        if cut < limit // 4:  # a clause mark near the start would leave a long remainder: prefer a space
            cut = max(cut, _last_index(window, _WORD_BREAK))
        cut = cut + 1 if cut > 0 else limit
        part = rest[:cut]
        while part and part[-1] == _WORD_BREAK:
            part.pop()
        parts.append(part)
        rest = rest[cut:]
        while rest and rest[0] == _WORD_BREAK:  # the next part starts with its word, not a space
            rest.pop(0)
    if rest:
        parts.append(rest)
    return parts


def _last_index(phonemes: Sequence[str], marks: frozenset[str] | str) -> int:
    for i in range(len(phonemes) - 1, -1, -1):
        if phonemes[i] in marks:
            return i
    return -1

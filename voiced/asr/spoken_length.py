"""How long a transcript takes to say, in syllables, estimated from its spelling.

Template-aware Whisper decoding compares sentences by log-probability per token, and Whisper
scores a sentence that leaves part of the audio unexplained nearly as well as one that explains
all of it: "cancel all timers" for "cancel all timers in our bedroom", "pause ..." for
"unpause ...". The free transcript, wrong words and all, covers the whole utterance ("cancel all
timers and I'll be"), so a template sentence with far fewer syllables than it is a sentence cut
short. A count from the spelling is enough for that comparison (vowel groups, a silent final e,
numbers read out as words); it needs no phonemizer.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from unicode_rbnf import RbnfEngine

__all__ = ["SIGN_WORDS", "number_words", "syllables", "without_repeats"]

_WORD = re.compile(r"[a-z']+|\d+(?:\.\d+)?|[%°]")
_VOWELS = re.compile(r"[aeiouy]+")
SIGN_WORDS = {"%": "percent", "°": "degrees"}
"""Signs written after a number, as they are said."""


@cache
def number_words(number: str) -> str:
    """A number in digits read out in English words ("21.5" -> "twenty one point five")."""
    value = float(number) if "." in number else int(number)
    try:
        return _english().format_number(value).text.replace("-", " ")
    except Exception:  # a value the rules do not cover: read digit by digit
        return " ".join("point" if c == "." else _english().format_number(int(c)).text for c in number)


@cache
def _english() -> RbnfEngine:
    from unicode_rbnf import RbnfEngine  # hassil's own number speller: 0.06 s to load, so only when needed

    return RbnfEngine.for_language("en")


def _word_syllables(word: str) -> int:
    groups = len(_VOWELS.findall(word))
    if groups > 1 and word.endswith("e") and not word.endswith(("le", "ee")):
        groups -= 1  # "time", "hours": a final e is mostly silent
    return max(groups, 1)


def syllables(text: str) -> int:
    """Syllables ``text`` takes to say, estimated: "Set the fan to 13%." -> 8."""
    count = 0
    for word in _WORD.findall(text.lower()):
        if word[0].isdigit():
            count += syllables(number_words(word))
        elif word in SIGN_WORDS:
            count += syllables(SIGN_WORDS[word])
        else:
            count += _word_syllables(word)
    return count


def without_repeats(text: str) -> str:
    """``text`` with a phrase repeated right after itself kept once: Whisper's looping ("Open the
    lines of garage. Open the lines of garage.") says nothing about how long the audio is."""
    words = text.split()
    keys = [w.strip(".,?!").lower() for w in words]
    for n in range(len(words) // 2, 1, -1):
        for i in range(len(words) - 2 * n + 1):
            if keys[i:i + n] == keys[i + n:i + 2 * n]:
                return without_repeats(" ".join(words[:i + n] + words[i + 2 * n:]))
    return text

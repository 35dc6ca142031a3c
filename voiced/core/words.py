"""Word timings of a final transcript, from the recognizer's token times."""

from __future__ import annotations

from voiced.core.events import Word
from voiced.listener import ListenEvent

__all__ = ["word_timings"]


def word_timings(ev: ListenEvent) -> list[Word]:
    """Words of the final text with their stream times, from the recognizer's token times."""
    result = ev.result
    words: list[Word] = []
    if result is None:
        return words
    starts: list[float] = []
    for sym, t in zip(result.tokens, result.timestamps):
        if sym.startswith(" ") or not starts:
            starts.append(ev.audio_start + t)
    text, pos = ev.text, 0
    for i, word in enumerate(text.split()):
        begin = text.index(word, pos)
        pos = begin + len(word)
        start = starts[i] if i < len(starts) else ev.end
        end = starts[i + 1] if i + 1 < len(starts) else ev.end
        words.append(Word(word, result.confidence, begin, pos, round(start, 3), round(max(start, end), 3)))
    return words

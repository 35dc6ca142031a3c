"""Word timings of a final transcript, from the recognizer's token times."""

from __future__ import annotations

from collections.abc import Iterator

from voiced.core.events import Word
from voiced.listener import ListenEvent

__all__ = ["word_timings"]


def word_timings(ev: ListenEvent) -> list[Word]:
    """Words of the final text with their stream times, from the recognizer's token times; a
    recognizer that gives none (Whisper) leaves the times unknown (None) rather than made up."""
    result = ev.result
    if result is None:
        return []
    if not result.timestamps:
        return [Word(word, result.confidence, begin, end) for word, begin, end in _spans(ev.text)]
    starts: list[float] = []
    for sym, t in zip(result.tokens, result.timestamps):
        if sym.startswith(" ") or not starts:
            starts.append(ev.audio_start + t)
    words: list[Word] = []
    for i, (word, begin, end_char) in enumerate(_spans(ev.text)):
        start = starts[i] if i < len(starts) else ev.end
        end = starts[i + 1] if i + 1 < len(starts) else ev.end
        words.append(Word(word, result.confidence, begin, end_char, round(start, 3), round(max(start, end), 3)))
    return words


def _spans(text: str) -> Iterator[tuple[str, int, int]]:
    """Each whitespace-separated word of ``text`` with its character range."""
    pos = 0
    for word in text.split():
        begin = text.index(word, pos)
        pos = begin + len(word)
        yield word, begin, pos

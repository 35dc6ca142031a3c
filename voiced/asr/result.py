"""Results that cost what changed: a stream's text, symbols and times grow with its hypothesis.

Rebuilding the whole text after every window makes a long utterance cost the square of its
length. The builder keeps what it made for the previous hypothesis and, when the new one
shares a beginning with it (greedy search: all of it; beam search switching paths: all but the
last few tokens), goes back to the end of that beginning and only turns the tokens after it into
text. The output is exactly ``SymbolTable.text`` / ``symbols`` of the whole hypothesis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from voiced.asr.tokens import SymbolTable, is_punct

__all__ = ["RecognitionResult", "ResultBuilder"]


@dataclass(frozen=True)
class RecognitionResult:
    """What a stream has recognized so far."""

    text: str
    tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    timestamps: tuple[float, ...]
    """Start of each token in seconds since the stream began; empty when the recognizer gives no
    token times (Whisper, decoded without timestamps)."""
    confidence: float
    """Mean token probability, 0..1."""
    from_templates: bool = False
    """The text was decoded inside the template sentences (template-aware decoding)."""


EMPTY = RecognitionResult("", (), (), (), 1.0)


class _Mark(NamedTuple):
    """The builder's state before one token: where to go back to when a path drops that token."""

    text: int
    """Length of the text before the token's characters."""
    dropped: bool
    """The token's punctuation dropped the space that ended the text before it."""
    symbols: int
    log_prob_sum: float


class ResultBuilder:
    """One stream's result, updated token by token (see the module docstring)."""

    def __init__(self, table: SymbolTable, frame_s: float) -> None:
        self._table = table
        self._frame_s = frame_s
        self.reset()

    def reset(self) -> None:
        self._ids: tuple[int, ...] = ()
        self._frames: tuple[int, ...] = ()
        self._text = ""  # before the leading space (and punctuation) is trimmed
        self._symbols: list[str] = []
        self._times: list[float] = []
        self._marks: list[_Mark] = []
        self._log_prob_sum = 0.0
        self._result = EMPTY

    def build(self, tokens: tuple[int, ...], frames: tuple[int, ...], log_probs: tuple[float, ...]) -> RecognitionResult:
        """The result for a hypothesis; unchanged hypotheses cost a comparison."""
        if tokens is self._ids and frames is self._frames:
            return self._result
        n = min(_common_prefix(tokens, self._ids), _common_prefix(frames, self._frames))
        if n == len(tokens) == len(self._ids):
            self._ids, self._frames = tokens, frames
            return self._result
        self._back_to(n)
        shown, unk = self._table.shown, self._table.unk_id
        # Only the new characters are joined (after the text's last one, which punctuation may drop):
        # joining all of them again per window cost a long stream's partials the square of its length.
        text, chars = self._text, list(self._text[-1:])
        base = len(text) - len(chars)  # the text is text[:base] + "".join(chars)
        for i in range(n, len(tokens)):
            token = tokens[i]
            start, dropped = base + len(chars), False
            mark = (len(self._symbols), self._log_prob_sum)
            self._times.append(round(frames[i] * self._frame_s, 3))
            self._log_prob_sum += log_probs[i]
            if token != unk:
                symbol = shown[token]
                self._symbols.append(symbol)
                for j, ch in enumerate(symbol):  # a space before punctuation is dropped, as sherpa-onnx does
                    if chars and chars[-1] == " " and is_punct(ch):
                        chars.pop()
                        dropped = dropped or j == 0  # the space was the text's before this token
                    chars.append(ch)
            self._marks.append(_Mark(start - dropped, dropped, *mark))
            k = i
            while dropped and k > 0 and tokens[k - 1] == unk:  # <unk>s show nothing: the space ended their text too
                k -= 1
                self._marks[k] = self._marks[k]._replace(text=start - 1, dropped=True)
        self._text = text = text[:base] + "".join(chars)
        self._ids, self._frames = tokens, frames
        text = text.lstrip(" ")
        self._result = RecognitionResult(
            text=text[1:] if text and is_punct(text[0]) else text,
            tokens=tuple(self._symbols),
            token_ids=tokens,
            timestamps=tuple(self._times),
            confidence=math.exp(self._log_prob_sum / len(tokens)) if tokens else 1.0,
        )
        return self._result

    def _back_to(self, n: int) -> None:
        """Keep the first ``n`` tokens' text, symbols, times and log-probability sum."""
        if n == len(self._marks):
            return
        mark = self._marks[n]
        self._text = self._text[: mark.text] + (" " if mark.dropped else "")
        del self._symbols[mark.symbols :], self._times[n:], self._marks[n:]
        self._log_prob_sum = mark.log_prob_sum


def _common_prefix(a: tuple, b: tuple) -> int:
    """Length of the longest common beginning, by halving: tuple slices compare in C."""
    if len(a) >= len(b) and a[: len(b)] == b:  # the usual case: the path grew
        return len(b)
    lo, hi = 0, min(len(a), len(b))  # a[:lo] == b[:lo], and the answer is at most hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo

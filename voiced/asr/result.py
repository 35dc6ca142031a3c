"""Results that cost what changed: a stream's text, symbols and times grow with its hypothesis.

Rebuilding the whole text after every window makes a long utterance cost the square of its
length. The builder keeps what it made for the previous hypothesis and, when the new one
extends it (greedy search always; beam search's best path usually), only turns the new
tokens into text. Anything else (beam search switching paths) is rebuilt from scratch. The
output is exactly ``SymbolTable.text`` / ``symbols`` of the whole hypothesis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from voiced.asr.tokens import SymbolTable, is_punct

__all__ = ["RecognitionResult", "ResultBuilder"]


@dataclass(frozen=True)
class RecognitionResult:
    """What a stream has recognized so far."""

    text: str
    tokens: tuple[str, ...]
    token_ids: tuple[int, ...]
    timestamps: tuple[float, ...]
    """Start of each token in seconds since the stream began."""
    confidence: float
    """Mean token probability, 0..1."""
    from_templates: bool = False
    """The text was decoded inside the template sentences (template-aware decoding)."""


EMPTY = RecognitionResult("", (), (), (), 1.0)


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
        self._log_prob_sum = 0.0
        self._result = EMPTY

    def build(self, tokens: tuple[int, ...], frames: tuple[int, ...], log_probs: tuple[float, ...]) -> RecognitionResult:
        """The result for a hypothesis; unchanged hypotheses cost a comparison."""
        n = len(self._ids)
        if tokens is self._ids and frames is self._frames:
            return self._result
        # tuple slices compare in C: cheap next to turning tokens into text in Python
        if not (len(tokens) >= n and tokens[:n] == self._ids and frames[:n] == self._frames):
            self.reset()
            n = 0
        elif len(tokens) == n:
            self._ids, self._frames = tokens, frames
            return self._result
        shown, unk = self._table.shown, self._table.unk_id
        # Only the new characters are joined (after the text's last one, which punctuation may drop):
        # joining all of them again per window cost a long stream's partials the square of its length.
        text, chars = self._text, list(self._text[-1:])
        for i in range(n, len(tokens)):
            token = tokens[i]
            self._times.append(round(frames[i] * self._frame_s, 3))
            self._log_prob_sum += log_probs[i]
            if token == unk:
                continue
            symbol = shown[token]
            self._symbols.append(symbol)
            for ch in symbol:  # a space before punctuation is dropped, as sherpa-onnx does
                if chars and chars[-1] == " " and is_punct(ch):
                    chars.pop()
                chars.append(ch)
        self._text = text = text[:-1] + "".join(chars)
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

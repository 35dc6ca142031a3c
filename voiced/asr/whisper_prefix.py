"""Whisper decoder caches for a search over many token sequences that share beginnings.

A decoder call takes and returns the whole self-attention cache: K and V for all ``n_text_ctx``
positions (5.5 MB a call for tiny.en). Template-aware decoding's best-first search kept the
returned cache of every hypothesis it extended, for the children still waiting in its queue: up
to ~150 at once, ~650 MB that ONNX Runtime's arena then kept for the life of the process (a
Home Assistant set of sentences and read speech: RSS 246 -> 868 MB over 40 hifitts utterances).

Here a search keeps, per extension, only the positions that call added (12 KB a token for
tiny.en) with a link to the sequence before them (:class:`CachedTokens`), and rebuilds the
decoder's input cache in two buffers of its own (:class:`PrefixCaches`). Positions past the
sequence are zeros, as in a cache grown call by call, so the decoder gets the same bytes and
gives the same logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnxruntime as ort

    from voiced.asr.whisper_model import WhisperModel

__all__ = ["CachedTokens", "PrefixCaches"]


@dataclass(frozen=True, eq=False)
class CachedTokens:
    """The decoder's self-attention K/V [layers, 1, n, state] at positions [start, start + n) of a
    token sequence whose earlier positions are ``before``'s."""

    before: CachedTokens | None
    start: int
    k: np.ndarray
    v: np.ndarray

    @property
    def end(self) -> int:
        return self.start + self.k.shape[2]


class PrefixCaches:
    """Decoder calls after any :class:`CachedTokens`, for one search (one thread) at a time.

    The input buffers hold one sequence's positions [0, end) and zeros after; a call after
    another sequence rewrites only the positions where the two differ, from the last link both
    share (a best-first search mostly extends what it just extended or a sibling)."""

    def __init__(self, model: WhisperModel) -> None:
        self.model = model
        shape = (model.n_text_layer, 1, model.n_text_ctx, model.n_text_state)
        self._k = np.zeros(shape, np.float32)
        self._v = np.zeros(shape, np.float32)
        self._held: list[CachedTokens | None] = [None] * model.n_text_ctx
        """The link whose positions begin at each position of the buffers."""
        self._end = 0

    def step(self, tokens: list[int], before: CachedTokens | None, cross_k: ort.OrtValue,
             cross_v: ort.OrtValue) -> tuple[np.ndarray, CachedTokens]:
        """Logits [1, len(tokens), vocab] of ``tokens`` after the sequence ``before`` (None: none),
        and the link that adds them."""
        import onnxruntime as ort

        self._hold(before)
        start = before.end if before is not None else 0
        logits, k, v = self.model.decode_step(np.array([tokens], np.int64), ort.OrtValue.ortvalue_from_numpy(self._k),
                                              ort.OrtValue.ortvalue_from_numpy(self._v), cross_k, cross_v, start)
        end = start + len(tokens)
        # numpy() is a view of ONNX Runtime's output: copy the new positions, let the rest go
        return logits, CachedTokens(before, start, k.numpy()[:, :, start:end].copy(), v.numpy()[:, :, start:end].copy())

    def _hold(self, last: CachedTokens | None) -> None:
        """Put the sequence ending with ``last`` in the buffers, zeros after it."""
        end = last.end if last is not None else 0
        if end < self._end:
            self._k[:, :, end:self._end] = 0.0
            self._v[:, :, end:self._end] = 0.0
            self._held[end:self._end] = [None] * (self._end - end)
        link = last
        while link is not None and self._held[link.start] is not link:  # the buffers hold one sequence whole
            self._k[:, :, link.start:link.end] = link.k
            self._v[:, :, link.start:link.end] = link.v
            self._held[link.start] = link
            self._held[link.start + 1:link.end] = [None] * (link.end - link.start - 1)  # no other link begins inside
            link = link.before
        self._end = end

"""Rate conversion that keeps its state across chunks, and channel selection."""

from __future__ import annotations

import logging
from enum import Enum

import numpy as np

from voiced.errors import ConfigError

__all__ = ["ResampleQuality", "StreamingResampler", "to_mono"]

logger = logging.getLogger(__name__)


class ResampleQuality(Enum):
    """soxr quality recipes, cheapest first."""

    QUICK = "QQ"
    LOW = "LQ"
    MEDIUM = "MQ"
    HIGH = "HQ"
    VERY_HIGH = "VHQ"


class StreamingResampler:
    """Resamples a stream chunk by chunk with ``soxr.ResampleStream``.

    The filter state carries over between calls, so the concatenated output equals a
    one-shot conversion of the whole signal and chunk boundaries leave no clicks. When
    the rates are equal it hands chunks back unchanged and costs nothing.
    """

    def __init__(self, in_rate: int, out_rate: int, channels: int = 1,
                 quality: ResampleQuality = ResampleQuality.HIGH) -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ConfigError("rate", f"sample rates must be positive, got {in_rate} → {out_rate}")
        if channels < 1:
            raise ConfigError("channels", f"must be at least 1, got {channels}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.channels = channels
        self.quality = quality
        self._stream = None
        if in_rate != out_rate:
            import soxr  # only sources that need conversion pay for the import

            self._stream = soxr.ResampleStream(in_rate, out_rate, channels, dtype="float32", quality=quality.value)

    @property
    def passthrough(self) -> bool:
        """True when input and output rates are equal."""
        return self._stream is None

    def process(self, chunk: np.ndarray, last: bool = False) -> np.ndarray:
        """Convert one chunk (1-D for mono, (n, channels) otherwise); ``last`` flushes the filter.

        Output lengths vary from chunk to chunk by the filter's delay; after ``last`` the
        total is ``len(input) * out_rate / in_rate``, rounded.
        """
        x = np.asarray(chunk, dtype=np.float32)
        if self.channels == 1 and x.ndim == 2 and x.shape[1] == 1:
            x = x[:, 0]
        elif self.channels > 1 and x.size == 0:
            x = x.reshape(0, self.channels)  # an empty flush needs the channel axis too
        if self._stream is None:
            return x
        return self._stream.resample_chunk(np.ascontiguousarray(x), last=last)

    def reset(self) -> None:
        """Forget the state, as for a new stream (after a device was reopened)."""
        if self._stream is not None:
            self._stream.clear()


def to_mono(samples: np.ndarray, channel: int | None = None) -> np.ndarray:
    """One channel of (frames, channels) samples, or their mean when ``channel`` is None.

    1-D input is already mono and comes back as float32.
    """
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim == 1:
        if channel not in (None, 0):
            raise ConfigError("channel", f"channel {channel} requested from mono audio")
        return x
    if x.ndim != 2:
        raise ValueError(f"samples must be (frames, channels), got shape {x.shape}")
    channels = x.shape[1]
    if channel is None:
        return x[:, 0].copy() if channels == 1 else x.mean(axis=1, dtype=np.float32)
    if not 0 <= channel < channels:
        raise ConfigError("channel", f"channel {channel} requested from {channels}-channel audio")
    return np.ascontiguousarray(x[:, channel])

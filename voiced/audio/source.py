"""Where audio comes from: one interface, three sources, all yielding mono float32 at 16 kHz.

- :class:`AlsaSource` captures from an ALSA device (S16_LE, 10 ms periods), falls back to
  the device's own rate and resamples when it cannot do 16 kHz, counts overruns, and
  reopens a lost device with :class:`~voiced.runtime.backoff.Backoff`: device trouble is
  logged and counted, never raised out of :meth:`AudioSource.chunks`.
- :class:`WavSource` plays any WAV file through the same mono/resample path, optionally
  paced to the wall clock.
- :class:`NullSource` yields nothing and blocks until stopped (``audio.source = "none"``).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voiced.audio.frames import SAMPLE_RATE
from voiced.audio.resample import StreamingResampler, to_mono
from voiced.audio.wav import WavReader
from voiced.errors import ConfigError

if TYPE_CHECKING:
    from voiced.audio.alsa import AlsaCaptureConfig

__all__ = ["AudioSource", "NullSource", "SourceKind", "SourceStats", "WavSource", "describe_layout", "open_source",
           "parse_source", "source_relative_to"]

logger = logging.getLogger(__name__)

SOURCE_KEY = "audio.source"


class SourceKind(StrEnum):
    """The scheme of an ``audio.source`` spec."""

    ALSA = "alsa"
    FILE = "file"
    NONE = "none"


@dataclass
class SourceStats:
    """Counters a source keeps for status lines and health checks (written by the capture thread)."""

    chunks: int = 0
    """Chunks yielded."""
    samples_read: int = 0
    """Frames read from the device or file, at its own rate."""
    samples_out: int = 0
    """16 kHz samples yielded."""
    overruns: int = 0
    """Capture overruns (samples lost because the reader fell behind)."""
    read_errors: int = 0
    """Reads that failed with a device error."""
    open_failures: int = 0
    """Attempts to open the device that failed."""
    reopens: int = 0
    """Successful opens after a failed attempt or a lost device."""
    last_error: str | None = None
    """The most recent device error, for status output."""


class AudioSource(ABC):
    """Audio in: ``open()``, iterate ``chunks()``, ``close()``; or use it as a context manager.

    ``stop`` (shared with a supervisor, or made here) ends :meth:`chunks` promptly when set
    from any thread; :meth:`close` belongs to the thread that iterates.
    """

    def __init__(self, stop: threading.Event | None = None) -> None:
        self.stop_event = stop if stop is not None else threading.Event()
        self.stats = SourceStats()

    @property
    def lossless(self) -> bool:
        """No clock drives this source (a file read as fast as it goes): a full queue makes it
        wait instead of dropping audio. Live sources drop the oldest instead."""
        return False

    @abstractmethod
    def open(self) -> None:
        """Acquire the file or device. Calling it again does nothing."""

    @abstractmethod
    def chunks(self) -> Iterator[np.ndarray]:
        """Mono float32 chunks at 16 kHz until the source ends or ``stop`` is set (opens if needed)."""

    @abstractmethod
    def close(self) -> None:
        """Release the file or device. Calling it again does nothing."""

    @abstractmethod
    def describe(self) -> str:
        """One line for status output, e.g. ``alsa:hw:1,0 @48000 Hz→16 kHz``."""

    def stop(self) -> None:
        """Ask :meth:`chunks` to end; safe from any thread."""
        self.stop_event.set()

    def __enter__(self) -> AudioSource:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullSource(AudioSource):
    """No audio at all: :meth:`chunks` blocks until stopped, then ends without yielding."""

    def open(self) -> None:
        pass

    def chunks(self) -> Iterator[np.ndarray]:
        self.stop_event.wait()
        yield from ()

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return SourceKind.NONE.value


class WavSource(AudioSource):
    """A WAV file of any rate and layout as a 16 kHz mono stream, read block by block.

    ``channel`` picks one channel (0-based), None averages them. ``realtime`` paces
    chunks to the wall clock, each due when its last sample would have been spoken,
    measured from the first chunk with ``time.monotonic`` so delays never accumulate.
    """

    def __init__(self, path: str | Path, realtime: bool = False, channel: int | None = None,
                 chunk_ms: int = 100, stop: threading.Event | None = None) -> None:
        super().__init__(stop)
        if chunk_ms < 1:
            raise ConfigError("chunk_ms", f"must be at least 1, got {chunk_ms}")
        if channel is not None and channel < 0:
            raise ConfigError("audio.channel", f"must be >= 0, got {channel}")
        self.path = Path(path)
        self.realtime = realtime
        self.channel = channel
        self.chunk_ms = chunk_ms
        self._reader: WavReader | None = None
        self._resampler: StreamingResampler | None = None
        self._describe = f"file:{self.path}"

    @property
    def lossless(self) -> bool:
        return not self.realtime

    def open(self) -> None:
        if self._reader is not None:
            return
        reader = WavReader(self.path)
        if self.channel is not None and self.channel >= reader.info.channels:
            reader.close()
            raise ConfigError("audio.channel", f"channel {self.channel} requested but {self.path} "
                                               f"has {reader.info.channels} channel(s)")
        self._reader = reader
        self._resampler = StreamingResampler(reader.info.rate, SAMPLE_RATE)
        info = reader.info
        self._describe = (f"file:{self.path} @{info.rate} Hz{describe_layout(info.channels, self.channel)}"
                          f"{'' if info.rate == SAMPLE_RATE else '→16 kHz'}{' (realtime)' if self.realtime else ''}")

    def chunks(self) -> Iterator[np.ndarray]:
        self.open()
        reader, resampler = self._reader, self._resampler
        assert reader is not None and resampler is not None  # set by open()
        block = max(1, round(reader.info.rate * self.chunk_ms / 1000))
        start = time.monotonic()
        while reader.remaining and not self.stop_event.is_set():
            samples = reader.read(block)
            self.stats.samples_read += len(samples)
            out = resampler.process(to_mono(samples, self.channel), last=not reader.remaining)
            if not len(out):
                continue
            if self.realtime:
                due = start + (self.stats.samples_out + len(out)) / SAMPLE_RATE
                if self.stop_event.wait(max(0.0, due - time.monotonic())):
                    return
            self.stats.samples_out += len(out)
            self.stats.chunks += 1
            yield out

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def describe(self) -> str:
        return self._describe


def describe_layout(channels: int, channel: int | None) -> str:
    if channels == 1:
        return ""
    return f" {channels}ch→" + ("mix" if channel is None else f"ch{channel}")


def source_relative_to(spec: str, base: Path) -> str:
    """``spec`` with a relative ``file:PATH`` made relative to ``base`` (the config file's folder); any
    other spec as it is (a malformed one is reported by ``open_source``)."""
    scheme, colon, rest = (spec or "").strip().partition(":")
    if scheme.lower() != SourceKind.FILE.value or not rest.strip() or Path(rest).expanduser().is_absolute():
        return spec
    return f"{scheme}{colon}{base / rest}"


def parse_source(spec: str, config_file: str | None = None) -> tuple[SourceKind, str | None]:
    """``audio.source``'s kind and its device or path (None: ``none``, or a bare ``alsa``); a
    malformed spec raises :class:`ConfigError` naming ``audio.source`` (and ``config_file``)."""
    scheme, colon, rest = (spec or "").strip().partition(":")
    try:
        kind = SourceKind(scheme.lower())
    except ValueError:
        raise ConfigError(SOURCE_KEY, f"{spec!r} is not alsa:DEVICE, alsa, file:PATH or none", config_file) from None
    if kind is SourceKind.NONE:
        if colon:
            raise ConfigError(SOURCE_KEY, f"'none' takes no argument, got {spec!r}", config_file)
        return kind, None
    if kind is SourceKind.ALSA and not colon:
        return kind, None
    if not rest.strip():
        what = "an ALSA device name" if kind is SourceKind.ALSA else "a WAV file path"
        raise ConfigError(SOURCE_KEY, f"{spec!r} needs {what} after '{scheme}:'", config_file)
    return kind, rest.strip() if kind is SourceKind.ALSA else rest


def open_source(spec: str, *, alsa: AlsaCaptureConfig | None = None, channel: int | None = None,
                realtime: bool = False, stop: threading.Event | None = None,
                config_file: str | None = None) -> AudioSource:
    """A source for ``audio.source``: ``alsa:DEVICE``, ``alsa`` (``alsa``'s device), ``file:PATH`` or ``none``.

    ``alsa`` supplies everything but the device for ALSA sources; ``channel`` and
    ``realtime`` apply to files. A malformed spec raises :class:`ConfigError` naming
    ``audio.source`` (and ``config_file``); a missing file is reported by ``open()``.
    """
    kind, rest = parse_source(spec, config_file)
    if kind is SourceKind.NONE:
        return NullSource(stop)
    if kind is SourceKind.ALSA:
        from voiced.audio.alsa import AlsaCaptureConfig, AlsaSource

        if rest is not None:
            return AlsaSource(replace(alsa or AlsaCaptureConfig(), device=rest), stop=stop)
        if alsa is None:  # bare "alsa" means the caller's device, and this caller has none
            raise ConfigError(SOURCE_KEY, f"{spec!r} needs an ALSA device name after 'alsa:'", config_file)
        return AlsaSource(alsa, stop=stop)
    return WavSource(rest, realtime=realtime, channel=channel, stop=stop)

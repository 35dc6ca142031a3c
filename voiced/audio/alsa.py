"""ALSA capture with pyalsaaudio: 10 ms periods of S16_LE, resampled when the device cannot do 16 kHz.

Device trouble (overruns, read errors, a device that vanishes) is logged and counted, and
the device is reopened with :class:`~voiced.runtime.backoff.Backoff`; nothing is raised
out of :meth:`AlsaSource.chunks`.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from voiced.audio.alsalog import route_libasound_messages
from voiced.audio.frames import FRAME_MS, SAMPLE_RATE
from voiced.audio.resample import StreamingResampler, to_mono
from voiced.audio.source import AudioSource, describe_layout
from voiced.configfile import section_from_dict
from voiced.errors import AudioError, ConfigError
from voiced.runtime.backoff import Backoff, BackoffPolicy
from voiced.runtime.lograte import sparse_level

__all__ = ["IDLE_S", "AlsaCaptureConfig", "AlsaSource", "PcmOpener"]

logger = logging.getLogger(__name__)

IDLE_S = 1.0
"""While the device is missing, ``chunks`` yields an empty chunk at least this often (the daemon's
stall limit is 10 s; the backoff waits up to 30 s)."""
_NOTHING = np.zeros(0, np.float32)

REMIND_ATTEMPTS = 20
HEALTHY_S = 5.0
"""A device that captured this long before a read failed was working: it is reopened at once and
its backoff starts afresh. One that fails sooner (a flaky USB microphone failing every read after
its first buffer) is reopened with backoff, as one that cannot be opened is."""
"""A device that stays missing is warned about again every this many open attempts (about ten
minutes at the default backoff's 30 s)."""


@dataclass(frozen=True)
class AlsaCaptureConfig:
    """How to capture from an ALSA device."""

    device: str = "default"
    """ALSA PCM name, e.g. ``hw:1,0``, ``plughw:1,0``, ``default`` or one from an asoundrc."""
    rate: int = SAMPLE_RATE
    """Rate to ask for first; 16 kHz needs no resampling."""
    fallback_rate: int = 48_000
    """Rate to capture at when opening at ``rate`` fails; then resampled to 16 kHz."""
    channels: int = 1
    """Channels to capture (some USB arrays only open with 2 or more)."""
    channel: int | None = None
    """0-based channel to keep, or None to average all channels."""
    period_ms: int = FRAME_MS
    """ALSA period, i.e. the size of each read, in milliseconds."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    """Delays between attempts to open a missing or lost device."""

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not self.device.strip():
            raise ConfigError("device", f"must be a non-empty ALSA PCM name, got {self.device!r}")
        for name in ("rate", "fallback_rate"):
            value = getattr(self, name)
            if not _is_int(value) or not 4_000 <= value <= 384_000:
                raise ConfigError(name, f"must be an integer rate within 4000..384000 Hz, got {value!r}")
        if not _is_int(self.channels) or not 1 <= self.channels <= 32:
            raise ConfigError("channels", f"must be within 1..32, got {self.channels!r}")
        if self.channel is not None and (not _is_int(self.channel) or not 0 <= self.channel < self.channels):
            raise ConfigError("channel", f"must be unset or within 0..{self.channels - 1} (channels = {self.channels}),"
                                         f" got {self.channel!r}")
        if not _is_int(self.period_ms) or not 1 <= self.period_ms <= 1000:
            raise ConfigError("period_ms", f"must be within 1..1000 ms, got {self.period_ms!r}")
        if not isinstance(self.backoff, BackoffPolicy):
            raise ConfigError("backoff", f"must be a BackoffPolicy, got {type(self.backoff).__name__}")

    def period_frames(self, rate: int) -> int:
        """Frames in one period at ``rate``."""
        return max(1, rate * self.period_ms // 1000)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None,
                  prefix: str = "audio.capture") -> AlsaCaptureConfig:
        """Build from a TOML table; errors name ``prefix.key`` and ``source`` (the file)."""
        return section_from_dict(cls, data, prefix, source)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class PcmLike(Protocol):
    """The part of ``alsaaudio.PCM`` that capture uses."""

    def read(self) -> tuple[int, bytes]: ...
    def info(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


PcmOpener = Callable[[str, int, int, int], PcmLike]
"""Opens a capture PCM: (device, rate, channels, period frames) → PCM."""


def _open_alsa_pcm(device: str, rate: int, channels: int, period: int) -> PcmLike:
    import alsaaudio

    route_libasound_messages()  # a device that stays missing is retried for as long: keep stderr for voiced's log

    return alsaaudio.PCM(type=alsaaudio.PCM_CAPTURE, mode=alsaaudio.PCM_NORMAL, device=device,
                         channels=channels, rate=rate, format=alsaaudio.PCM_FORMAT_S16_LE, periodsize=period)


class AlsaSource(AudioSource):
    """Capture from ALSA as 16 kHz mono float32, surviving overruns and lost devices.

    ``open_pcm`` replaces pyalsaaudio (tests use it to script device behaviour); its
    errors of type ``OSError`` count as device errors, like ``alsaaudio.ALSAAudioError``.
    """

    def __init__(self, config: AlsaCaptureConfig, stop: threading.Event | None = None,
                 open_pcm: PcmOpener | None = None) -> None:
        super().__init__(stop)
        self.config = config
        self._open_pcm = open_pcm
        self._device_errors: tuple[type[BaseException], ...] = (OSError,)
        self._backoff = Backoff(config.backoff)
        self._pcm: PcmLike | None = None
        self._rate: int | None = None  # what the device actually captures at
        self._channels = config.channels
        self._resampler: StreamingResampler | None = None
        self._opened = False
        self._wait_before_open = False  # the last attempt failed: back off before the next
        self._troubled = False  # a failure happened since the last good open
        self._heard = 0  # frames captured since the device was last opened
        self._quick_failures = 0  # reads that failed before HEALTHY_S of capture, in a row

    @property
    def capturing(self) -> bool:
        """Whether the device is open now (after :meth:`open`: whether its first attempt worked)."""
        return self._pcm is not None

    @property
    def capture_rate(self) -> int | None:
        """The rate the device captures at, once open."""
        return self._rate

    def open(self) -> None:
        """Try the device once; if it is missing, :meth:`chunks` keeps retrying with backoff."""
        if self._opened:
            return
        if self._open_pcm is None:
            try:
                import alsaaudio
            except ImportError as e:
                raise AudioError("pyalsaaudio is not installed (pip install pyalsaaudio; "
                                 "needs libasound2-dev)") from e
            self._open_pcm = _open_alsa_pcm
            self._device_errors = (OSError, alsaaudio.ALSAAudioError)
        self._opened = True
        self._try_open()

    def chunks(self) -> Iterator[np.ndarray]:
        """Captured 16 kHz mono chunks; while the device is missing, an empty chunk at least every
        ``IDLE_S`` (see ``_reopening``)."""
        self.open()
        try:
            while not self.stop_event.is_set():
                if self._pcm is None:
                    yield from self._reopening()
                    if self._pcm is None:  # stopped
                        return
                chunk = self._read_chunk()
                if chunk is not None:
                    yield chunk
        finally:
            self._close_pcm()

    def close(self) -> None:
        self._close_pcm()
        self._opened = False

    def describe(self) -> str:
        text = f"alsa:{self.config.device}"
        if self._rate is None:
            return text + " (not open)"
        text += f" @{self._rate} Hz" + describe_layout(self._channels, self.config.channel)
        text += "" if self._rate == SAMPLE_RATE else "→16 kHz"
        return text + (" (reconnecting)" if self._pcm is None and self._troubled else "")

    # -- device handling ---------------------------------------------------------------

    def _reopening(self) -> Iterator[np.ndarray]:
        """Open the device, backing off between failed attempts (up to ``backoff.maximum``, 30 s by
        default), until it opens or the source is stopped. An empty chunk every ``IDLE_S`` meanwhile:
        whoever reads the chunks goes on (the daemon's capture stage beats its heartbeat with each;
        a wait without one stalled it, and the watchdog had systemd restart a daemon whose
        microphone was merely unplugged)."""
        while not self.stop_event.is_set():
            if self._wait_before_open:
                until = time.monotonic() + self._backoff.next_delay()
                while not self.stop_event.wait(max(0.0, min(IDLE_S, until - time.monotonic()))):
                    if time.monotonic() >= until:
                        break
                    yield _NOTHING
                if self.stop_event.is_set():
                    return
            if self._try_open():
                return
            yield _NOTHING

    def _try_open(self) -> bool:
        cfg = self.config
        try:
            pcm, rate, channels = self._negotiate()
            if cfg.channel is not None and cfg.channel >= channels:
                pcm.close()
                raise OSError(errno.EINVAL, f"device gives {channels} channel(s), channel {cfg.channel} wanted")
        except self._device_errors as e:
            self.stats.open_failures += 1
            attempt, changed = self._backoff.failures + 1, str(e) != self.stats.last_error
            self.stats.last_error = str(e)
            self._wait_before_open = self._troubled = True
            # An unplugged microphone is retried for as long as it is gone: the first failure, a new
            # error and every REMIND_ATTEMPTS-th attempt are warnings, the rest debug lines.
            level = logging.WARNING if changed else sparse_level(attempt, every=REMIND_ATTEMPTS)
            logger.log(level, "cannot open capture device %s: %s (attempt %d)", cfg.device, e, attempt)
            return False
        if self._troubled:
            self.stats.reopens += 1
        self._pcm, self._rate, self._channels = pcm, rate, channels
        self._resampler = StreamingResampler(rate, SAMPLE_RATE)  # a new stream: no stale filter state
        self._wait_before_open = self._troubled = False
        self._heard = 0
        logger.info("capturing from %s", self.describe())
        return True

    def _negotiate(self) -> tuple[PcmLike, int, int]:
        """Open at ``rate``, else at ``fallback_rate``; then at whatever rate the device offers."""
        cfg, open_pcm = self.config, self._open_pcm
        assert open_pcm is not None  # set by open()
        rate = cfg.rate
        try:
            pcm = open_pcm(cfg.device, rate, cfg.channels, cfg.period_frames(rate))
        except self._device_errors as e:
            if cfg.fallback_rate == rate:
                raise
            rate = cfg.fallback_rate
            pcm = open_pcm(cfg.device, rate, cfg.channels, cfg.period_frames(rate))  # its error is the one reported
            # said once it worked: a missing device fails both opens at every attempt
            logger.info("%s cannot open at %d Hz (%s); opened at %d Hz", cfg.device, cfg.rate, e, rate)
        actual, channels = _reported(pcm, rate, cfg.channels)
        if actual != rate:
            # The device chose the nearest rate it can do: reopen there, so a period stays period_ms.
            logger.info("%s captures at %d Hz, not %d Hz; resampling to 16 kHz", cfg.device, actual, rate)
            pcm.close()
            pcm = open_pcm(cfg.device, actual, cfg.channels, cfg.period_frames(actual))
            actual, channels = _reported(pcm, actual, cfg.channels)
        return pcm, actual, channels

    def _read_chunk(self) -> np.ndarray | None:
        assert self._pcm is not None and self._resampler is not None
        try:
            n, data = self._pcm.read()
            if n < 0 and n != -errno.EPIPE:
                raise OSError(-n, f"read returned error {n}")
        except self._device_errors as e:
            self._read_failed(e)
            return None
        if n < 0:  # overrun: samples were lost; pyalsaaudio re-prepares on the next read
            self.stats.overruns += 1
            logger.log(sparse_level(self.stats.overruns), "capture overrun on %s (%d so far)", self.config.device,
                       self.stats.overruns)
            return None
        frames = len(data) // (2 * self._channels)
        if frames == 0:  # nothing available: wait a period instead of spinning
            self.stop_event.wait(self.config.period_ms / 1000)
            return None
        self._heard += frames
        pcm = np.frombuffer(data, "<i2", count=frames * self._channels).reshape(frames, self._channels)
        self.stats.samples_read += frames
        out = self._resampler.process(to_mono(pcm.astype(np.float32) / 32768.0, self.config.channel))
        if not len(out):
            return None
        self.stats.samples_out += len(out)
        self.stats.chunks += 1
        return out

    def _read_failed(self, error: BaseException) -> None:
        """Close the device to reopen it: at once after a healthy run, else with backoff (a device
        failing every read soon after opening was reopened in a tight loop, a warning each time)."""
        healthy = self._rate is not None and self._heard >= HEALTHY_S * self._rate
        changed = str(error) != self.stats.last_error
        self.stats.read_errors += 1
        self.stats.last_error = str(error)
        if healthy:
            self._backoff.reset()
            self._quick_failures = 0
        else:
            self._quick_failures += 1
        level = logging.WARNING if healthy or changed else sparse_level(self._quick_failures, every=REMIND_ATTEMPTS)
        logger.log(level, "capture from %s failed: %s; reopening%s", self.config.device, error,
                   "" if healthy else f" (failure {self._quick_failures} within {HEALTHY_S:g} s of opening)")
        self._close_pcm()
        self._wait_before_open, self._troubled = not healthy, True

    def _close_pcm(self) -> None:
        pcm, self._pcm = self._pcm, None
        if pcm is not None:
            try:
                pcm.close()
            except self._device_errors as e:
                logger.debug("closing %s: %s", self.config.device, e)


def _reported(pcm: PcmLike, rate: int, channels: int) -> tuple[int, int]:
    """The rate and channel count the PCM actually runs at (pyalsaaudio picks the nearest)."""
    info = pcm.info()
    return int(info.get("rate", rate)), int(info.get("channels", channels))

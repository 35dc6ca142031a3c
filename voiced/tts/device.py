"""One ALSA playback device behind open / write / drain / close, with rate negotiation and underrun recovery.

Used by the playback thread only; not thread-safe. Writes are interruptible between
periods through an event, so a stop takes effect within one period. An underrun
(-EPIPE, state XRUN) is counted and writing goes on: pyalsaaudio prepares an XRUN PCM
again at the next write. Any other write error reopens the device once at the same rate;
if that fails, :class:`DeviceLost` is raised.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from voiced.audio.alsalog import route_libasound_messages
from voiced.tts.playconfig import PlaybackConfig, PlaybackStats

__all__ = ["AlsaOutput", "DeviceLost", "PcmLike", "PcmOpener", "open_alsa_pcm"]

log = logging.getLogger(__name__)

# snd_pcm_state_t values (ALSA ABI; pyalsaaudio's PCM_STATE_* are the same numbers).
STATE_RUNNING = 3
STATE_XRUN = 4
_MAX_RETRIES = 8  # consecutive underruns on one write before the device counts as broken


class PcmLike(Protocol):
    """The part of ``alsaaudio.PCM`` playback uses."""

    def write(self, data: bytes) -> int: ...
    def state(self) -> int: ...
    def avail(self) -> int: ...
    def info(self) -> dict[str, Any]: ...
    def drop(self) -> Any: ...
    def drain(self) -> Any: ...
    def close(self) -> None: ...


PcmOpener = Callable[[str, int, int, int, int], PcmLike]
"""Opens a playback PCM: (device, rate, channels, period frames, periods) → PCM."""


def open_alsa_pcm(device: str, rate: int, channels: int, period: int, periods: int) -> PcmLike:
    """pyalsaaudio's blocking S16_LE playback PCM."""
    import alsaaudio

    route_libasound_messages()

    return alsaaudio.PCM(type=alsaaudio.PCM_PLAYBACK, mode=alsaaudio.PCM_NORMAL, device=device, channels=channels,
                         rate=rate, format=alsaaudio.PCM_FORMAT_S16_LE, periodsize=period, periods=periods)


class DeviceLost(Exception):
    """The device failed and could not be reopened; the message says why."""


class AlsaOutput:
    """A playback PCM: opened at a rate, written period by period, drained or dropped, closed."""

    def __init__(self, config: PlaybackConfig, open_pcm: PcmOpener, device_errors: tuple[type[BaseException], ...],
                 stats: PlaybackStats) -> None:
        self.config = config
        self.stats = stats
        self._open_pcm = open_pcm
        self._errors = device_errors
        self._pcm: PcmLike | None = None
        self.rate: int | None = None
        """Rate the device runs at, None when closed."""
        self.channels = config.channels
        """Channels the device runs with."""
        self.period = 0
        """Frames per period."""
        self.buffer = 0
        """Frames the device buffer holds."""

    @property
    def is_open(self) -> bool:
        return self._pcm is not None

    @property
    def frame_bytes(self) -> int:
        return 2 * self.channels

    def open(self, rate: int) -> bool:
        """Open at ``config.rate`` or ``rate``, else ``fallback_rate``, then at whatever rate the device picks.

        False (counted, logged, ``stats.last_error`` set) when the device cannot be opened.
        """
        cfg, open_pcm = self.config, self._open_pcm
        want = cfg.rate or rate
        try:
            try:
                pcm = open_pcm(cfg.pcm, want, cfg.channels, cfg.period_frames(want), cfg.periods)
            except self._errors as e:
                if cfg.fallback_rate == want:
                    raise
                log.info("%s cannot play at %d Hz (%s); trying %d Hz", cfg.pcm, want, e, cfg.fallback_rate)
                want = cfg.fallback_rate
                pcm = open_pcm(cfg.pcm, want, cfg.channels, cfg.period_frames(want), cfg.periods)
            info = pcm.info()
            actual = int(info.get("rate", want))
            if actual != want:  # the device picked the nearest rate it can do: reopen there
                log.info("%s plays at %d Hz, not %d Hz; resampling", cfg.pcm, actual, want)
                pcm.close()
                pcm = open_pcm(cfg.pcm, actual, cfg.channels, cfg.period_frames(actual), cfg.periods)
                info = pcm.info()
        except self._errors as e:
            self.stats.open_failures += 1
            self.stats.last_error = f"cannot open playback device {cfg.pcm}: {e}"
            log.warning("%s", self.stats.last_error)
            return False
        self._pcm, self.rate = pcm, int(info.get("rate", actual))
        self.channels = int(info.get("channels", cfg.channels))
        self.period = int(info.get("period_size", cfg.period_frames(self.rate)))
        self.buffer = int(info.get("buffer_size", self.period * cfg.periods))
        log.debug("playing on %s at %d Hz, %d ch, period %d, buffer %d", cfg.pcm, self.rate, self.channels,
                  self.period, self.buffer)
        return True

    def write(self, data: bytes, stop: threading.Event) -> tuple[int, int]:
        """Write whole frames of ``data`` unless ``stop`` is set; return (frames written, underruns).

        Raises :class:`DeviceLost` when the device fails and cannot be reopened.
        """
        written = underruns = failures = offset = 0
        counted = False  # the XRUN the state shows now was counted when the write failed
        while offset < len(data) and not stop.is_set():
            pcm = self._pcm
            if pcm is None:
                raise DeviceLost(f"playback device {self.config.pcm} is not open")
            try:
                if not counted and pcm.state() == STATE_XRUN:
                    underruns += 1  # pyalsaaudio prepares the PCM again inside write()
                counted = False
                n = pcm.write(data[offset:])
            except self._errors as e:
                failures += 1
                if self._in_xrun(e) and failures < _MAX_RETRIES:
                    underruns += 1
                    counted = True
                    continue
                self._reopen(e)
                failures = 0
                continue
            if n < 0:  # older pyalsaaudio returned -EPIPE instead of raising
                failures += 1
                if n == -errno.EPIPE and failures < _MAX_RETRIES:
                    underruns += 1
                    counted = True
                    continue
                self._reopen(OSError(-n, f"write returned {n}"))
                failures = 0
                continue
            if n == 0:  # no room (non-blocking devices): wait a fraction of a period
                time.sleep(self.config.period_ms / 4000)
                continue
            failures = 0
            offset += n * self.frame_bytes
            written += n
        self.stats.frames_written += written
        self.stats.underruns += underruns
        return written, underruns

    def drain(self, stop: threading.Event) -> None:
        """Wait until the device has played what it holds, checking ``stop`` every period."""
        pcm, rate = self._pcm, self.rate
        if pcm is None or rate is None:
            return
        deadline = time.monotonic() + 2.0 + 2 * self.buffer / rate
        try:
            while time.monotonic() < deadline and not stop.is_set():
                if pcm.state() != STATE_RUNNING or pcm.avail() >= self.buffer:
                    break
                stop.wait(self.config.period_ms / 1000)
            if not stop.is_set():
                pcm.drain()
        except self._errors as e:
            log.debug("draining %s: %s", self.config.pcm, e)

    def close(self, drop: bool) -> None:
        """Close; with ``drop`` what the device still holds is discarded first (stop means now)."""
        pcm, self._pcm, self.rate = self._pcm, None, None
        if pcm is None:
            return
        try:
            if drop:
                pcm.drop()
            pcm.close()
        except self._errors as e:
            log.debug("closing %s: %s", self.config.pcm, e)

    def _in_xrun(self, error: BaseException) -> bool:
        try:
            return self._pcm is not None and self._pcm.state() == STATE_XRUN
        except self._errors:
            return "Broken pipe" in str(error)

    def _reopen(self, error: BaseException) -> None:
        """A write failed: reopen once at the same rate, else DeviceLost."""
        rate = self.rate
        self.stats.write_errors += 1
        self.stats.last_error = f"{self.config.pcm}: {error}"
        log.warning("playback device %s failed (%s); reopening", self.config.pcm, error)
        self.close(drop=True)
        if rate is None or not self.open(rate):
            raise DeviceLost(f"playback device {self.config.pcm} lost: {error}")

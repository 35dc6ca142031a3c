"""ALSA playback on a thread of its own: streams of synthesized chunks in, S16_LE periods out.

    player = AlsaPlayer(PlaybackConfig(device="default"), cpus={1})
    stream = player.stream(volume=0.8)       # one utterance
    for chunk in voice.synthesize(text):
        stream.write(chunk)                  # waits while the queue is full; False once stopped
    stream.close()                           # the rest plays out, then the device is closed
    result = stream.wait()                   # PlaybackResult: COMPLETED / INTERRUPTED / FAILED
    player.stop()                            # from any thread: cuts every stream off now

Streams play one after another. The device is opened at a stream's first chunk, at the
audio's own rate (or ``PlaybackConfig.rate``; see :class:`~voiced.tts.device.AlsaOutput`
for the fallbacks) and closed after the stream has played out, so other programs can use
it in between. Audio is resampled with soxr (:class:`StreamingResampler`, state kept
across a stream's chunks) to whatever rate the device runs at, scaled by the player's and
the stream's volume, and written in whole periods. :meth:`AlsaPlayer.stop` is seen
between periods and drops what the device still holds, so sound stops within about one
period. Nothing is raised out of the playback thread: device trouble ends the stream
FAILED, counted in :attr:`AlsaPlayer.stats`, and the next stream tries the device again.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Self

import numpy as np

from voiced.audio.resample import StreamingResampler
from voiced.errors import AudioError, ConfigError
from voiced.runtime.affinity import name_current_thread, pin_current_thread
from voiced.tts.audio import AudioChunk
from voiced.tts.device import AlsaOutput, DeviceLost, PcmOpener, open_alsa_pcm
from voiced.tts.playconfig import PlaybackConfig, PlaybackOutcome, PlaybackResult, PlaybackStats

__all__ = ["AlsaPlayer", "PlaybackStream"]

log = logging.getLogger(__name__)

_END = object()  # queue item closing a stream


class PlaybackStream:
    """One utterance on its way to the device; made by :meth:`AlsaPlayer.stream`."""

    def __init__(self, player: AlsaPlayer, volume: float, on_wait: Callable[[], None] | None = None,
                 on_start: Callable[[], None] | None = None) -> None:
        if not 0 <= volume <= 1:
            raise ConfigError("volume", f"must be within 0..1, got {volume!r}")
        self._player = player
        self.volume = volume
        """Gain of this stream, on top of the player's."""
        self._on_wait = on_wait
        self._on_start = on_start
        self._started = False  # the device opened for it: on_start has run
        self.interrupted = threading.Event()
        """Set by :meth:`AlsaPlayer.stop`."""
        self.done = threading.Event()
        """Set once :attr:`result` is there."""
        self.result: PlaybackResult | None = None
        self._closed = False
        self._frames = 0
        self._underruns = 0
        self._rate: int | None = None
        self._error: str | None = None
        self._lock = threading.Lock()

    def write(self, chunk: AudioChunk) -> bool:
        """Queue ``chunk`` (waiting while the queue is full); False once the stream is stopped or finished."""
        if self._closed:
            raise ValueError("write() after close()")
        return self._player._put(self, chunk)

    def close(self) -> None:
        """No more audio: the queued rest plays out, then the stream finishes."""
        if not self._closed:
            self._closed = True
            self._player._put(self, _END)

    def wait(self, timeout: float | None = None) -> PlaybackResult | None:
        """The result once the stream has finished, or None after ``timeout`` seconds."""
        return self.result if self.done.wait(timeout) else None

    def _finish(self, outcome: PlaybackOutcome, error: str | None = None) -> bool:
        with self._lock:
            if self.done.is_set():
                return False
            self.result = PlaybackResult(outcome, self._frames, self._underruns, self._rate, error or self._error)
            self.done.set()
            return True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AlsaPlayer:
    """Plays :class:`PlaybackStream` s one after another on a thread of its own.

    ``open_pcm`` replaces pyalsaaudio (tests script devices with it); its ``OSError`` s
    count as device errors like ``alsaaudio.ALSAAudioError``. ``cpus`` pins the thread
    (:func:`~voiced.runtime.affinity.pin_current_thread`); ``on_thread_start`` runs first
    thing in it (to pin it another way, or set its priority).
    """

    def __init__(self, config: PlaybackConfig | None = None, *, open_pcm: PcmOpener | None = None,
                 cpus: Iterable[int] | None = None, on_thread_start: Callable[[], None] | None = None,
                 name: str = "play") -> None:
        self.config = config or PlaybackConfig()
        self.stats = PlaybackStats()
        self._open_pcm = open_pcm
        self._cpus = None if cpus is None else frozenset(cpus)
        self._on_thread_start = on_thread_start
        self._name = name
        self._volume = float(self.config.volume)
        self._queue: queue.Queue[tuple[PlaybackStream, object]] = queue.Queue(self.config.queue_chunks)
        self._lock = threading.Lock()  # guards _live and _active against stop()
        self._live: set[PlaybackStream] = set()
        self._active: PlaybackStream | None = None
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._out: AlsaOutput | None = None
        # touched only by the playback thread
        self._resampler: StreamingResampler | None = None
        self._pending = b""

    @property
    def volume(self) -> float:
        """Gain applied to every stream, settable at any time (takes effect at the next chunk)."""
        return self._volume

    @volume.setter
    def volume(self, value: float) -> None:
        if not 0 <= value <= 1:
            raise ConfigError("volume", f"must be within 0..1, got {value!r}")
        self._volume = float(value)

    @property
    def running(self) -> bool:
        """The playback thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def device_rate(self) -> int | None:
        """Rate the device is open at, None when closed."""
        return self._out.rate if self._out else None

    def start(self) -> None:
        """Start the playback thread (the first :meth:`stream` does it otherwise)."""
        if self._thread is not None:
            return
        self._closing.clear()
        errors: tuple[type[BaseException], ...] = (OSError,)
        if self._open_pcm is None:
            try:
                import alsaaudio
            except ImportError as e:
                raise AudioError("pyalsaaudio is not installed (pip install pyalsaaudio; needs libasound2-dev)") from e
            self._open_pcm = open_alsa_pcm
            errors = (OSError, alsaaudio.ALSAAudioError)
        self._out = AlsaOutput(self.config, self._open_pcm, errors, self.stats)
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stream(self, volume: float = 1.0, on_wait: Callable[[], None] | None = None,
               on_start: Callable[[], None] | None = None) -> PlaybackStream:
        """A new stream; it plays after the streams made before it.

        ``on_wait`` is called every 50 ms while a write waits for room in the queue (a
        supervised writer beats its heartbeat there). ``on_start`` is called on the playback
        thread once the device is open for the stream, just before its first audio is written;
        never for a stream whose device cannot be opened, or that is stopped first.
        """
        self.start()
        stream = PlaybackStream(self, volume, on_wait, on_start)
        with self._lock:
            self._live.add(stream)
            self.stats.streams += 1
        return stream

    def stop(self) -> None:
        """Interrupt every stream now: the device drops what it holds, queued audio is discarded."""
        with self._lock:
            for s in list(self._live):
                s.interrupted.set()
                if s is not self._active:  # the playback thread finishes the active one once it has dropped
                    self._done(s, PlaybackOutcome.INTERRUPTED)
            if self._active is None:
                # Between two chunks the device still holds the stream's last periods; with the lock held and
                # nothing active the playback thread is not touching it, so drop them here.
                self._close_device(drop=True)

    def close(self, timeout: float = 5.0) -> None:
        """Stop playing and end the thread."""
        self.stop()
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the queue -------------------------------------------------------------------------

    def _put(self, stream: PlaybackStream, item: object) -> bool:
        while not self._closing.is_set():
            if stream.done.is_set() or (stream.interrupted.is_set() and item is not _END):
                return False
            try:
                self._queue.put((stream, item), timeout=0.05)
                return True
            except queue.Full:
                if stream._on_wait is not None:
                    stream._on_wait()
        return False

    def _done(self, stream: PlaybackStream, outcome: PlaybackOutcome, error: str | None = None) -> None:
        if stream._finish(outcome, error) and outcome is PlaybackOutcome.INTERRUPTED:
            self.stats.interrupted += 1
        self._live.discard(stream)

    # -- the playback thread ---------------------------------------------------------------

    def _run(self) -> None:
        name_current_thread(self._name)
        if self._cpus is not None:
            pin_current_thread(self._cpus)
        if self._on_thread_start is not None:
            self._on_thread_start()
        try:
            while not self._closing.is_set():
                try:
                    stream, item = self._queue.get(timeout=0.1)
                except queue.Empty:
                    continue
                self._handle(stream, item)
        finally:
            self._close_device(drop=True)

    def _handle(self, stream: PlaybackStream, item: object) -> None:
        with self._lock:
            if stream.done.is_set():
                return  # interrupted or failed before this item came up
            self._active = stream
        try:
            if item is _END:
                self._end(stream)
            elif stream._error is None:
                assert isinstance(item, AudioChunk)
                self._play(stream, item)
        except DeviceLost as e:
            self._close_device(drop=True)
            stream._error = str(e)
            log.warning("%s", e)
            if item is _END:
                self._done(stream, PlaybackOutcome.FAILED)
        finally:
            with self._lock:
                self._active = None
                if stream.interrupted.is_set():
                    self._close_device(drop=True)
                    self._done(stream, PlaybackOutcome.INTERRUPTED)

    def _play(self, stream: PlaybackStream, chunk: AudioChunk) -> None:
        out = self._out
        assert out is not None
        if not out.is_open and not out.open(chunk.sample_rate):
            stream._error = self.stats.last_error  # the rest of the stream is skipped; reported at its end
            return
        stream._rate = out.rate
        if not stream._started and not stream.interrupted.is_set():
            stream._started = True
            if stream._on_start is not None:
                try:
                    stream._on_start()
                except Exception:  # nothing is raised out of the playback thread
                    log.exception("on_start callback failed")
        if self._resampler is None or self._resampler.in_rate != chunk.sample_rate:
            self._flush_resampler(stream)
            assert out.rate is not None
            self._resampler = StreamingResampler(chunk.sample_rate, out.rate)
        self._pending += self._convert(chunk.samples, stream, last=False)
        self._write_periods(stream, final=False)

    def _end(self, stream: PlaybackStream) -> None:
        out = self._out
        assert out is not None
        if stream._error is None and out.is_open:
            self._flush_resampler(stream)
            self._write_periods(stream, final=True)
            out.drain(stream.interrupted)
        self._close_device(drop=stream.interrupted.is_set())
        if not stream.interrupted.is_set():  # else _handle finishes it as INTERRUPTED
            self._done(stream, PlaybackOutcome.FAILED if stream._error else PlaybackOutcome.COMPLETED)

    def _close_device(self, drop: bool) -> None:
        if self._out is not None:
            self._out.close(drop)
        self._resampler, self._pending = None, b""

    # -- audio -----------------------------------------------------------------------------

    def _convert(self, samples: np.ndarray, stream: PlaybackStream, last: bool) -> bytes:
        """int16 at the chunk's rate → S16_LE interleaved at the device's rate and channels."""
        assert self._resampler is not None and self._out is not None
        gain = self._volume * stream.volume
        if self._resampler.passthrough and gain == 1.0:
            pcm = samples.astype("<i2", copy=False)  # bit-exact: what the voice made is what the device gets
        else:
            x = self._resampler.process(samples.astype(np.float32) / 32768.0, last=last)
            pcm = np.clip(np.round(x * (32768.0 * gain)), -32768, 32767).astype("<i2")
        if self._out.channels > 1:
            pcm = np.repeat(pcm, self._out.channels)
        return pcm.tobytes()

    def _flush_resampler(self, stream: PlaybackStream) -> None:
        if self._resampler is not None and not self._resampler.passthrough:
            self._pending += self._convert(np.zeros(0, np.int16), stream, last=True)
        self._resampler = None

    def _write_periods(self, stream: PlaybackStream, final: bool) -> None:
        """Write whole periods of the pending audio (and, with ``final``, the rest)."""
        out = self._out
        assert out is not None
        period_bytes = out.period * out.frame_bytes
        while self._pending and (final or len(self._pending) >= period_bytes) and not stream.interrupted.is_set():
            n = min(period_bytes, len(self._pending) - len(self._pending) % out.frame_bytes)
            if n == 0:
                break
            data, self._pending = self._pending[:n], self._pending[n:]
            frames, underruns = out.write(data, stream.interrupted)
            stream._frames += frames
            if underruns:
                stream._underruns += underruns
                log.log(logging.WARNING if stream._underruns == underruns else logging.DEBUG,
                        "playback underrun on %s (%d in this stream): synthesis fell behind",
                        self.config.device, stream._underruns)

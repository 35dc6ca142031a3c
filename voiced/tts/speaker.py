"""The speaker: requests in, synthesis → playback on a thread of its own, half-duplex signalling out.

    speaker = Speaker(voice, AlsaPlayer(PlaybackConfig(device="default")), SpeakerConfig(tail_ms=300),
                      on_speaking=lambda on: capture_muted.set() if on else capture_muted.clear(),
                      on_finished=lambda req: publish_say_finished(req))
    speaker.start()                          # or run speaker.run(stop, beat) as a supervised stage
    req = speaker.say("It is 7 degrees. Rain later.", volume=0.8, request_id="abc")
    speaker.play(chunk)                      # e.g. hermes playBytes, via wav_to_chunk(payload)
    speaker.interrupt()                      # barge-in: the current request and all queued ones end
    speaker.close()

Requests run one at a time in arrival order. A ``say`` is synthesized sentence by
sentence while earlier sentences play. ``on_speaking(True)`` comes (on the playback thread)
once the device is open, just before the first audio of a request is written to it, so a
device that cannot be opened never turns it on; ``on_speaking(False)`` once nothing is queued and
``tail_ms`` has passed since the last request finished (so the microphone does not hear
the end of the reply, or the room's echo of it). Back-to-back requests keep it True.

``on_finished(request)`` runs on the speak thread for every request, with
``request.result`` set: COMPLETED, INTERRUPTED (by :meth:`Speaker.interrupt` or
shutdown), or FAILED with the error (empty or too-long text, device lost, …); text with
nothing to say (punctuation only) is COMPLETED with no audio. The one
exception: a request refused because ``max_pending`` are already waiting finishes FAILED
at once, in the caller's thread. Callbacks must be quick; their exceptions are logged.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from voiced.errors import ConfigError, VoicedError
from voiced.runtime.affinity import name_current_thread, pin_current_thread
from voiced.runtime.onnx import RunCancel
from voiced.tts.audio import AudioChunk
from voiced.tts.config import SynthesisOptions
from voiced.tts.errors import NothingToSpeak, SynthesisCancelled
from voiced.tts.playback import AlsaPlayer, PlaybackStream
from voiced.tts.playconfig import PlaybackOutcome, PlaybackResult
from voiced.tts.requests import (
    RequestKind,
    SpeakerConfig,
    SpeakerStats,
    SpeechOutcome,
    SpeechRequest,
    SpeechResult,
)
from voiced.tts.voice import PiperVoice

__all__ = ["Speaker"]

log = logging.getLogger(__name__)


@dataclass
class _Progress:
    """What a request has done so far (speak thread only)."""

    queued_s: float
    sentences: int = 0
    audio_s: float = 0.0
    synth_s: float = 0.0
    first_audio_s: float | None = None
    played_frames: int = 0
    underruns: int = 0
    error: str | None = None

    def result(self, outcome: SpeechOutcome) -> SpeechResult:
        return SpeechResult(outcome, self.error if outcome is SpeechOutcome.FAILED else None,
                            sentences=self.sentences, audio_s=self.audio_s, played_frames=self.played_frames,
                            underruns=self.underruns, queued_s=self.queued_s, first_audio_s=self.first_audio_s,
                            synth_s=self.synth_s)


class Speaker:
    """Runs requests through a voice and a player, one at a time, on the speak thread."""

    def __init__(self, voice: PiperVoice | None, player: AlsaPlayer, config: SpeakerConfig | None = None, *,
                 on_speaking: Callable[[bool], None] | None = None,
                 on_finished: Callable[[SpeechRequest], None] | None = None,
                 cpus: Iterable[int] | None = None, on_thread_start: Callable[[], None] | None = None,
                 name: str = "speak") -> None:
        self.voice = voice
        self.player = player
        self.config = config or SpeakerConfig()
        self.stats = SpeakerStats()
        self._on_speaking = on_speaking
        self._on_finished = on_finished
        self._cpus = None if cpus is None else frozenset(cpus)
        self._on_thread_start = on_thread_start
        self._name = name
        self._pending: collections.deque[SpeechRequest] = collections.deque()
        self._cond = threading.Condition()
        self._generation = 0  # bumped by interrupt(): requests from before it are dropped
        self._speaking = False
        self._quiet_at: float | None = None  # when on_speaking(False) is due
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._cancel: RunCancel | None = None  # the synthesis under way, ended by interrupt()

    @property
    def speaking(self) -> bool:
        """True from the first audio of a request until the tail after the last one."""
        return self._speaking

    @property
    def pending(self) -> int:
        """Requests waiting (not counting the one in progress)."""
        with self._cond:
            return len(self._pending)

    # -- requests --------------------------------------------------------------------------

    def say(self, text: str, options: SynthesisOptions | None = None, *, volume: float = 1.0,
            request_id: str | None = None, tag: object = None) -> SpeechRequest:
        """Queue ``text``; bad text makes the request FAILED (not an exception), so every say gets an answer."""
        if self.voice is None:
            raise ConfigError("voice", "this speaker has no voice: it can only play audio")
        return self._submit(SpeechRequest(RequestKind.SAY, text=text, options=options, volume=_volume(volume),
                                          request_id=request_id, tag=tag))

    def play(self, audio: AudioChunk | Sequence[AudioChunk], *, volume: float = 1.0, request_id: str | None = None,
             tag: object = None) -> SpeechRequest:
        """Queue ready audio (hermes playBytes: see :func:`~voiced.tts.audio.wav_to_chunk`)."""
        chunks = (audio,) if isinstance(audio, AudioChunk) else tuple(audio)
        return self._submit(SpeechRequest(RequestKind.PLAY, audio=chunks, volume=_volume(volume),
                                          request_id=request_id, tag=tag))

    def interrupt(self) -> None:
        """End the current request and every queued one (INTERRUPTED); sound stops within a period,
        and a sentence being synthesized stops there (a long one ran for seconds on a Pi)."""
        with self._cond:
            self._generation += 1
            if self._cancel is not None:
                self._cancel.cancel()
            self._cond.notify_all()
        self.player.stop()

    def _submit(self, request: SpeechRequest) -> SpeechRequest:
        with self._cond:
            self.stats.requests += 1
            if self._closed or len(self._pending) >= self.config.max_pending:
                refused = True
            else:
                refused = False
                request._generation = self._generation
                self._pending.append(request)
                self._cond.notify_all()
        if refused:
            self.stats.refused += 1
            why = "the speaker is closed" if self._closed else f"too many requests waiting ({self.config.max_pending})"
            log.warning("speech request %s refused: %s", request.id, why)
            self._finish(request, SpeechResult(SpeechOutcome.FAILED, why))
        return request

    # -- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        """Run :meth:`run` on a thread of its own (named, pinned to ``cpus``)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self.player.start()

        def main() -> None:
            name_current_thread(self._name)
            if self._cpus is not None:
                pin_current_thread(self._cpus)
            if self._on_thread_start is not None:
                self._on_thread_start()
            self.run(self._stop)

        self._thread = threading.Thread(target=main, name=self._name, daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Interrupt everything, end the thread, close the player; later requests are refused."""
        with self._cond:
            self._closed = True
        self._stop.set()
        self.interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.player.close()

    def run(self, stop: threading.Event, beat: Callable[[], None] | None = None) -> None:
        """The speak loop, until ``stop`` is set; ``beat`` shows progress (a supervisor's heartbeat)."""
        beat = beat or _nothing
        try:
            while not stop.is_set():
                beat()
                request = self._next(stop)
                if request is not None:
                    self._process(request, stop, beat)
        finally:
            with self._cond:
                self._generation += 1
                leftover = list(self._pending)
                self._pending.clear()
            for request in leftover:
                self._finish(request, SpeechResult(SpeechOutcome.INTERRUPTED))
            self._set_speaking(False)

    def _next(self, stop: threading.Event) -> SpeechRequest | None:
        """The next request, or None after a short wait (sending on_speaking(False) when due)."""
        with self._cond:
            if not self._pending:
                wait = 0.5
                if self._quiet_at is not None:
                    wait = min(wait, max(0.0, self._quiet_at - time.monotonic()))
                self._cond.wait(wait)
            request = self._pending.popleft() if self._pending else None
        if request is None and self._quiet_at is not None and time.monotonic() >= self._quiet_at:
            self._set_speaking(False)
        return request

    def _interrupted(self, request: SpeechRequest) -> bool:
        return request._generation != self._generation

    def _process(self, request: SpeechRequest, stop: threading.Event, beat: Callable[[], None]) -> None:
        start = time.monotonic()
        progress = _Progress(queued_s=start - request.created)
        if self._interrupted(request) or stop.is_set():
            self._finish(request, progress.result(SpeechOutcome.INTERRUPTED))
            return
        stream: PlaybackStream | None = None
        chunks: Iterator[AudioChunk] | None = None
        with self._cond:
            self._cancel = cancel = RunCancel()
            if self._interrupted(request):  # interrupt() came before there was anything to cancel
                cancel.cancel()
        try:
            # speaking only once the device is open: a missing one (an unplugged speaker) made it blip on, off
            stream = self.player.stream(volume=request.volume, on_wait=beat,
                                        on_start=lambda: self._set_speaking(True))
            chunks = self._chunks(request, cancel)
            while True:
                t = time.monotonic()
                chunk = next(chunks, None)
                if request.kind is RequestKind.SAY:
                    progress.synth_s += time.monotonic() - t
                beat()
                if chunk is None or self._interrupted(request) or stop.is_set():
                    break
                if progress.first_audio_s is None:
                    progress.first_audio_s = time.monotonic() - start
                if not stream.write(chunk):
                    break
                progress.audio_s += chunk.duration
                progress.sentences += int(chunk.final and request.kind is RequestKind.SAY)
        except NothingToSpeak as exc:  # punctuation only ("..."): well formed, answered as done with no audio
            log.info("speech request %s: %s", request.id, exc)
        except SynthesisCancelled:  # interrupt(): answered as interrupted below
            pass
        except VoicedError as exc:  # text, options, model, device: the request fails, the speaker goes on
            progress.error = str(exc)
            log.warning("speech request %s failed: %s", request.id, exc)
        finally:
            if chunks is not None and hasattr(chunks, "close"):
                chunks.close()  # an interrupted synthesis stops here, not at garbage collection
            if stream is not None:
                stream.close()
            with self._cond:
                self._cancel = None
        played = self._play_out(stream, request, stop, beat)
        if self._speaking:
            self._quiet_at = time.monotonic() + self.config.tail_ms / 1000
        if played is not None:
            progress.played_frames, progress.underruns = played.frames, played.underruns
        if self._interrupted(request) or stop.is_set() or (played and played.outcome is PlaybackOutcome.INTERRUPTED):
            self._finish(request, progress.result(SpeechOutcome.INTERRUPTED))
        elif progress.error is None and played is not None and played.outcome is PlaybackOutcome.COMPLETED:
            self._finish(request, progress.result(SpeechOutcome.COMPLETED))
        else:
            progress.error = progress.error or (played.error if played else "the player is not running")
            self._finish(request, progress.result(SpeechOutcome.FAILED))

    def _play_out(self, stream: PlaybackStream | None, request: SpeechRequest, stop: threading.Event,
                  beat: Callable[[], None]) -> PlaybackResult | None:
        """Wait for the stream to finish playing, staying interruptible and beating."""
        if stream is None:
            return None
        while not stream.done.wait(0.1):
            beat()
            if stop.is_set() or self._interrupted(request):
                self.player.stop()
            if not self.player.running:  # closed under us: nobody will finish the stream
                return None
        return stream.result

    def _chunks(self, request: SpeechRequest, cancel: RunCancel) -> Iterator[AudioChunk]:
        if request.kind is RequestKind.PLAY:
            return iter(request.audio)
        assert self.voice is not None
        return self.voice.synthesize(request.text, request.options, cancel)

    def _finish(self, request: SpeechRequest, result: SpeechResult) -> None:
        request.result = result
        request.done.set()
        counter = {SpeechOutcome.COMPLETED: "completed", SpeechOutcome.INTERRUPTED: "interrupted",
                   SpeechOutcome.FAILED: "failed"}[result.outcome]
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        if self._on_finished is not None:
            try:
                self._on_finished(request)
            except Exception:  # a broken callback must not take the speaker down
                log.exception("on_finished callback failed for request %s", request.id)

    def _set_speaking(self, speaking: bool) -> None:
        self._quiet_at = None
        if speaking == self._speaking:
            return
        self._speaking = speaking
        if self._on_speaking is not None:
            try:
                self._on_speaking(speaking)
            except Exception:
                log.exception("on_speaking callback failed")


def _volume(volume: float) -> float:
    if not isinstance(volume, (int, float)) or isinstance(volume, bool) or not 0 <= volume <= 1:
        raise ConfigError("volume", f"must be within 0..1, got {volume!r}")
    return float(volume)


def _nothing() -> None:
    pass

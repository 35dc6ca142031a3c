"""The satellite role: Home Assistant drives our microphone and speaker over one Wyoming connection.

``run-satellite`` arms it. A wake word (or, without wake word models, the VAD's speech start)
triggers a pipeline run: ``detection`` + ``run-pipeline`` (asr → tts), then our capture (from
the wake word's end; from the pre-roll on a VAD trigger) as ``audio-start``/``audio-chunk``
until our endpointer ends the speech (wake mode: the command's, not the wake word's)
or no speech follows the wake word within ``[wake] timeout_s`` (``audio-stop``), or Home
Assistant says it has heard enough (``transcript``, ``voice-stopped``, ``error``). Home
Assistant's reply comes back as ``audio-start``/``audio-chunk``/``audio-stop``: played through
our speaker (capture muted meanwhile, as in the daemon), answered by ``played``.
``pause-satellite`` disarms it. Home Assistant's voice timers ring here when they finish
(``voiced.wyoming.timers``).
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

import numpy as np
from wyoming.audio import AudioChunk as WyAudioChunk
from wyoming.audio import AudioStart, AudioStop
from wyoming.event import Event
from wyoming.pipeline import PipelineStage, RunPipeline
from wyoming.snd import Played
from wyoming.timer import TimerCancelled, TimerFinished, TimerStarted, TimerUpdated
from wyoming.wake import Detection as WyDetection

from voiced.audio.frames import Window
from voiced.core.events import (
    CoreEvent,
    SessionEnded,
    SessionReason,
    SpeechEnded,
    SpeechFinished,
    SpeechStarted,
    WakeDetected,
)
from voiced.errors import AudioError
from voiced.tts.audio import AudioChunk
from voiced.wyoming.services import AudioFormat
from voiced.wyoming.timers import Ringer

if TYPE_CHECKING:
    from voiced.wyoming.connection import Connection

__all__ = ["SatelliteSession"]

log = logging.getLogger(__name__)

RATE = 16_000
PRE_ROLL_WINDOWS = 5
"""Windows (100 ms each) sent ahead of the trigger, so the first word is not clipped."""


class SatelliteSession:
    """One connection's satellite state; core events and windows arrive on the core's threads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.core = conn.server.core
        self.running = False
        self.streaming = False
        self._session: str | None = None  # the wake word's session this run streams, if one opened it
        self._sent = 0  # samples streamed in this run
        self._recent: collections.deque[Window] = collections.deque(maxlen=PRE_ROLL_WINDOWS)
        self._reply: list[bytes] = []  # Home Assistant's audio for us to play
        self._reply_format: AudioFormat | None = None
        self._reply_bytes = 0
        config, bell = conn.server.config, conn.server.bell
        assert bell is not None  # the server loads it whenever the satellite role is offered
        self.ringer = Ringer(self.core, bell, config.timer_rings, config.timer_ring_gap_s)

    async def handle(self, event: Event) -> bool:
        """True when ``event`` was the satellite's to handle."""
        t = event.type
        if t == "run-satellite":
            self._arm()
        elif t == "pause-satellite":
            self.stop()
        elif t == "run-pipeline":  # remote trigger: listen now, as if the wake word had been heard
            self._trigger(None, send_run=False)
        elif t in ("transcript", "voice-stopped", "error"):
            if self.streaming:
                self._end_stream()
            return t != "error"
        elif t in ("voice-started", "synthesize", "transcript-start", "transcript-chunk", "transcript-stop"):
            pass  # informational: Home Assistant tells us how its pipeline goes
        elif t == "audio-start":
            self._reply, self._reply_bytes, self._reply_format = [], 0, None
            fmt = AudioFormat.from_data(event.data)  # AudioError names a rate or channel count out of range
            if fmt.width != 2:
                raise AudioError(f"satellite playback takes 16-bit audio, got width {fmt.width}")
            self._reply_format = fmt
        elif t == "audio-chunk":
            self._add_reply(event)
        elif t == "audio-stop":
            self._play()
        elif TimerFinished.is_type(t):
            self.ringer.start(str(TimerFinished.from_event(event).id))
        elif TimerStarted.is_type(t) or TimerUpdated.is_type(t) or TimerCancelled.is_type(t):
            # Home Assistant keeps the time; only the end needs us
            log.info("wyoming: %s %r", t, event.data.get("id"))  # %r: the id is the client's, newlines and all
            self.core.counters.add("wyoming_timer_events")
        else:
            return False
        return True

    # -- arming ----------------------------------------------------------------------------------

    def _arm(self) -> None:
        if not self.running:
            self.running = True
            self.core.subscribe(self._on_core_event)
            self.core.add_window_tap(self._on_window)
            self.core.counters.add("wyoming_satellite_runs")
            log.info("wyoming: satellite running")

    def stop(self) -> None:
        self.ringer.stop()
        if self.running:
            self.running = False
            self.core.unsubscribe(self._on_core_event)
            self.core.remove_window_tap(self._on_window)
            if self.streaming:
                self._end_stream()
            log.info("wyoming: satellite paused")

    # -- core threads → Home Assistant -------------------------------------------------------------

    def _on_core_event(self, ev: CoreEvent) -> None:
        if isinstance(ev, WakeDetected):
            self._trigger(ev.detection.label, session=ev.session_id)
        elif isinstance(ev, SpeechStarted) and self.core.models.wake is None:
            self._trigger(None)
        elif isinstance(ev, SpeechEnded) and self.streaming:
            self._end_stream()
        elif (isinstance(ev, SessionEnded) and ev.reason is SessionReason.TIMEOUT and self.streaming
              and ev.session_id == self._session):
            self._end_stream()  # no speech after the wake word ([wake] timeout_s): Home Assistant need not wait
        elif isinstance(ev, SpeechFinished) and ev.request.tag is self:
            self.conn.send_threadsafe(Played().event())

    def _trigger(self, wake_word: str | None, send_run: bool = True, session: str | None = None) -> None:
        self.ringer.stop_threadsafe(self.conn.server.loop)  # the wake word between rings answers the timer
        if not self.running or self.streaming:
            return
        send = self.conn.send_threadsafe
        if wake_word is not None:
            send(WyDetection(name=wake_word).event())
        if send_run:
            send(RunPipeline(start_stage=PipelineStage.ASR, end_stage=PipelineStage.TTS,
                             wake_word_name=wake_word).event())
        send(AudioStart(rate=RATE, width=2, channels=1).event())
        self.streaming, self._sent, self._session = True, 0, session
        self.core.counters.add("wyoming_satellite_pipelines")
        if wake_word is None:  # the pre-roll: speech began before the VAD's trigger
            for window in tuple(self._recent):
                self._stream(window)
        # after a wake word the command follows it: the wake word itself is no part of what Home
        # Assistant transcribes (its agent matched no intent in "Alexa, what time is it?")

    def _on_window(self, window: Window) -> None:
        """On the listen thread, for every window heard (none while we speak: half-duplex)."""
        if self.streaming:
            self._stream(window)
            if self._sent >= self.conn.server.config.max_audio_s * RATE:
                self._end_stream()
        else:
            self._recent.append(window)

    def _stream(self, window: Window) -> None:
        pcm = np.clip(np.round(window.samples * 32768.0), -32768, 32767).astype("<i2")
        self._sent += len(pcm)
        self.conn.send_threadsafe(WyAudioChunk(rate=RATE, width=2, channels=1, audio=pcm.tobytes()).event())

    def _end_stream(self) -> None:
        self.streaming = False
        self._recent.clear()
        self.conn.send_threadsafe(AudioStop().event())

    # -- Home Assistant → our speaker ---------------------------------------------------------------

    def _add_reply(self, event: Event) -> None:
        if self._reply_format is None or event.payload is None:
            raise AudioError("audio-chunk before audio-start")
        self._reply_bytes += len(event.payload)
        fmt = self._reply_format
        if self._reply_bytes > self.conn.server.config.max_audio_s * fmt.rate * fmt.width * fmt.channels:
            self.core.counters.add("wyoming_audio_over_limit")
            return
        self._reply.append(event.payload)

    def _play(self) -> None:
        if self._reply_format is None:
            raise AudioError("audio-stop before audio-start")
        fmt, data = self._reply_format, b"".join(self._reply)
        self._reply, self._reply_format = [], None
        data = data[:len(data) - len(data) % (fmt.width * fmt.channels)]  # whole frames: a chunk may split one
        request = self.core.play(AudioChunk(np.frombuffer(data, "<i2"), fmt.rate, 2, fmt.channels), tag=self)
        if request is None:  # no speaker: nothing will play, yet Home Assistant waits for played
            self.conn.send_threadsafe(Played().event())

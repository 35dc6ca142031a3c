"""One Wyoming client: events in, the right service's work on the pool, events out.

A connection serves whatever its client asks for: ``describe``, ``transcribe`` + audio,
``synthesize`` (whole or streamed), ``detect`` + audio, ``recognize``, and the satellite
events. Malformed event data gets an ``error`` event and the connection lives on; malformed
framing (the server counts it) drops the connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk as WyAudioChunk
from wyoming.audio import AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.intent import Entity
from wyoming.intent import Intent as WyIntent
from wyoming.intent import NotRecognized
from wyoming.ping import Pong
from wyoming.tts import SynthesizeStopped
from wyoming.wake import Detection as WyDetection
from wyoming.wake import NotDetected

from voiced.errors import VoicedError
from voiced.runtime.lograte import sparse_level
from voiced.tts import NothingToSpeak, PiperVoice
from voiced.tts.config import SynthesisOptions
from voiced.tts.audio import AudioChunk
from voiced.wyoming.framing import read_event, write_event
from voiced.wyoming.info import describe
from voiced.wyoming.satellite import SatelliteSession
from voiced.wyoming.services import AsrRequest, AudioFormat, SentenceBuffer, WakeRequest

if TYPE_CHECKING:
    from voiced.wyoming.server import WyomingServer

__all__ = ["Connection", "EventType"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class EventType:
    """The Wyoming event types this server reads (the library's names for them)."""

    PING = "ping"
    DESCRIBE = "describe"
    TRANSCRIBE = "transcribe"
    AUDIO_START = "audio-start"
    AUDIO_CHUNK = "audio-chunk"
    AUDIO_STOP = "audio-stop"
    SYNTHESIZE = "synthesize"
    SYNTHESIZE_START = "synthesize-start"
    SYNTHESIZE_CHUNK = "synthesize-chunk"
    SYNTHESIZE_STOP = "synthesize-stop"
    DETECT = "detect"
    RECOGNIZE = "recognize"


class _BadRequest(VoicedError):
    """Event data we cannot serve: answered with an ``error`` event."""


_BAD_EVENT = (_BadRequest, VoicedError, KeyError, TypeError, ValueError, AttributeError)
"""What handling an event with unexpected data raises: answered with ``error``, the connection goes on."""


class Connection:
    def __init__(self, server: WyomingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.models = server.core.models
        self.reader = reader
        self.writer = writer
        self._send_lock = asyncio.Lock()
        self._asr: AsrRequest | None = None
        self._pending: list[bytes] = []  # audio for the recognizer, not yet fed
        self._feeding: asyncio.Task[None] | None = None
        self._transcribing = False  # a transcribe was asked for: the next audio is for ASR
        self._wake: WakeRequest | None = None
        self._detect_names: tuple[str, ...] | None = None
        self._detecting = False
        self._detected = False
        self._stray_chunks = False  # an audio-chunk with no audio-start was answered: its stream's others are not
        self._sentences: SentenceBuffer | None = None  # synthesize-start … synthesize-stop
        self._tts_started = False
        self._options = server.core.config.tts.options
        self.satellite: SatelliteSession | None = None

    # -- plumbing ---------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            event = await read_event(self.reader, self.server.limits)
            if event is None:
                return
            try:
                await self.handle(event)
            except _BAD_EVENT as exc:
                await self._answer_bad(event.type, exc)

    async def _answer_bad(self, event_type: str, exc: Exception) -> None:
        """The event was well framed but its data is not what its type needs: an ``error`` event."""
        self.server.counters.add("wyoming_bad_events")
        n = self.server.counters.get("wyoming_bad_events")
        log.log(sparse_level(n, first=10), "wyoming: bad %s event: %s (%d so far)", event_type, exc, n)
        await self.send(Error(text=f"{event_type}: {exc}", code="bad-request").event())

    async def send(self, event: Event) -> None:
        async with self._send_lock:
            await write_event(event, self.writer)

    def send_threadsafe(self, event: Event) -> None:
        """From another thread (the core's stages): queue ``event`` on the loop; never blocks."""
        loop = self.server.loop
        if loop is not None and not self.writer.is_closing():
            asyncio.run_coroutine_threadsafe(self._send_quietly(event), loop)

    async def _send_quietly(self, event: Event) -> None:
        try:
            await self.send(event)
        except (ConnectionError, RuntimeError) as exc:
            log.debug("wyoming: could not send %s: %s", event.type, exc)

    async def work(self, fn: Callable[..., T], *args: Any) -> T:
        """Run model work on the pool; the loop keeps serving other clients meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.server.pool, fn, *args)

    def close(self) -> None:
        self.writer.close()

    async def cleanup(self) -> None:
        self._asr = None  # a feed in flight stops after its batch
        if self._feeding is not None:
            self._feeding.cancel()
        if self.satellite is not None:
            self.satellite.stop()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    # -- dispatch ---------------------------------------------------------------------------

    async def handle(self, event: Event) -> None:
        t, data = event.type, event.data
        if t == EventType.PING:
            await self.send(Pong(text=data.get("text")).event())
        elif t == EventType.DESCRIBE:
            await self.send(describe(self.models, self.server.config, self.server.core.config.site.id).event())
        elif self.satellite is not None and await self.satellite.handle(event):
            pass
        elif t == EventType.TRANSCRIBE:  # the last request says what the next audio is for
            self._transcribing, self._detecting = True, False
        elif t == EventType.DETECT:
            names = data.get("names")
            self._detect_names = tuple(str(n) for n in names) if isinstance(names, list) else None
            self._detecting, self._detected, self._transcribing = True, False, False
        elif t == EventType.AUDIO_START:
            self._stray_chunks = False
            await self._audio_start(AudioFormat.from_data(data))
        elif t == EventType.AUDIO_CHUNK:
            await self._audio_chunk(event)
        elif t == EventType.AUDIO_STOP:
            stray, self._stray_chunks = self._stray_chunks, False
            if not stray:  # the stream was already answered at its first chunk
                await self._audio_stop()
        elif t == EventType.SYNTHESIZE:
            if self._sentences is None:  # while streaming, Home Assistant also sends the whole text: ignored
                self._options = self._synthesis_options(data)
                await self._speak([_text(data)])
        elif t == EventType.SYNTHESIZE_START:
            self._need_voice()
            if self._sentences is not None:  # a new answer ends the one before: its reader stops waiting
                log.debug("wyoming: synthesize-start before synthesize-stop: the earlier text is dropped")
                self._sentences = None
                await self._end_stream()
            self._options = self._synthesis_options(data)
            self._sentences = SentenceBuffer(self.models.config.tts.max_text_chars)
            self._tts_started = False
        elif t == EventType.SYNTHESIZE_CHUNK:
            if self._sentences is None:
                raise _BadRequest("synthesize-chunk without synthesize-start")
            await self._speak(self._sentences.add(_text(data)), stream=True)
        elif t == EventType.SYNTHESIZE_STOP:
            if self._sentences is None:
                raise _BadRequest("synthesize-stop without synthesize-start")
            rest, self._sentences = self._sentences.rest(), None
            try:
                await self._speak(rest, stream=True, last=True)
            except _BAD_EVENT as exc:  # said before synthesize-stopped: Home Assistant reads up to it
                await self._answer_bad(t, exc)
            await self.send(SynthesizeStopped().event())
        elif t == EventType.RECOGNIZE:
            await self._recognize(_text(data))
        elif t == "run-satellite" and self.server.config.satellite:
            self.satellite = SatelliteSession(self)
            await self.satellite.handle(event)
        else:  # the protocol asks servers to ignore what they do not know
            log.debug("wyoming: ignoring %s", t)
            self.server.counters.add("wyoming_ignored_events")

    # -- audio in: transcription or wake words ------------------------------------------------

    async def _audio_start(self, fmt: AudioFormat) -> None:
        max_s = self.server.config.max_audio_s
        if self._detecting:
            if self.models.wake is None:
                raise _BadRequest("no wake word models are configured ([wake] models)")
            self._wake = WakeRequest(self.models.wake.create_stream(), fmt, self._detect_names)
            if not any(map(self._wake.wants, self.models.wake.labels)):
                self.server.counters.add("wyoming_unknown_wake_words")
                n = self.server.counters.get("wyoming_unknown_wake_words")
                log.log(sparse_level(n, first=3), "wyoming: detect asks for %s, and no [wake] model is one of them "
                        "(%s): nothing will be detected", ", ".join(map(repr, self._detect_names or ())),
                        ", ".join(self.models.wake.labels))
            self._asr, self._pending = None, []  # one audio request at a time: the new one replaces the old
            return
        # audio without detect is for speech-to-text, whether or not transcribe came first
        self._asr, self._pending, self._wake = AsrRequest(self.models, fmt, max_s), [], None
        self._transcribing = True
        await self.send(TranscriptStart(language=self.models.intents.language).event())

    async def _audio_chunk(self, event: Event) -> None:
        if event.payload is None:
            return
        AudioFormat.from_data(event.data)  # checked, though the stream's format is audio-start's
        if self._wake is not None:
            if not self._detected:
                detection = await self.work(self._wake.feed, event.payload)
                if detection is not None:
                    self._detected = True
                    self.server.counters.add("wyoming_detections")
                    await self.send(WyDetection(name=detection.label, timestamp=int(detection.time * 1000)).event())
            self._count_over(self._wake.input.over_limit)
        elif self._asr is not None:
            # Chunks that arrive while the recognizer is busy are fed together: one hop to the pool
            # per batch, and audio-stop never waits behind a queue of 20 ms hops.
            self._pending.append(event.payload)
            if self._feeding is None or self._feeding.done():
                self._feeding = asyncio.create_task(self._feed_asr(self._asr))
        elif self._stray_chunks:  # one error per stream, not one per 20 ms chunk (an older satellite)
            self.server.counters.add("wyoming_stray_chunks")
        else:
            self._stray_chunks = True
            raise _BadRequest("audio-chunk before audio-start (the rest of this stream is dropped unanswered)")

    async def _audio_stop(self) -> None:
        if self._wake is not None:
            if not self._detected:
                await self.send(NotDetected().event())
            self._wake, self._detecting = None, False
        elif self._asr is not None:
            asr, self._asr, self._transcribing = self._asr, None, False
            if self._feeding is not None:
                await self._feeding
                self._feeding = None
            text = await self.work(self._finish_asr, asr, b"".join(self._pending))
            self._pending.clear()
            self.server.counters.add("wyoming_transcripts")
            await self.send(Transcript(text=text, language=self.models.intents.language).event())
            await self.send(TranscriptStop().event())
        else:
            raise _BadRequest("audio-stop without audio-start")

    async def _feed_asr(self, asr: AsrRequest) -> None:
        while self._pending and asr is self._asr:
            batch = b"".join(self._pending)
            self._pending.clear()
            for text in await self.work(asr.feed, batch):
                await self.send(TranscriptChunk(text=text).event())
            self._count_over(asr.input.over_limit)

    @staticmethod
    def _finish_asr(asr: AsrRequest, rest: bytes) -> str:
        if rest:
            asr.feed(rest)  # partials this late are not worth sending: the transcript follows at once
        return asr.finish()

    def _count_over(self, over: bool) -> None:
        if over:
            self.server.counters.add("wyoming_audio_over_limit")

    # -- speech out ---------------------------------------------------------------------------

    def _need_voice(self) -> PiperVoice:
        if self.models.voice is None:
            raise _BadRequest("no voice is configured ([tts] voice)")
        return self.models.voice

    def _synthesis_options(self, data: dict[str, Any]) -> SynthesisOptions:
        """[tts] options, with the request's speaker for a multi-speaker voice."""
        options = self.server.core.config.tts.options
        voice = data.get("voice")
        speaker = voice.get("speaker") if isinstance(voice, dict) else None
        if speaker is None or self.models.voice is None or not self.models.voice.config.speaker_id_map:
            return options
        return dataclasses.replace(options, speaker=str(speaker))

    async def _speak(self, texts: list[str], stream: bool = False, last: bool = False) -> None:
        """Synthesize ``texts`` sentence by sentence, sending audio as each is ready. Without
        ``stream`` it is one whole request: audio-start … audio-stop."""
        voice = self._need_voice()
        try:
            for text in texts:
                try:
                    chunks: Iterator[AudioChunk] = voice.synthesize(text, self._options)  # lazy: the work is in next()
                except NothingToSpeak:
                    # an LLM's "Sure! ..." or "(": the rest of the answer is still said, and an answer
                    # with nothing to say is a well-formed empty one (audio-start, audio-stop)
                    log.debug("wyoming: nothing to speak in %r, skipped", text[:40])
                    continue
                while (chunk := await self.work(next, chunks, None)) is not None:
                    if not self._tts_started:
                        self._tts_started = True
                        await self.send(AudioStart(rate=chunk.sample_rate, width=chunk.sample_width,
                                                   channels=chunk.channels).event())
                    await self.send(WyAudioChunk(rate=chunk.sample_rate, width=chunk.sample_width,
                                                 channels=chunk.channels,
                                                 audio=np.ascontiguousarray(chunk.samples, "<i2").tobytes()).event())
        except Exception:
            if (not stream or last) and self._tts_started:  # the request ends with the error: audio ends too
                self._tts_started = False
                await self.send(AudioStop().event())
            raise
        if not stream or last:
            if not self._tts_started:  # nothing to say: still a well-formed, empty answer
                await self.send(AudioStart(rate=voice.sample_rate, width=2, channels=1).event())
            await self.send(AudioStop().event())
            self._tts_started = False
            self.server.counters.add("wyoming_syntheses")

    async def _end_stream(self) -> None:
        """A streamed answer ends without its rest: audio-stop (if audio began) and synthesize-stopped."""
        if self._tts_started:
            self._tts_started = False
            await self.send(AudioStop().event())
        await self.send(SynthesizeStopped().event())

    # -- intents ------------------------------------------------------------------------------

    async def _recognize(self, text: str) -> None:
        intents = self.models.intents
        intent = await self.work(intents.recognize, text)
        if intent is None:
            await self.send(NotRecognized(text=text).event())
            return
        entities = [Entity(name=s.name, value=s.value) for s in intent.slots]
        await self.send(WyIntent(name=intent.name, entities=entities, text=text).event())


def _text(data: dict[str, Any]) -> str:
    text = data.get("text")
    if not isinstance(text, str):
        raise _BadRequest(f"'text' must be a string, got {type(text).__name__}")
    return text

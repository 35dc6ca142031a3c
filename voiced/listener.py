"""The listening loop: windows of audio → VAD endpointing → streaming recognizer → events.

One generator, used by ``voiced transcribe``, ``voiced listen`` and the daemon's listen stage.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

import numpy as np

from voiced.asr.loader import SpeechRecognizer, SpeechStream
from voiced.asr.recognizer import RecognitionResult
from voiced.audio.frames import Window, Windower
from voiced.sentencespace import Completion, SentenceSpace, SpaceWalker
from voiced.vad import Endpointer, EndReason, VadEvent, VadEventKind

__all__ = ["ListenEvent", "ListenEventType", "Listener"]

log = logging.getLogger(__name__)


class ListenEventType(Enum):
    SPEECH_START = "speech_start"
    PARTIAL = "partial"
    FINAL = "final"
    SPEECH_END = "speech_end"


@dataclass(frozen=True)
class ListenEvent:
    """Something the listener noticed; times are seconds of stream time."""

    type: ListenEventType
    start: float
    """Start of the utterance."""
    end: float
    """Speech end (speech_end, final) or the audio decoded so far (partial)."""
    text: str = ""
    result: RecognitionResult | None = None
    """Tokens, timestamps (relative to ``audio_start``) and confidence; on partial and final."""
    audio_start: float = 0.0
    """Stream time of the first sample given to the recognizer (before ``start`` by the pre-roll)."""
    audio: np.ndarray | None = None
    """The utterance's samples (on final, when the listener keeps audio for the cloud)."""

    def to_dict(self) -> dict[str, object]:
        return {"type": self.type.value, "text": self.text, "start": round(self.start, 3), "end": round(self.end, 3)}


class Listener:
    """Turns audio chunks into listen events; without an endpointer the whole stream is one utterance."""

    def __init__(self, recognizer: SpeechRecognizer | None, endpointer: Endpointer | None = None, window_frames: int = 10,
                 keep_audio: bool = False, commands: SentenceSpace | None = None) -> None:
        self.recognizer = recognizer
        self.keep_audio = keep_audio
        """Collect the samples of each utterance that begins from now on for its final event (cloud ASR,
        a listening request that asks for them); off: nothing is copied."""
        self._keeping = False  # keep_audio as it was when the open utterance began
        self._audio: list[np.ndarray] = []
        self.endpointer = endpointer
        self.window_frames = window_frames
        self._stream: SpeechStream | None = None
        self._start = 0.0
        self._audio_start = 0.0
        self._partial = ""
        self._matched: RecognitionResult | None = None  # the last partial, when it was a whole command
        self._active = False  # an utterance is open
        self._pause_decoded = False  # the current pause in speech has had its partial
        self._walker: SpaceWalker | None = None
        self._next_commands = commands
        self._take_commands()

    def set_commands(self, commands: SentenceSpace | None) -> None:
        """Intent-aware endpointing over ``commands`` (None: off), from the next utterance on."""
        self._next_commands = commands
        if not self._active:
            self._take_commands()

    def _take_commands(self) -> None:
        # a partial that is a whole command ends the utterance sooner (endpointer.set_matched)
        commands, endpointer = self._next_commands, self.endpointer
        self._walker = commands.walker() if commands is not None and endpointer is not None and endpointer.early_end else None

    @property
    def active(self) -> bool:
        """An utterance is open (speech started and not yet ended)."""
        return self._active

    def events(self, chunks: Iterable[np.ndarray]) -> Iterator[ListenEvent]:
        """Events of a whole chunk stream; open utterances are closed when it ends."""
        windows = Windower(self.window_frames)
        end = 0.0
        for window in windows.windows(chunks):
            end = window.end
            yield from self.process(window)
        yield from self.finish(end)

    def process(self, window: Window) -> Iterator[ListenEvent]:
        """Advance by one window."""
        if self.endpointer is None:
            if not self._active:
                yield self._begin(window.start, window.start)
            yield from self._feed(window.samples, window.end)
            return
        for ev in self.endpointer.process(window):
            yield from self._on_vad(ev, window.end)

    def finish(self, end: float) -> Iterator[ListenEvent]:
        """End of stream: close the open utterance, if any."""
        if self.endpointer is not None:
            for ev in self.endpointer.flush():
                yield from self._on_vad(ev, end)
        elif self._active:
            yield from self._end(end)

    # -- utterance bookkeeping -------------------------------------------------------------

    def _on_vad(self, ev: VadEvent, window_end: float) -> Iterator[ListenEvent]:
        if ev.kind is VadEventKind.SPEECH_START:
            yield self._begin(ev.time, ev.audio_start)
            yield from self._feed(ev.audio, window_end)
        elif ev.kind is VadEventKind.AUDIO:
            yield from self._feed(ev.audio, window_end)
        elif ev.kind is VadEventKind.SPEECH_END:
            if ev.reason is EndReason.MATCHED and self._matched is not None:
                # the partial was a whole command and only silence followed: it is the final result
                # (re-decoding, a whole Whisper decode, would add latency and not change the intent)
                yield from self._end(ev.time, self._matched)
                return
            if len(ev.audio):
                yield from self._feed(ev.audio, window_end, partials=False)
            yield from self._end(ev.time)

    def _begin(self, start: float, audio_start: float) -> ListenEvent:
        self._start, self._audio_start, self._partial = start, audio_start, ""
        self._take_commands()
        self._active = True
        self._audio, self._keeping = [], self.keep_audio
        if self.recognizer is not None:
            if self._stream is None:
                self._stream = self.recognizer.create_stream()
            else:
                self._stream.reset()
        return ListenEvent(ListenEventType.SPEECH_START, start, start, audio_start=audio_start)

    def _feed(self, audio: np.ndarray, now: float, partials: bool = True) -> Iterator[ListenEvent]:
        if self._keeping and len(audio):
            self._audio.append(np.asarray(audio, np.float32))
        rec, stream = self.recognizer, self._stream
        if rec is None or stream is None or not len(audio):
            return
        stream.accept_waveform(audio)
        if partials and self._pause_begins():
            # intent-aware endpointing: the transcript up to the pause decides whether the short
            # matched silence applies, so it must not wait for the partials' cadence
            rec.decode_at_pause(stream)
        elif rec.is_ready(stream):
            rec.decode_all(stream)
        else:
            return
        result = stream.result
        if partials and result.text and result.text != self._partial:
            self._partial = result.text
            if self._walker is not None and self.endpointer is not None:
                matched = self._walker.complete(result.text) is Completion.FINAL
                self.endpointer.set_matched(matched)
                self._matched = result if matched else None
            yield ListenEvent(ListenEventType.PARTIAL, self._start, now, result.text, result, self._audio_start)

    def _pause_begins(self) -> bool:
        """True once per pause in speech, when intent-aware endpointing is on."""
        endpointer = self.endpointer
        if self._walker is None or endpointer is None or not endpointer.pausing:
            self._pause_decoded = False
            return False
        begins, self._pause_decoded = not self._pause_decoded, True
        return begins

    def _end(self, end: float, result: RecognitionResult | None = None) -> Iterator[ListenEvent]:
        yield ListenEvent(ListenEventType.SPEECH_END, self._start, end, audio_start=self._audio_start)
        self._active = False
        audio = np.concatenate(self._audio) if self._keeping and self._audio else None
        self._audio = []
        self._matched = None
        if self.recognizer is not None and self._stream is not None:
            result = result or self.recognizer.finish(self._stream)
            yield ListenEvent(ListenEventType.FINAL, self._start, end, result.text, result, self._audio_start, audio)
        elif audio is not None:  # no local recognizer: the audio is the result, for the cloud
            yield ListenEvent(ListenEventType.FINAL, self._start, end, "", None, self._audio_start, audio)

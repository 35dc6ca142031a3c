"""The endpointer: frame probabilities → utterances, with hysteresis, pre-roll and limits.

Events of one utterance, in order: one SPEECH_START, any number of AUDIO, one SPEECH_END.
Their ``audio`` fields, concatenated, are the utterance audio exactly as it was in the
stream, without gap or overlap: the pre-roll, the speech, and the trailing silence up to
the point where the end was decided. ``audio_start`` is the stream time of each event's
first sample, so the utterance audio starts at the START event's ``audio_start``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from voiced.audio.frames import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE, Window
from voiced.configfile import section_from_dict
from voiced.errors import ConfigError
from voiced.vad.base import SpeechDetector, frame_count

__all__ = ["EndReason", "EndpointConfig", "Endpointer", "VadEvent", "VadEventKind"]

log = logging.getLogger(__name__)


class VadEventKind(Enum):
    SPEECH_START = "speech_start"
    """An utterance was confirmed; ``time`` is where its speech starts."""
    AUDIO = "audio"
    """More audio of the open utterance."""
    SPEECH_END = "speech_end"
    """The utterance ended; ``time`` is the end of its last speech frame."""


class EndReason(Enum):
    SILENCE = "silence"
    """``min_silence_ms`` of silence followed the speech."""
    MATCHED = "matched"
    """The transcript was a whole command and ``matched_silence_ms`` of silence followed it."""
    MAX_LENGTH = "max_length"
    """The speech reached ``max_utterance_s``; a new utterance may start right after."""
    END_OF_STREAM = "end_of_stream"
    """The stream ended (``flush``) while the utterance was open."""


def _no_audio() -> np.ndarray:
    return np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class VadEvent:
    """One step of an utterance; times are seconds of stream time."""

    kind: VadEventKind
    time: float
    """SPEECH_START: start of speech (after the pre-roll); AUDIO: same as ``audio_start``;
    SPEECH_END: end of the last speech frame (before the trailing silence)."""
    audio: np.ndarray = field(default_factory=_no_audio, repr=False, compare=False)
    """float32 samples of the utterance: on START the pre-roll and everything up to the
    moment the utterance was confirmed; on AUDIO the next samples; on END the trailing
    samples up to where the end was decided (empty at END_OF_STREAM)."""
    audio_start: float = 0.0
    """Stream time of ``audio[0]`` (where it would be when ``audio`` is empty)."""
    reason: EndReason | None = None
    """Why the utterance ended; only on SPEECH_END."""

    @property
    def audio_end(self) -> float:
        """Stream time just after ``audio``'s last sample."""
        return self.audio_start + len(self.audio) / SAMPLE_RATE


@dataclass(frozen=True)
class EndpointConfig:
    """When speech starts and stops being an utterance."""

    onset_threshold: float = 0.5
    """A frame at or above this probability can start speech (Silero's own default)."""
    offset_threshold: float = 0.35
    """Speech goes on while frames stay at or above this (hysteresis; Silero's threshold - 0.15)."""
    pre_roll_ms: int = 300
    """Audio kept from before the speech start and given to the recognizer with it.

    Covers soft onsets the VAD reacts to late: on the hifitts stream SPEECH_START comes
    up to 130 ms after the first frame above -50 dBFS (Silero's reaction plus up to 32 ms
    of chunk buffering), and some words start with quieter fricatives. Never reaches
    back into the previous utterance's audio."""
    min_speech_ms: int = 250
    """Speech (onset to last speech frame) shorter than this is a blip, not an utterance.

    Each of the 220 one-word moonshine clips keeps Silero at or above the offset
    threshold for at least 320 ms; clicks and knocks last tens of ms."""
    min_silence_ms: int = 700
    """Trailing silence that ends an utterance; shorter pauses are part of it.

    The longest sentence-internal pause Silero finds in the 116 read utterances of
    hifitts_6097 is 540 ms; 700 ms keeps each of them one utterance, and is the delay
    between the end of a command and its SPEECH_END."""
    matched_silence_ms: int = 250
    """Trailing silence that ends an utterance whose running transcript is already a whole
    template sentence that no longer one could extend (intent-aware endpointing; needs
    templates and a recognizer with partial results). At or above ``min_silence_ms`` it is
    off. 250 ms is above the gaps between the words of a command and well under the
    540 ms pauses inside read sentences."""
    max_utterance_s: float = 15.0
    """An utterance this long (from its speech start) is cut (MAX_LENGTH), even in a pause.

    Bounds recognizer memory and latency: utterance audio is at most pre-roll + this.
    Every hifitts utterance (up to 10.1 s) stays whole."""

    def __post_init__(self) -> None:
        if not 0.0 < self.onset_threshold <= 1.0:
            raise ConfigError("onset_threshold", f"must be within (0, 1], got {self.onset_threshold}")
        if not 0.0 < self.offset_threshold <= self.onset_threshold:
            raise ConfigError(
                "offset_threshold",
                f"must be within (0, onset_threshold={self.onset_threshold}], got {self.offset_threshold}",
            )
        if not 0 <= self.pre_roll_ms <= 5000:
            raise ConfigError("pre_roll_ms", f"must be within [0, 5000] ms, got {self.pre_roll_ms}")
        if not 0 <= self.min_speech_ms <= 10_000:
            raise ConfigError("min_speech_ms", f"must be within [0, 10000] ms, got {self.min_speech_ms}")
        if not FRAME_MS <= self.min_silence_ms <= 10_000:
            raise ConfigError("min_silence_ms", f"must be within [{FRAME_MS}, 10000] ms, got {self.min_silence_ms}")
        if not FRAME_MS <= self.matched_silence_ms <= 10_000:
            raise ConfigError("matched_silence_ms", f"must be within [{FRAME_MS}, 10000] ms, got {self.matched_silence_ms}")
        if not self.min_speech_ms / 1000 < self.max_utterance_s <= 3600:
            raise ConfigError(
                "max_utterance_s",
                f"must be above min_speech_ms ({self.min_speech_ms} ms) and at most 3600 s, got {self.max_utterance_s}",
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None, section: str = "") -> EndpointConfig:
        """Build from a TOML table; errors name the key (prefixed with ``section``) and ``source``."""
        return section_from_dict(cls, data, section, source)


class _State(Enum):
    SILENCE = "silence"
    CANDIDATE = "candidate"  # above onset, not yet min_speech long
    SPEECH = "speech"  # SPEECH_START emitted


class _History:
    """Recent stream samples addressed by absolute sample position."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.data = np.zeros(0, dtype=np.float32)

    def append(self, samples: np.ndarray) -> None:
        self.data = np.concatenate([self.data, samples])

    def slice(self, a: int, b: int) -> np.ndarray:
        return self.data[a - self.start : b - self.start].copy()

    def trim(self, keep_from: int) -> None:
        if keep_from > self.start:
            self.data = self.data[keep_from - self.start :]
            self.start = keep_from


class Endpointer:
    """Per-stream state machine over a detector's frame probabilities.

    Feed contiguous windows with ``process``; call ``flush`` at the end of the stream. The
    first window's ``start`` anchors stream time; after ``flush`` or ``reset`` the next
    window anchors it again.
    """

    def __init__(self, config: EndpointConfig, detector: SpeechDetector) -> None:
        self.config = config
        self.detector = detector
        c = config
        self._pre_roll = c.pre_roll_ms * SAMPLE_RATE // 1000
        self._min_speech = c.min_speech_ms * SAMPLE_RATE // 1000
        self._min_silence_frames = -(-c.min_silence_ms // FRAME_MS)
        self._matched_silence_frames = -(-min(c.matched_silence_ms, c.min_silence_ms) // FRAME_MS)
        self._max_speech = round(c.max_utterance_s * SAMPLE_RATE)
        self.utterances = 0
        """SPEECH_START events emitted so far (all streams)."""
        self._clear()

    @property
    def early_end(self) -> bool:
        """Intent-aware endpointing can shorten an utterance's end (matched < min silence)."""
        return self._matched_silence_frames < self._min_silence_frames

    def set_matched(self, matched: bool) -> None:
        """The open utterance's transcript is (or is no longer) a whole command: its trailing
        silence is then ``matched_silence_ms`` instead of ``min_silence_ms``. Cleared at every end."""
        self._matched = matched and self._state is _State.SPEECH

    @property
    def pausing(self) -> bool:
        """In speech, and the latest frame was silence: the speaker may have finished."""
        return self._state is _State.SPEECH and self._silent_frames > 0

    @property
    def in_speech(self) -> bool:
        """True between a SPEECH_START and its SPEECH_END."""
        return self._state is _State.SPEECH

    def process(self, window: Window) -> Iterator[VadEvent]:
        """Advance by one window; return the events it caused.

        The work is done before this returns (not lazily), so a caller that ignores the
        events still keeps the stream in step.
        """
        samples = np.asarray(window.samples, dtype=np.float32)
        pos = round(window.start * SAMPLE_RATE)
        if self._pos is None:
            self._pos = self._floor = pos
            self._history = _History(pos)
        elif pos != self._pos:
            raise ValueError(
                f"window {window.index} starts at {window.start:.4f} s, expected {self._pos / SAMPLE_RATE:.4f} s:"
                " windows must be contiguous (call reset() to start a new stream)"
            )
        probs = np.asarray(self.detector.frame_probabilities(window), dtype=np.float32)
        if len(probs) != frame_count(len(samples)):
            raise ValueError(f"detector returned {len(probs)} probabilities for {frame_count(len(samples))} frames")
        self._history.append(samples)
        end = pos + len(samples)
        events: list[VadEvent] = []
        for i, p in enumerate(probs.tolist()):
            fs = pos + i * FRAME_SAMPLES
            self._step(p, fs, min(fs + FRAME_SAMPLES, end), events)
        self._pos = end
        if self._state is _State.SPEECH and self._emitted < end:
            events.append(self._event(VadEventKind.AUDIO, self._emitted, self._emitted, end))
        self._history.trim(self._keep_from(end))
        return iter(events)

    def flush(self) -> Iterator[VadEvent]:
        """End of stream: close an open utterance (END_OF_STREAM), drop a candidate, reset."""
        events: list[VadEvent] = []
        if self._state is _State.SPEECH:
            events.append(self._end(EndReason.END_OF_STREAM, self._emitted))
        self.reset()
        return iter(events)

    def reset(self) -> None:
        """Forget the stream without emitting anything (the detector too)."""
        self.detector.reset()
        self._clear()

    def _clear(self) -> None:
        self._state = _State.SILENCE
        self._pos: int | None = None  # absolute sample position of the next window
        self._history = _History(0)
        self._floor = 0  # utterance audio never starts before this (end of the previous one)
        self._onset = 0  # first frame of the current candidate or utterance
        self._last_speech_end = 0  # end of the latest frame at or above the offset threshold
        self._silent_frames = 0
        self._matched = False  # set_matched: the short trailing silence applies
        self._emitted = 0  # end of the audio already handed out for the open utterance

    def _step(self, p: float, fs: int, fe: int, events: list[VadEvent]) -> None:
        c = self.config
        if self._state is _State.SILENCE:
            if p < c.onset_threshold:
                return
            self._state = _State.CANDIDATE
            self._onset, self._last_speech_end, self._silent_frames = fs, fe, 0
        elif p >= c.offset_threshold:
            self._last_speech_end, self._silent_frames = fe, 0
        else:
            self._silent_frames += 1
            if self._matched and self._silent_frames >= self._matched_silence_frames:
                events.append(self._end(EndReason.MATCHED, fe))
                return
            if self._silent_frames >= self._min_silence_frames:
                if self._state is _State.SPEECH:
                    events.append(self._end(EndReason.SILENCE, fe))
                else:
                    self._state = _State.SILENCE  # a blip: never announced
                return
        if self._state is _State.CANDIDATE:
            if self._last_speech_end - self._onset >= self._min_speech:
                self._start(fe, events)
        elif fe - self._onset >= self._max_speech:  # in a pause too: the length is what is bounded
            events.append(self._end(EndReason.MAX_LENGTH, fe))

    def _start(self, now: int, events: list[VadEvent]) -> None:
        audio_start = max(self._onset - self._pre_roll, self._floor, self._history.start)
        self._state = _State.SPEECH
        self.utterances += 1
        log.debug("speech start at %.2f s (audio from %.2f s)", self._onset / SAMPLE_RATE, audio_start / SAMPLE_RATE)
        events.append(self._event(VadEventKind.SPEECH_START, self._onset, audio_start, now))

    def _end(self, reason: EndReason, now: int) -> VadEvent:
        event = self._event(VadEventKind.SPEECH_END, self._last_speech_end, self._emitted, now, reason)
        log.debug("speech end at %.2f s (%s)", self._last_speech_end / SAMPLE_RATE, reason.value)
        self._state = _State.SILENCE
        self._matched = False
        self._floor = now
        return event

    def _event(self, kind: VadEventKind, time: int, a: int, b: int, reason: EndReason | None = None) -> VadEvent:
        self._emitted = b
        return VadEvent(kind, time / SAMPLE_RATE, self._history.slice(a, b), a / SAMPLE_RATE, reason)

    def _keep_from(self, pos: int) -> int:
        """The oldest sample a later event may still need."""
        if self._state is _State.SILENCE:
            return max(pos - self._pre_roll, self._floor)
        if self._state is _State.CANDIDATE:
            return max(self._onset - self._pre_roll, self._floor)
        return self._emitted

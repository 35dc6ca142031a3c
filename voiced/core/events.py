"""What the core tells its adapters, and the requests adapters hand it: typed, protocol-free.

The core (capture, listening, intents, speech out) emits these events to every subscribed
adapter; each adapter (Hermes/MQTT, Wyoming) turns them into its own messages. Events are
delivered on the stage thread that produced them: a handler must only translate and enqueue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from voiced.intents import Intent
from voiced.tts.requests import SpeechRequest
from voiced.wake import Detection, Sensitivity

__all__ = [
    "AudioCaptured",
    "CoreEvent",
    "EventHandler",
    "IntentNotRecognized",
    "IntentRecognized",
    "ListenMode",
    "ListenRequest",
    "PartialTranscript",
    "SessionEnded",
    "SessionReason",
    "SpeakingChanged",
    "SpeechEnded",
    "SpeechFinished",
    "SpeechStarted",
    "Transcript",
    "TranscriptCorrected",
    "Utterance",
    "WakeDetected",
    "Word",
]


class ListenMode(Enum):
    ALWAYS = "always"
    """Every utterance the VAD finds is transcribed."""
    ON_REQUEST = "on_request"
    """Only utterances inside a listening request (hermes/asr/startListening) are transcribed."""
    WAKE = "wake"
    """Only the utterance after a wake word ([wake] models) is transcribed; VAD and ASR sleep until then."""


class SessionReason(Enum):
    """Why a session (one utterance and what came of it) ended."""

    NOMINAL = "nominal"
    INTENT_NOT_RECOGNIZED = "intent_not_recognized"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class Word:
    """One word of a transcript: where it sits in the text and, when known, in the stream."""

    value: str
    confidence: float
    range_start: int
    """Index of the word's first character in the transcript."""
    range_end: int
    start_s: float | None = None
    """Stream time of the word's start, in seconds."""
    end_s: float | None = None


@dataclass(frozen=True)
class ListenRequest:
    """An adapter asks the core to transcribe the next utterance(s) (listen mode on_request)."""

    session_id: str | None = None
    """The caller's session id; None: the core makes one per utterance."""
    intent_filter: tuple[str, ...] | None = None
    """Only these intents may be recognized."""
    stop_on_silence: bool = True
    """One utterance only: the request ends at the first endpoint."""
    send_audio: bool = False
    """The utterance's audio is handed back too (:class:`AudioCaptured`), after its transcript."""
    dialogue: bool = False
    """``session_id`` is one of the core's own sessions that an app leads on (Hermes startSession,
    continueSession): its utterance gets an intent and ends the session, as any of the core's own."""
    custom_data: str | None = None
    """Opaque to the core: handed back on the utterance's intent events."""
    timeout_s: float | None = None
    """The request ends (a dialogue's session with reason timeout) when no speech has begun within
    this many seconds of audio heard while it is open (our own speech not counted); None: never."""

    @property
    def callers_session(self) -> bool:
        """The session is the caller's (a dialogue manager's, as in Rhasspy): the core only transcribes;
        the caller asks for the intent (hermes/nlu/query) and starts and ends the session itself."""
        return bool(self.session_id) and not self.dialogue


@dataclass(frozen=True)
class Utterance:
    """Text for the intent stage, from speech or from an adapter's query."""

    text: str
    session_id: str | None
    confidence: float = 1.0
    words: tuple[Word, ...] | None = None
    request_id: str | None = None
    intent_filter: tuple[str, ...] | None = None
    custom_data: str | None = None
    """Opaque to the core: handed back on the intent events (Hermes echoes it)."""
    wakeword_id: str | None = None
    """The wake word the request came after, if its sender says (opaque, handed back like ``custom_data``)."""
    lang: str | None = None
    """The request's language, if its sender says (opaque, handed back like ``custom_data``)."""
    from_speech: bool = True


# -- events -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeechStarted:
    session_id: str
    start: float
    """Stream time, seconds."""
    own_session: bool = True
    """The core began the session and will end it (SessionEnded); False: a listening request's caller's."""


@dataclass(frozen=True)
class PartialTranscript:
    session_id: str
    text: str
    confidence: float
    seconds: float
    """Audio heard so far in this utterance."""
    from_templates: bool = False
    """A template sentence (a transducer's or Whisper's choice at a pause in speech)."""


@dataclass(frozen=True)
class SpeechEnded:
    session_id: str
    end: float


@dataclass(frozen=True)
class Transcript:
    session_id: str
    text: str
    confidence: float
    start: float
    end: float
    words: tuple[Word, ...] | None = None
    from_templates: bool = False
    """The text is a template sentence the decoder chose (template-aware decoding), not free text."""


@dataclass(frozen=True)
class AudioCaptured:
    """What an utterance a listening request asked the audio of sounded like (16 kHz mono float)."""

    session_id: str
    samples: np.ndarray
    sample_rate: int


@dataclass(frozen=True)
class TranscriptCorrected:
    """The cloud heard the utterance differently after its local transcript went out."""

    session_id: str
    text: str
    seconds: float


@dataclass(frozen=True)
class IntentRecognized:
    utterance: Utterance
    intent: Intent


@dataclass(frozen=True)
class IntentNotRecognized:
    utterance: Utterance


@dataclass(frozen=True)
class SessionEnded:
    session_id: str
    reason: SessionReason


@dataclass(frozen=True)
class WakeDetected:
    detection: Detection
    session_id: str
    threshold: float


@dataclass(frozen=True)
class SpeakingChanged:
    speaking: bool


@dataclass(frozen=True)
class SpeechFinished:
    """A say or play request is done (spoken, cancelled or failed): every request gets one."""

    request: SpeechRequest


@dataclass(frozen=True)
class ControlsChanged:
    """The microphone switch, the volume or the wake word sensitivity was set (by any adapter); saved already."""

    microphone: bool
    volume: float
    """The gain everything is played with now, in [0, 1]."""
    wake_sensitivity: Sensitivity


CoreEvent = (SpeechStarted | PartialTranscript | SpeechEnded | Transcript | AudioCaptured | TranscriptCorrected
             | IntentRecognized | IntentNotRecognized | SessionEnded | WakeDetected | SpeakingChanged | SpeechFinished
             | ControlsChanged)
EventHandler = Callable[[CoreEvent], None]

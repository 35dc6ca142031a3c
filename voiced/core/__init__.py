"""The protocol-free core: stages, sessions, models; typed events out, commands in."""

from voiced.core.engine import Core, WindowTap
from voiced.core.events import (
    ControlsChanged,
    CoreEvent,
    EventHandler,
    IntentNotRecognized,
    IntentRecognized,
    ListenMode,
    ListenRequest,
    PartialTranscript,
    SessionEnded,
    SessionReason,
    SpeakingChanged,
    SpeechEnded,
    SpeechFinished,
    SpeechStarted,
    Transcript,
    TranscriptCorrected,
    Utterance,
    WakeDetected,
    Word,
)
from voiced.core.models import Models

__all__ = ["Core", "Models", "WindowTap", "ControlsChanged", "CoreEvent", "EventHandler", "IntentNotRecognized", "IntentRecognized", "ListenMode", "ListenRequest", "PartialTranscript", "SessionEnded", "SessionReason", "SpeakingChanged", "SpeechEnded", "SpeechFinished", "SpeechStarted", "Transcript", "TranscriptCorrected", "Utterance", "WakeDetected", "Word"]

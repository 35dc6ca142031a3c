"""One way to load any recognizer family, chosen by what the model directory holds."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from voiced.asr.recognizer import Recognizer, RecognizerConfig
from voiced.asr.result import RecognitionResult
from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
from voiced.asr.whisper_model import is_whisper_dir
from voiced.runtime.onnx import SessionOptions

__all__ = ["AsrFamily", "SpeechRecognizer", "SpeechStream", "family_of", "load_recognizer"]


class AsrFamily(Enum):
    TRANSDUCER = "transducer"
    """Streaming transducer (sherpa-onnx / icefall export): a partial result every window."""
    WHISPER = "whisper"
    """Whisper (sherpa-onnx export): one result per utterance, at its end."""


class SpeechStream(Protocol):
    """One utterance's state."""

    def reset(self) -> None: ...
    def accept_waveform(self, samples: np.ndarray) -> None: ...
    @property
    def result(self) -> RecognitionResult: ...


class SpeechRecognizer(Protocol):
    """What the listener needs of a recognizer: audio in and compute are separate steps."""

    def create_stream(self, hotwords: Sequence[str] | None = None) -> Any: ...
    def is_ready(self, stream: Any) -> bool: ...
    def decode(self, stream: Any) -> None: ...
    def decode_all(self, stream: Any) -> None: ...
    def decode_at_pause(self, stream: Any) -> None: ...
    def finish(self, stream: Any) -> RecognitionResult: ...
    def result(self, stream: Any) -> RecognitionResult: ...


def family_of(directory: str | Path) -> AsrFamily:
    """Whisper when the directory holds ``NAME-tokens.txt`` and ``NAME-encoder*.onnx``, else transducer."""
    return AsrFamily.WHISPER if is_whisper_dir(directory) else AsrFamily.TRANSDUCER


def load_recognizer(directory: str | Path, transducer: RecognizerConfig | None = None,
                    whisper: WhisperConfig | None = None,
                    session: SessionOptions | None = None) -> SpeechRecognizer:
    """Load ``directory`` as whichever family it holds, with that family's config."""
    if family_of(directory) is AsrFamily.WHISPER:
        return WhisperRecognizer.load(directory, whisper, session)
    return Recognizer.load(directory, transducer, session)

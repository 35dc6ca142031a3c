"""``voiced understand``: what the daemon would make of recordings, transcripts and intents.

A config's models, VAD, endpointing and intents are loaded as ``voiced run`` loads them (template-
aware decoding and intent-aware endpointing included), each recording goes through the same
listener, and each utterance through the same intent stage: templates, then the local LLM when
the config has one. Not here: the cloud (a check of your config stays offline), the wake word
(every utterance is understood), speech output and the adapters.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from voiced.audio.source import SOURCE_KEY, AudioSource, NullSource, WavSource
from voiced.audio.wav import WavReader
from voiced.cloud.config import CloudConfig
from voiced.config import Config
from voiced.core.events import CoreEvent, IntentRecognized, Utterance
from voiced.core.intent_stage import IntentStage
from voiced.core.models import Models
from voiced.errors import ConfigError
from voiced.intents import Intent
from voiced.listener import ListenEventType
from voiced.runtime.hardware import select_profile
from voiced.stages import Counters

__all__ = ["Understanding", "Understood", "live_source"]


@dataclass(frozen=True)
class Understood:
    """One utterance of a recording: its transcript and the intent the daemon would publish."""

    file: str
    """The recording (or the audio source) it was heard on."""
    start: float
    """Seconds into the recording (or since listening began)."""
    end: float
    text: str
    from_templates: bool
    """Whether the transcript came from the template sentences (textCaptured's ``fromTemplates``)."""
    intent: Intent | None
    """None: the daemon would publish intentNotRecognized."""

    def to_dict(self) -> dict[str, object]:
        intent = self.intent
        return {"file": self.file, "start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
                "from_templates": self.from_templates, "intent": intent.name if intent else None,
                "slots": dict(intent.slot_values) if intent else {},
                "source": intent.source.value if intent else None}

    def __str__(self) -> str:
        said = f"{self.file}: [{self.start:.2f}-{self.end:.2f}] {self.text}"
        marked = f"{said} (template sentence)" if self.from_templates else said
        if self.intent is None:
            return f"{marked} -> no intent"
        slots = ", ".join(f"{k}: {v}" for k, v in self.intent.slot_values.items())
        return f"{marked} -> {self.intent.name} {{{slots}}}"


def live_source(config: Config, stop: threading.Event) -> AudioSource:
    """The config's ``[audio] source`` (a microphone) to understand until ``stop`` is set; checked
    before any model loads."""
    where = str(config.path) if config.path else None
    source = config.audio.open(select_profile(config.hardware.profile).alsa.capture, stop, where)
    if isinstance(source, NullSource):
        raise ConfigError(SOURCE_KEY, "is none: give WAV files, or a microphone (alsa:DEVICE) to listen to", where)
    return source


class Understanding:
    """The daemon's models, listener and intent stage from ``config``, for recordings or a microphone,
    with what the daemon would publish printed instead."""

    def __init__(self, config: Config, asr_model: Path | None = None) -> None:
        asr = replace(config.asr, model=asr_model) if asr_model is not None else config.asr
        if asr.model is None:
            raise ConfigError("asr.model", "a model is needed to understand recordings (or give --asr-model)",
                              str(config.path) if config.path else None)
        # Only what hears and understands: no voice, no wake word, no cloud.
        self.config = replace(config, asr=asr, cloud=CloudConfig(), tts=replace(config.tts, voice=None),
                              wake=replace(config.wake, models=()))
        self.counters = Counters()
        self.models = Models.load(self.config, select_profile(self.config.hardware.profile).fitted(), self.counters)
        self._answers: list[CoreEvent] = []
        self._stage = IntentStage(self.models, self.counters, self._answers.append)

    def recording(self, path: Path) -> Iterator[Understood]:
        """Each utterance of the WAV file ``path`` as it is endpointed, with its intent; from the
        channel ``[audio] channel`` picks (a 2-mic HAT's recording, heard as the daemon hears the
        HAT), unless the file has no such channel (a mono recording is all there is)."""
        channel = self.config.audio.channel
        if channel is not None:
            reader = WavReader(path)
            reader.close()
            channel = channel if channel < reader.info.channels else None
        return self.utterances(WavSource(path, channel=channel), str(path))

    def utterances(self, source: AudioSource, name: str) -> Iterator[Understood]:
        """Each utterance of ``source`` (opened and closed here), as the daemon's listener endpoints it."""
        listener = self.models.new_listener(keep_audio=False)
        with source:
            for ev in listener.events(source.chunks()):
                text = ev.text.strip()
                if ev.type is not ListenEventType.FINAL or not text:
                    continue  # as the daemon: an empty transcript asks for no intent
                yield Understood(name, ev.start, ev.end, text,
                                 ev.result is not None and ev.result.from_templates, self._intent(text))

    def _intent(self, text: str) -> Intent | None:
        self._answers.clear()
        self._stage.recognize(Utterance(text=text, session_id=None))
        recognized = [a for a in self._answers if isinstance(a, IntentRecognized)]
        return recognized[0].intent if recognized else None

    def close(self) -> None:
        self.models.close()

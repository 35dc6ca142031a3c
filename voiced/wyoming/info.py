"""``describe`` → ``info``: what this voiced offers, with real model names, languages and attribution.

Home Assistant creates one entity per program listed here (STT, TTS, wake word, intent) and
offers the satellite role when ``satellite`` is set.
"""

from __future__ import annotations

import re
from pathlib import Path

from wyoming.info import (
    AsrModel,
    AsrProgram,
    Attribution,
    Info,
    IntentModel,
    IntentProgram,
    Satellite,
    TtsProgram,
    TtsVoice,
    TtsVoiceSpeaker,
    WakeModel,
    WakeProgram,
)

from voiced import __version__
from voiced.asr.whisper import WhisperRecognizer
from voiced.core.models import Models
from voiced.wyoming.config import WyomingConfig

__all__ = ["PROGRAM", "describe", "wake_phrase"]

PROGRAM = "voiced"
"""Our program name in every section of ``info``."""

_VOICED = Attribution(name="voiced", url="https://github.com/voiced/voiced")
_WHISPER = Attribution(name="OpenAI (Whisper), sherpa-onnx export layout", url="https://github.com/openai/whisper")
_TRANSDUCER = Attribution(name="k2-fsa (icefall / sherpa-onnx transducer)", url="https://github.com/k2-fsa/sherpa-onnx")
_PIPER = Attribution(name="Piper voices (rhasspy)", url="https://huggingface.co/rhasspy/piper-voices")
_OPENWAKEWORD = Attribution(name="openWakeWord (dscripka)", url="https://github.com/dscripka/openWakeWord")
_HASSIL = Attribution(name="hassil templates", url="https://github.com/home-assistant/hassil")


def _language_tag(code: str | None, default: str) -> str:
    """``en_US`` → ``en-US``: the BCP 47 form Home Assistant matches pipeline languages against."""
    return (code or default).replace("_", "-")


def wake_phrase(label: str) -> str:
    """``hey_jarvis_v0.1`` → ``hey jarvis``: what to say, without the model's version."""
    return re.sub(r"_v\d+(\.\d+)*$", "", label).replace("_", " ")


def wake_key(name: str) -> str:
    """How a wake word name compares, as wyoming-openwakeword compares them: ``Hey_Jarvis``,
    ``hey jarvis`` and ``hey_jarvis_v0.1`` are one (satellites send ``--wake-word-name hey_jarvis``)."""
    return wake_phrase(name.strip().lower())


def describe(models: Models, config: WyomingConfig, site_id: str) -> Info:
    """The info event for this process's models; sections without a model are empty (HA then offers no entity)."""
    info = Info()
    language = models.intents.language or "en"
    recognizer = models.recognizer
    if recognizer is not None and models.config.asr.model is not None:
        whisper = isinstance(recognizer, WhisperRecognizer)
        if whisper:
            languages = sorted(recognizer.model.languages) if recognizer.model.multilingual else ["en"]
        else:
            languages = [language]
        # Whisper files carry the model's own name (tiny.en-tokens.txt); a transducer is its directory
        name = (recognizer.model.files.tokens.name.removesuffix("-tokens.txt") if whisper
                else Path(models.config.asr.model).name)
        info.asr.append(AsrProgram(
            name=PROGRAM, attribution=_VOICED, installed=True, version=__version__,
            description="voiced speech-to-text (Whisper per utterance, or a streaming transducer)",
            models=[AsrModel(name=name, attribution=_WHISPER if whisper else _TRANSDUCER, installed=True,
                             description=f"{'Whisper' if whisper else 'streaming transducer'} ({name})",
                             version=None, languages=languages)],
            # our partials feed transcript-chunk events
            supports_transcript_streaming=True,
        ))
    voice = models.voice
    if voice is not None:
        files = voice.files
        path = files.model or files.config
        voice_name = path.name.removesuffix(".onnx.json").removesuffix(".onnx")
        speakers = [TtsVoiceSpeaker(name=s) for s in sorted(voice.config.speaker_id_map)] or None
        info.tts.append(TtsProgram(
            name=PROGRAM, attribution=_VOICED, installed=True, version=__version__,
            description="voiced text-to-speech (Piper voices)",
            voices=[TtsVoice(name=voice_name, attribution=_PIPER, installed=True, version=None,
                             description=f"Piper voice {voice_name}",
                             languages=[_language_tag(voice.config.language, "en_US")], speakers=speakers)],
            supports_synthesize_streaming=True,
        ))
    if models.wake is not None:
        info.wake.append(WakeProgram(
            name=PROGRAM, attribution=_VOICED, installed=True, version=__version__,
            description="voiced wake words (openWakeWord models)",
            models=[WakeModel(name=label, attribution=_OPENWAKEWORD, installed=True, version=None,
                              description=wake_phrase(label), languages=["en"], phrase=wake_phrase(label))
                    for label in models.wake.labels],
        ))
    if models.intents.enabled:
        info.intent.append(IntentProgram(
            name=PROGRAM, attribution=_VOICED, installed=True, version=__version__,
            description="voiced intents (hassil templates)",
            models=[IntentModel(name="templates", attribution=_HASSIL, installed=True, version=None,
                                description=f"{len(models.intents.intent_names)} intents", languages=[language])],
        ))
    if config.satellite:
        info.satellite = Satellite(
            name=f"voiced-{site_id}", attribution=_VOICED, installed=True, version=__version__,
            description=f"voiced satellite (site {site_id})", area=config.area, has_vad=True,
            active_wake_words=list(models.wake.labels) if models.wake is not None else None,
            supports_trigger=True,
        )
    return info

"""Text to speech: Piper voices streamed sentence by sentence, played through ALSA.

    voice = PiperVoice.load("en_US-lessac-medium.onnx")          # immutable, shareable
    for chunk in voice.synthesize("Hello. How are you?"):         # AudioChunk per sentence
        ...
    speaker = Speaker(voice, AlsaPlayer(PlaybackConfig()), on_speaking=mute_mic, on_finished=answer)
    speaker.start(); speaker.say("It is seven o'clock."); speaker.interrupt(); speaker.close()

Modules: ``config`` (voice config, synthesis options, settings), ``phonemes`` (espeak-ng
via piper-phonemize, Piper ids), ``sentences`` (text checks, long-sentence cutting),
``model`` (whole model, streaming encoder/decoder), ``voice`` (PiperVoice), ``audio``
(AudioChunk, Piper's int16 conversion, WAV bytes), ``playconfig`` / ``device`` /
``playback`` (ALSA output on its own thread), ``requests`` / ``speaker`` (requests, half-duplex), ``cli``.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names for type checkers; at run time each is imported when first used
    from voiced.tts.audio import AudioChunk, float_to_int16, wav_to_chunk
    from voiced.tts.config import PhonemeType, SynthesisOptions, VoiceConfig, VoiceSettings
    from voiced.tts.errors import NothingToSpeak, TextError
    from voiced.tts.playback import AlsaPlayer, PlaybackStream
    from voiced.tts.playconfig import PlaybackConfig, PlaybackOutcome, PlaybackResult, PlaybackStats
    from voiced.tts.requests import (
        RequestKind,
        SpeakerConfig,
        SpeakerStats,
        SpeechOutcome,
        SpeechRequest,
        SpeechResult,
    )
    from voiced.tts.speaker import Speaker
    from voiced.tts.voice import PiperVoice, VoiceFiles

__all__ = [
    "AlsaPlayer",
    "AudioChunk",
    "NothingToSpeak",
    "PhonemeType",
    "PiperVoice",
    "PlaybackConfig",
    "PlaybackOutcome",
    "PlaybackResult",
    "PlaybackStats",
    "PlaybackStream",
    "RequestKind",
    "Speaker",
    "SpeakerConfig",
    "SpeakerStats",
    "SpeechOutcome",
    "SpeechRequest",
    "SpeechResult",
    "SynthesisOptions",
    "TextError",
    "VoiceConfig",
    "VoiceFiles",
    "VoiceSettings",
    "float_to_int16",
    "wav_to_chunk",
]

_HOME = {
    "AlsaPlayer": "voiced.tts.playback",
    "AudioChunk": "voiced.tts.audio",
    "NothingToSpeak": "voiced.tts.errors",
    "PhonemeType": "voiced.tts.config",
    "PiperVoice": "voiced.tts.voice",
    "PlaybackConfig": "voiced.tts.playconfig",
    "PlaybackOutcome": "voiced.tts.playconfig",
    "PlaybackResult": "voiced.tts.playconfig",
    "PlaybackStats": "voiced.tts.playconfig",
    "PlaybackStream": "voiced.tts.playback",
    "RequestKind": "voiced.tts.requests",
    "Speaker": "voiced.tts.speaker",
    "SpeakerConfig": "voiced.tts.requests",
    "SpeakerStats": "voiced.tts.requests",
    "SpeechOutcome": "voiced.tts.requests",
    "SpeechRequest": "voiced.tts.requests",
    "SpeechResult": "voiced.tts.requests",
    "SynthesisOptions": "voiced.tts.config",
    "TextError": "voiced.tts.errors",
    "VoiceConfig": "voiced.tts.config",
    "VoiceFiles": "voiced.tts.voice",
    "VoiceSettings": "voiced.tts.config",
    "float_to_int16": "voiced.tts.audio",
    "wav_to_chunk": "voiced.tts.audio",
}
"""Where each public name lives: importing ``voiced.tts`` (or its ``cli``, which every ``voiced``
command's parser does) loads none of numpy, ONNX Runtime or ALSA until a name is asked for."""


def __getattr__(name: str) -> object:
    try:
        module = _HOME[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value

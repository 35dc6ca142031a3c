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

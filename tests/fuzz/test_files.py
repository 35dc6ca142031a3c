"""Fuzzing voiced's file loaders (a seeded slice of ``voiced bench fuzz``), and what it found.

Each generated file must load, or fail with a VoicedError naming the file (or the config key);
Hypothesis shrinks any other outcome to a minimal case.
"""

from __future__ import annotations

import pytest

from voiced.bench.fuzz import FILE_KINDS, MODEL_KINDS, fuzz_files
from voiced.bench.fuzz_files import Outcome, load_intents, load_wav, wav_header
from voiced.errors import AudioError, ConfigError


@pytest.mark.parametrize("kind", sorted(FILE_KINDS))
def test_mutated_files_load_or_fail_clearly(kind: str, tmp_path, request) -> None:
    """Models: truncated, byte-flipped, another role's real model (Silero given a wake head …); outbox
    files: bytes flipped and whole pages wiped, as a failing SD card leaves them."""
    speech = request.getfixturevalue("speech") if kind == "wav" and _shared() else None
    models = request.getfixturevalue("models") if kind in MODEL_KINDS else None  # skips without ../shared
    n = 30 if kind in MODEL_KINDS else 80
    tally = fuzz_files(kind, n, tmp_path, run_seed=1234, speech=speech, strict=True, models=models)
    assert sum(tally.counts.values()) == n
    # the mutations do reach the checks: a clear error, or (a damaged outbox) a recovery
    assert tally.counts.get(Outcome.CLEAR_ERROR.value, 0) + tally.counts.get(Outcome.RECOVERED.value, 0) > 0


def _shared() -> bool:
    from tests.conftest import SHARED

    return SHARED is not None


# -- what fuzzing found (each fixed) -------------------------------------------------------------


def test_a_template_file_that_is_not_utf8_is_a_config_error_naming_it(tmp_path) -> None:
    path = tmp_path / "intents.yaml"
    path.write_bytes(b"language: en\nintents:\n  Hass\x8fTurnOn: {}\n")
    with pytest.raises(ConfigError, match="intents.yaml is not UTF-8 text"):
        load_intents(path)


@pytest.mark.parametrize("rate", [1, 100, 999, 768_001, 1_000_000])
def test_a_wav_rate_outside_1_khz_to_768_khz_is_refused_not_resampled(tmp_path, rate: int) -> None:
    # 1 Hz made each byte 16,000 output samples: a 200 kB file became 28 hours of audio
    path = tmp_path / "odd.wav"
    path.write_bytes(wav_header(rate, 1, 16, 1, 20_000) + bytes(20_000))
    with pytest.raises(AudioError, match=f"odd.wav: sample rate {rate} Hz is outside"):
        load_wav(path)


def test_a_wav_claiming_65535_channels_is_refused(tmp_path) -> None:
    # each 100 ms block would have been 420 MB of samples
    path = tmp_path / "wide.wav"
    path.write_bytes(wav_header(16_000, 65_535, 8, 1, 200_000) + bytes(200_000))  # 8-bit: block align 65,535 fits
    with pytest.raises(AudioError, match="wide.wav: 65535 channels; at most 32"):
        load_wav(path)


def test_text_with_control_characters_is_spoken_not_a_crash_of_the_speak_stage() -> None:
    # a NUL in hermes/tts/say text raised ValueError inside espeak-ng's bridge and restarted the
    # speak stage (found by the MQTT fuzzer); control characters and lone surrogates now read as spaces
    from tests.tts.joe import joe_voice_path
    from voiced.tts import PiperVoice

    voice = PiperVoice.load(joe_voice_path())
    chunks = list(voice.synthesize("Turn on\x00 the light\ud800.\x07"))
    assert chunks and sum(len(c.samples) for c in chunks) > 5000


def test_a_piper_voice_keeps_no_memory_plan_per_sentence_length() -> None:
    # the MQTT fuzzer saw the daemon's RSS step up as tts/say texts of new lengths arrived:
    # ONNX Runtime's memory pattern keeps a plan per input shape (600 sentences: 439 MB RSS, 358 MB
    # without, same CPU); the voice's sessions now run without it, other models keep it
    from tests.tts.joe import joe_voice_path
    from voiced.tts import PiperVoice

    voice = PiperVoice.load(joe_voice_path())
    assert voice._model._session.get_session_options().enable_mem_pattern is False

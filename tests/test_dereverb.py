"""WPE dereverberation on real read speech put in a simulated room.

The room is ``voiced bench commands``' renderer's: a decaying-noise impulse response (RT60 0.5 s)
whose direct path is well below the tail. What WPE must keep is the direct sound and the first
reflections (the first 32 ms of the response); what it must take away is the rest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import voiced.audio.dereverb as dereverb
from voiced.audio.dereverb import DereverbConfig, dereverberate, wpe
from voiced.audio.wav import read_wav
from voiced.bench.commands import room_impulse
from voiced.errors import ConfigError

EARLY = 512
"""Samples of the impulse response counted as the sound to keep (32 ms)."""


@pytest.fixture(scope="module")
def read_speech(speech: Path) -> np.ndarray:
    files = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:2]
    return np.concatenate([read_wav(f)[0][:, 0] for f in files]).astype(np.float32)


def _room(rt60: float = 0.5, seed: int = 7) -> np.ndarray:
    return room_impulse(rt60, np.random.default_rng(seed))


def _late_ratio_db(heard: np.ndarray, early: np.ndarray) -> float:
    """Energy of what is not the early sound, relative to the early sound (dB; lower is drier),
    after the best gain on the early sound."""
    n = min(len(heard), len(early))
    heard, early = heard[:n].astype(np.float64), early[:n].astype(np.float64)
    gain = float(heard @ early / (early @ early))
    rest = heard - gain * early
    return 10 * np.log10(float(rest @ rest) / float((gain * early) @ (gain * early)))


@pytest.mark.shared
@pytest.mark.parametrize("rt60", [0.3, 0.5, 0.8])
def test_late_reverberation_is_taken_away_and_the_early_sound_kept(read_speech: np.ndarray, rt60: float) -> None:
    ir = _room(rt60)
    wet = np.convolve(read_speech, ir)[:len(read_speech)].astype(np.float32)
    early = np.convolve(read_speech, ir[:EARLY])[:len(read_speech)]
    dry = dereverberate(wet)
    before, after = _late_ratio_db(wet, early), _late_ratio_db(dry, early)
    # measured: -4.0 -> -5.7 dB (RT60 0.3 s), 0.1 -> -1.0 (0.5 s), 3.0 -> 2.0 (0.8 s); one microphone
    # cannot take all of a noise-like tail away, what it takes is what Whisper stumbled over
    assert after < before - 0.7, (before, after)
    assert len(dry) == len(wet) and dry.dtype == np.float32


@pytest.mark.shared
def test_the_same_as_the_reference_implementation(read_speech: np.ndarray) -> None:
    """nara_wpe (by the method's authors' group, Paderborn University) on the same spectra."""
    nara = pytest.importorskip("nara_wpe.wpe", reason="nara-wpe (the test extra) is not installed")
    wet = np.convolve(read_speech, _room(0.5))[:len(read_speech)].astype(np.float32)
    config = DereverbConfig()
    spectra = dereverb._stft(wet, config)
    ours = wpe(spectra, config)
    theirs = nara.wpe(spectra.astype(np.complex128)[:, None, :], taps=config.taps, delay=config.delay,
                      iterations=config.iterations, statistics_mode="full")[:, 0, :]
    # measured: 0.16 % of what WPE takes away (single against double precision)
    assert np.linalg.norm(ours - theirs) < 0.01 * np.linalg.norm(theirs - spectra)


@pytest.mark.shared
def test_speech_without_a_room_passes_almost_unchanged(read_speech: np.ndarray) -> None:
    dry = dereverberate(read_speech)
    # measured: correlation 0.998 (a close microphone's own small room is what changes)
    assert np.corrcoef(dry, read_speech)[0, 1] > 0.99


@pytest.mark.shared
def test_long_audio_is_worked_in_blocks_with_the_same_result(read_speech: np.ndarray,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    wet = np.convolve(read_speech, _room(seed=3))[:len(read_speech)].astype(np.float32)
    # one iteration: later ones re-weight by their own output, which amplifies rounding in the
    # worst-conditioned frequencies (1-2 % apart in this room between orders of summation)
    config = DereverbConfig(iterations=1)
    whole = dereverberate(wet, config)
    monkeypatch.setattr(dereverb, "BLOCK", 37)  # many blocks, none aligned with anything
    blocked = dereverberate(wet, config)
    # measured: 0.003 % of what WPE takes away
    assert np.linalg.norm(blocked - whole) < 1e-3 * np.linalg.norm(whole - wet)


def test_audio_too_short_for_a_filter_comes_back_as_it_was() -> None:
    for n in (0, 100, 600):
        x = np.linspace(-0.5, 0.5, n, dtype=np.float32)
        assert np.array_equal(dereverberate(x), x)


@pytest.mark.parametrize(("field", "value"), [("taps", 0), ("delay", 0), ("iterations", 11), ("fft", 500),
                                              ("hop", 300)])
def test_bad_settings_name_the_setting(field: str, value: int) -> None:
    with pytest.raises(ConfigError, match=field):
        DereverbConfig(**{field: value})

"""The satellite's timer bell: what it rings, and clear errors for a bell it cannot ring.
(The ringing itself, through a real daemon and ALSA, is in test_satellite.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.audio.wav import write_wav
from voiced.config import Config
from voiced.errors import ConfigError
from voiced.wyoming.timers import CHIME_RATE, chime, load_bell


def test_the_built_in_chime_is_two_bell_notes_with_headroom() -> None:
    bell = load_bell(None)
    assert bell.sample_rate == CHIME_RATE and bell.channels == 1
    assert 0.8 < bell.duration < 1.0
    peak = int(np.max(np.abs(bell.samples.astype(np.int32))))
    assert 0.45 * 32767 < peak <= 0.5 * 32767 + 1
    assert abs(int(bell.samples[0])) < 100  # a soft attack: no click
    # two notes: the strongest frequency of each half is its note (E6, then C6)
    halves = np.split(bell.samples[: len(bell.samples) // 2 * 2].astype(np.float64), 2)
    tops = [np.argmax(np.abs(np.fft.rfft(h))) * CHIME_RATE / len(h) for h in halves]
    assert tops[0] == pytest.approx(1318.5, abs=5) and tops[1] == pytest.approx(1046.5, abs=5)
    assert np.array_equal(chime().samples, bell.samples)


def test_a_wav_bell_is_read_at_its_own_rate_and_mixed_to_mono(tmp_path: Path) -> None:
    stereo = np.stack([np.full(800, 0.25), np.full(800, -0.25)], axis=1).astype(np.float32)
    stereo[:, 0] = np.linspace(-0.5, 0.5, 800)
    write_wav(tmp_path / "bell.wav", stereo, 8000)
    bell = load_bell(tmp_path / "bell.wav")
    assert bell.sample_rate == 8000 and bell.channels == 1 and len(bell.samples) == 800
    assert np.allclose(bell.samples / 32768, stereo.mean(axis=1), atol=1e-4)


@pytest.mark.parametrize("content", [None, b"RIFF but not a wave", b""])
def test_a_bell_that_cannot_ring_names_the_key_and_the_file(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "bell.wav"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=r"wyoming\.timer_finished_wav: .*bell\.wav"):
        load_bell(path)


def test_timer_keys_are_checked_and_the_bell_is_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "voiced.toml").write_text('[wyoming]\ntimer_finished_wav = "sounds/bell.wav"\n')
    config = Config.from_file(tmp_path / "voiced.toml")
    assert config.wyoming.timer_finished_wav == tmp_path / "sounds" / "bell.wav"
    assert (config.wyoming.timer_rings, config.wyoming.timer_ring_gap_s) == (5, 3.0)
    for key, value in (("timer_rings", -1), ("timer_rings", 101), ("timer_ring_gap_s", 61.0)):
        with pytest.raises(ConfigError, match=f"wyoming.{key} in .*bad.toml"):
            (tmp_path / "bad.toml").write_text(f"[wyoming]\n{key} = {value}\n")
            Config.from_file(tmp_path / "bad.toml")

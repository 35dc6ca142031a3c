"""Whisper's features computed while the audio arrives are the one-pass features, bit for bit.

Real speech, fed in random pieces (1 sample to 0.2 s), read at random moments as if the
utterance ended there, and at its end. The one pass is what sherpa-onnx computes
(tests/test_whisper_features.py checks that against sherpa-onnx's own graph input).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.asr.whisper_features import HOP, LogMelFrames, log10_mel, log_mel, normalize
from voiced.audio.wav import read_wav

pytest.importorskip("kaldi_native_fbank", reason="kaldi-native-fbank is not installed")


def _speech(speech: Path) -> list[np.ndarray]:
    files = [speech / "jfk" / "jfk.wav", *sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:6]]
    return [read_wav(f)[0][:, 0] for f in files]


@pytest.mark.shared
def test_frames_as_they_come_equal_one_pass_at_every_cut_and_the_end(speech: Path) -> None:
    rng = np.random.default_rng(7)
    checked = 0
    for samples in _speech(speech):
        online = LogMelFrames(80)
        given = 0
        while given < len(samples):
            n = int(rng.integers(1, 3200))
            online.accept_waveform(samples[given:given + n])
            given = min(len(samples), given + n)
            if rng.random() < 0.1:  # read now, as a partial or pause decode does
                so_far = online.frames(samples[:given])
                assert np.array_equal(so_far, log10_mel(samples[:given], 80)), given
                checked += 1
        online.input_finished()
        whole = online.frames(samples)
        assert whole.shape == (int((len(samples) + HOP // 2) // HOP), 80)
        assert np.array_equal(whole, log10_mel(samples, 80))
        assert np.array_equal(normalize(whole), log_mel(samples, 80))
    assert checked >= 20


def test_short_and_empty_audio() -> None:
    """Fewer samples than one window: the frames touching the start are the one pass's too."""
    rng = np.random.default_rng(1)
    for length in (0, 1, 100, 159, 160, 401, 599):
        samples = (rng.standard_normal(length) * 0.1).astype(np.float32)
        online = LogMelFrames(80)
        online.accept_waveform(samples)
        assert np.array_equal(online.frames(samples), log10_mel(samples, 80)), length
        online.input_finished()
        assert np.array_equal(online.frames(samples), log10_mel(samples, 80)), length
    with pytest.raises(RuntimeError):
        online.accept_waveform(samples)

"""Whisper's mel energies are kaldi-native-fbank's bits (what sherpa-onnx computes), however computed.

voiced computes them in numpy where that gives the library's bits (voiced/asr/whisper_fbank.py),
and as the audio arrives (LogMelFrames). Real speech: each way against the library itself, fed
in random pieces (1 sample to 0.2 s), read at random moments as if the utterance ended there,
and at its end. tests/test_whisper_features.py checks the one pass against sherpa-onnx's own
graph input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.asr import whisper_fbank, whisper_features
from voiced.asr.whisper_fbank import frame_count, frame_energies, ready_frames
from voiced.asr.whisper_features import HOP, LogMelFrames, log10_mel, log_mel, normalize
from voiced.audio.wav import read_wav

knf = pytest.importorskip("kaldi_native_fbank", reason="kaldi-native-fbank is not installed")


def _library(samples: np.ndarray) -> tuple[np.ndarray, int]:
    """kaldi-native-fbank's mel energies of ``samples`` (one pass), and its frames ready before the end."""
    options = knf.WhisperFeatureOptions()
    options.dim = 80
    fbank = knf.OnlineWhisperFbank(options)
    fbank.accept_waveform(16000, np.ascontiguousarray(samples, np.float32))
    ready = fbank.num_frames_ready
    fbank.input_finished()
    return np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)], np.float32).reshape(-1, 80), ready


def _library_log10(samples: np.ndarray) -> np.ndarray:
    return whisper_features._log10(_library(samples)[0])


def _files(speech: Path) -> list[Path]:
    return [speech / "jfk" / "jfk.wav", speech / "misc_en" / "beckett.wav",
            *sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))]


@pytest.fixture(params=["numpy", "kaldi-native-fbank"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy" and not whisper_fbank.matches_knf(80):
        pytest.skip("numpy's Whisper fbank is not kaldi-native-fbank's bits on this machine: voiced uses the library")
    if request.param != "numpy":
        monkeypatch.setattr(whisper_fbank, "matches_knf", lambda n_mels: False)
    return request.param


@pytest.mark.shared
def test_numpy_energies_are_the_library_s_bits_on_every_real_file(speech: Path) -> None:
    if not whisper_fbank.matches_knf(80):
        pytest.skip("numpy's Whisper fbank is not kaldi-native-fbank's bits on this machine: voiced uses the library")
    """jfk, beckett and the 29 hifitts files tests/test_whisper_features.py does not compare with
    sherpa-onnx's graph input (the 118-file INT8 token test decodes them all this way)."""
    differ = []
    files = _files(speech)
    for path in [*files[:2], *files[4::4]]:
        samples = read_wav(path)[0][:, 0]
        if not np.array_equal(frame_energies(samples, 0, frame_count(len(samples)), 80), _library(samples)[0]):
            differ.append(path.name)
    assert not differ, f"{len(differ)} files differ from kaldi-native-fbank {knf.__version__}: {differ[:5]}"


def test_frame_counts_and_short_signals_are_the_library_s() -> None:
    samples = (np.random.default_rng(3).standard_normal(2000) * 0.1).astype(np.float32)
    for length in [*range(0, 900, 7), 1000, 1999]:
        energies, ready = _library(samples[:length])
        assert ready_frames(length) == ready, length
        assert frame_count(length) == len(energies), length
        if whisper_fbank.matches_knf(80):
            assert np.array_equal(frame_energies(samples[:length], 0, frame_count(length), 80), energies), length


def test_the_probe_finds_a_difference() -> None:
    """``matches_knf`` is not blind: with one twiddle a bit off, it says no (and the library is used)."""
    whisper_fbank.matches_knf.cache_clear()
    cos, minus_sin = whisper_fbank._twiddles(400)
    saved = cos[7]
    try:
        cos[7] = np.nextafter(saved, np.float32(2))
        assert not whisper_fbank.matches_knf(80)
    finally:
        cos[7] = saved
        whisper_fbank.matches_knf.cache_clear()


@pytest.mark.shared
def test_frames_as_they_come_equal_the_library_at_every_cut_and_the_end(speech: Path, backend: str) -> None:
    rng = np.random.default_rng(7)
    checked = 0
    for path in _files(speech)[3:7]:
        samples = read_wav(path)[0][:, 0]
        cuts = sorted(rng.integers(1, len(samples), 4))  # read there, as a partial or pause decode does
        online = LogMelFrames(80)
        given = 0
        while given < len(samples):
            n = int(rng.integers(1, 3200))
            online.accept_waveform(samples[given:given + n])
            given = min(len(samples), given + n)
            if cuts and given >= cuts[0]:
                while cuts and given >= cuts[0]:
                    cuts.pop(0)
                assert np.array_equal(online.frames(samples[:given]), _library_log10(samples[:given])), given
                checked += 1
        online.input_finished()
        whole = online.frames(samples)
        assert whole.shape == ((len(samples) + HOP // 2) // HOP, 80)
        assert np.array_equal(whole, _library_log10(samples))
        assert np.array_equal(whole, log10_mel(samples, 80))
        assert np.array_equal(normalize(whole), log_mel(samples, 80))
    assert checked >= 10


def test_short_and_empty_audio(backend: str) -> None:
    """Fewer samples than one window: the frames touching the start are the library's too."""
    rng = np.random.default_rng(1)
    for length in (0, 1, 100, 159, 160, 279, 280, 401, 599):
        samples = (rng.standard_normal(length) * 0.1).astype(np.float32)
        online = LogMelFrames(80)
        online.accept_waveform(samples)
        assert np.array_equal(online.frames(samples), _library_log10(samples)), length
        online.input_finished()
        assert np.array_equal(online.frames(samples), _library_log10(samples)), length
    with pytest.raises(RuntimeError):
        online.accept_waveform(samples)


@pytest.mark.shared
def test_the_bench_compares_the_same_bits(speech: Path) -> None:
    """``voiced bench asr``'s features line times the library and voiced on the same audio and says
    whether their bits agree (they do on this machine when the probe chose numpy)."""
    from voiced.bench.whisper import features_side_by_side

    report = features_side_by_side([read_wav(speech / "jfk" / "jfk.wav")[0][:, 0]], passes=1)
    assert report["same_bits"] is True
    assert report["voiced_uses_numpy"] is whisper_fbank.matches_knf(80)
    assert report["kaldi_native_fbank_cpu_s"] > 0 and report["voiced_numpy_cpu_s"] > 0

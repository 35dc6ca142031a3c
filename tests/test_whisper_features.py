"""voiced feeds the Whisper encoder exactly what sherpa-onnx feeds it, bit for bit, on real files.

FP32 decoding hides a last-bit difference in the features; INT8 does not (the encoder quantizes its
activations on the fly, so one rounding step more or less changes a token). kaldi-native-fbank
1.23.0's Whisper fbank differs from 1.22's, which sherpa-onnx 2.0.1 computes, in 79% of jfk's values:
that alone made 8 of the 118 files decode differently under the same ONNX Runtime.
sherpa-onnx itself runs a probe model (tests/whisper_probe.py) that compares its input in the graph.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_whisper import _samples, diagnostic_files
from voiced.asr.whisper import encoder_input, log_mel

pytest.importorskip("sherpa_onnx", reason="sherpa-onnx (the reference) is not installed")
pytest.importorskip("onnx", reason="the probe model is written with onnx (pip install -e '.[test]')")

TAIL_PADDING = 1000  # sherpa-onnx's default, and WhisperConfig's


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory):
    from tests.whisper_probe import FeatureProbe

    return FeatureProbe(tmp_path_factory.mktemp("whisper-probe"))


@pytest.mark.shared
def test_encoder_input_is_sherpa_onnx_s_bit_for_bit_on_real_files(probe, shared: Path) -> None:
    import kaldi_native_fbank

    files = diagnostic_files(shared / "speech")
    assert len(files) == 31
    differ = []
    for path in files:
        samples = _samples(path)
        fed, _ = encoder_input(log_mel(samples, 80), TAIL_PADDING)
        reading = probe.read(samples, fed)
        if reading.frames != len(fed) or reading.differing:
            differ.append((path.name, reading))
    assert not differ, (f"{len(differ)}/{len(files)} files: the features differ from sherpa-onnx's "
                        f"(kaldi-native-fbank {kaldi_native_fbank.__version__}; sherpa-onnx 2.0.1 computes 1.22's): "
                        f"{differ[:3]}")


@pytest.mark.shared
def test_the_probe_sees_a_one_bit_change(probe, shared: Path) -> None:
    """The probe is not blind: one value nudged by one ulp is found, where it is."""
    import numpy as np

    samples = _samples(shared / "speech" / "jfk" / "jfk.wav")
    fed, _ = encoder_input(log_mel(samples, 80), TAIL_PADDING)
    nudged = fed.copy()
    nudged[123, 45] = np.nextafter(nudged[123, 45], np.float32(np.inf))
    reading = probe.read(samples, nudged)
    assert (reading.frames, reading.differing, reading.first) == (len(fed), 1, (45, 123))
    assert 0 < reading.max_difference <= 1e-6

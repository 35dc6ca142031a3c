"""``voiced bench asr``'s in-process stream: where voiced's CPU time goes, part by part."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.modelgen.transducer import make_transducer
from voiced.asr.recognizer import Recognizer, RecognizerConfig
from voiced.bench.asr import _voiced_stream
from voiced.bench.common import read_samples


@pytest.mark.shared
def test_the_stream_figures_split_the_cpu_time_by_part(tmp_path: Path, speech: Path) -> None:
    model = make_transducer(tmp_path / "z2", "zipformer2", seed=7, int8=True)
    files = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:3]
    audio = np.concatenate(read_samples(files))
    figures = _voiced_stream(model, 1, [audio], 10)
    split = figures["cpu_split_s"]
    assert set(split) == {"features", "encoder", "decoder", "joiner", "search_and_results"}
    assert split["encoder"] > 0 and split["features"] > 0 and split["joiner"] > 0
    assert min(split.values()) >= 0
    # the parts are within the stream's CPU time (the timed calls run in this thread)
    assert sum(split.values()) <= figures["cpu_s"] * 1.05 + 0.01, (split, figures["cpu_s"])
    # timing wraps one recognizer's model, not the class: another recognizer's calls stay plain
    other = Recognizer.load(model, RecognizerConfig(threads=1))
    assert "run_encoder" not in vars(other.model)

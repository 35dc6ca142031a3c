"""``voiced bench service``: real cold starts of ``voiced run`` under a real notify socket (figures
are printed, never asserted: only that the bench runs the daemon it says and reads its figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.modelgen.transducer import make_transducer
from tests.tts.joe import joe_voice_path
from voiced.bench.service import bench_service_starts


@pytest.mark.shared
def test_cold_starts_with_a_voice_are_measured(tmp_path: Path, models: Path) -> None:
    asr = make_transducer(tmp_path / "z2", "zipformer2", int8=True)
    report = bench_service_starts(asr, models / "silero_vad_v5" / "silero_vad.onnx", idle_seconds=0.5, starts=2,
                                  voice=joe_voice_path())
    assert report["starts"] == 2 and len(report["cold_start_to_ready_ms_each"]) == 2
    first = report["first_run"]
    assert first["cpu_s_until_ready"] > 0 and first["peak_rss_mb"] > 0
    assert first["models"]["voice"] == str(joe_voice_path())

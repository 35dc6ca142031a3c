"""``voiced bench wyoming`` runs end to end and reports both sides of each figure."""

from __future__ import annotations

import pytest

from tests.tts.joe import joe_voice_path
from voiced.bench.wyoming import bench_wyoming


@pytest.mark.shared
def test_bench_wyoming_compares_the_protocol_with_direct_work(whisper_model_dir, speech) -> None:
    wav = speech / "hifitts_6097_5min" / "audio" / "roots_19_morris_0269.wav"
    figures = bench_wyoming(whisper_model_dir, joe_voice_path(), [wav], runs=1)
    assert figures["transcripts_equal"] == "1/1"  # the same text either way
    for key in ("wyoming_audio_stop_to_transcript_ms_p50", "direct_last_chunk_to_final_ms_p50",
                "wyoming_synthesize_to_first_audio_ms_p50", "direct_first_audio_ms_p50"):
        assert figures[key] > 0
    assert isinstance(figures["protocol_overhead_ms_p50"], float)

"""A short slice of ``voiced bench soak``: every transcript of a loop of real speech reaches the broker,
and file descriptors and threads do not grow while it runs (the benchmark runs 24 hours of audio)."""

from __future__ import annotations

import pytest

from tests.modelgen.transducer import make_transducer
from tests.mqtt.conftest import MOSQUITTO
from voiced.bench.soak import bench_soak


@pytest.mark.shared
def test_a_loop_of_real_speech_loses_no_transcript_and_leaks_no_fds_or_threads(tmp_path, speech) -> None:
    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    model = make_transducer(tmp_path / "z2", "zipformer2", seed=7, int8=True)
    figures = bench_soak(model, speech, hours=0.05, sample_s=1.0, queries_per_s=5.0)
    assert figures["transcripts_produced"] >= 30
    assert figures["transcripts_lost"] == 0 and figures["transcripts_delivered"] == figures["transcripts_produced"]
    assert figures["fds_min_max"][1] - figures["fds_min_max"][0] <= 1
    assert figures["threads_min_max"][0] == figures["threads_min_max"][1]
    assert figures["intent_answers"] >= figures["queries_sent"]  # the MQTT side answered meanwhile


@pytest.mark.shared
def test_a_home_assistant_set_up_answers_every_transcript_and_every_say(tmp_path, speech, models,
                                                                      whisper_int8_dir) -> None:
    """The daemon a Home Assistant user runs: Whisper decoding template-aware against the built-in
    sentences, Silero, and the joe voice answering hermes/tts/say while it listens (muted windows
    count as heard: the run ends)."""
    from tests.mqtt.test_whisper_daemon import _joe_voice

    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    figures = bench_soak(whisper_int8_dir, speech, hours=0.01, sample_s=1.0, queries_per_s=2.0,
                         vad_model=models / "silero_vad_v5" / "silero_vad.onnx", builtin=True, voice=_joe_voice(),
                         says_per_s=0.5)
    assert figures["transcripts_produced"] >= 3  # fewer than the clips: speech while it speaks is muted
    assert figures["transcripts_lost"] == 0 and figures["transcripts_duplicated"] == 0
    assert figures["says_sent"] >= 3 and figures["says_finished"] == figures["says_sent"]
    assert figures["intent_answers"] >= figures["queries_sent"]

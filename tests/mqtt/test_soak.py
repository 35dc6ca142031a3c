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


@pytest.mark.shared
def test_ctrl_c_ends_the_soak_through_its_clean_up(tmp_path, speech) -> None:
    """A SIGINT to the bench left its daemon's stages inside ONNX Runtime while the process exited
    ("terminate called without an active exception", exit 134) and its mosquitto running."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.test_cli_listen import REPO

    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    model = make_transducer(tmp_path / "z2", "zipformer2", seed=7, int8=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp_path))  # its work folder under ours
    proc = subprocess.Popen([sys.executable, "-m", "voiced", "bench", "soak", "--asr-model", str(model),
                             "--speech", str(speech), "--hours", "1", "--sample-s", "1"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a test run started in the background ignores SIGINT, and its children inherit that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first sample: the daemon is running and hearing
            if line.startswith('{"wall_s"'):
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    left = subprocess.run(["pgrep", "-f", f"mosquitto -c {tmp_path}"], capture_output=True, text=True).stdout
    assert not left, "mosquitto outlived the bench"

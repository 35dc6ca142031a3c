"""Generated negatives for the false-accept figure: no wake word in the text, real speech out, counted."""

from __future__ import annotations

import pytest

from tests.tts.joe import joe_voice_path
from voiced.bench.wake import FOUR_HEADS
from voiced.bench.wake_negatives import WAKE_WORDS, generated_negatives, negative_texts, score_negatives


@pytest.mark.shared
def test_the_text_pool_is_real_text_without_wake_words(speech) -> None:
    texts = negative_texts(speech, commands=50)
    assert len(texts) >= 150  # 116 audiobook sentences, misc_en, 50 commands
    assert not [t for t in texts if WAKE_WORDS.search(t)]
    verbs = ("turn", "set", "what", "start", "pause", "resume", "mute", "open", "close", "how")
    assert sum(t.lower().startswith(verbs) for t in texts) >= 25  # commands are part of it
    assert WAKE_WORDS.search("Hey Jarvis, lights on") and WAKE_WORDS.search("ALEXA stop")


@pytest.mark.shared
def test_a_minute_of_generated_speech_is_scored_by_every_head_and_cached(tmp_path, speech, models) -> None:
    audio, info = generated_negatives(joe_voice_path(), speech, hours=0.01, cache=tmp_path)
    assert 36 <= len(audio) / 16000 <= 60 and info["sentences_spoken"] >= 5
    again, cached = generated_negatives(joe_voice_path(), speech, hours=0.01, cache=tmp_path)
    assert "cached" in cached and len(again) == len(audio)
    figures = score_negatives(models / "openwakeword", FOUR_HEADS, audio)
    assert set(figures["heads"]) == {"alexa", "hey_jarvis", "hey_mycroft", "hey_rhasspy"} or len(figures["heads"]) == 4
    for head in figures["heads"].values():
        assert head["false_accepts"] == 0  # speech, but no wake word
        assert head["score_max"] < 0.5 and set(head["per_hour_by_threshold"]) == {"0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"}


@pytest.mark.shared
def test_the_wake_bench_without_negatives_reports_detections_and_skips_the_cpu(models, speech, tmp_path) -> None:
    """--negative is optional, but without it the CPU figure divided by zero hours of audio."""
    from voiced.bench.wake import bench_wake
    from voiced.errors import ConfigError

    clip = speech / "openwakeword_clips" / "alexa_test.wav"
    report = bench_wake(models / "openwakeword", [clip], [], cpu_runs=1)
    assert "alexa_v0.1" in report["detections"]["alexa_test.wav"]["fired"]
    assert report["cpu"] == {"skipped": "no --negative audio to time"}
    with pytest.raises(ConfigError, match=r"^--models: .* is not a folder"):
        bench_wake(tmp_path / "none", [clip], [])

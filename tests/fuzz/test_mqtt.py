"""Generated payloads on every topic the daemon subscribes to, through a real mosquitto (a seeded
slice of ``voiced bench fuzz``, which sends 10,000): the daemon counts the malformed ones, keeps
every stage healthy and still answers a valid query correctly."""

from __future__ import annotations

import pytest

from tests.mqtt.conftest import MOSQUITTO
from tests.tts.joe import joe_voice_path
from voiced.bench.fuzz import fuzz_mqtt


@pytest.mark.shared
def test_generated_payloads_on_every_topic_are_counted_and_survived(models) -> None:
    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    figures = fuzz_mqtt(400, run_seed=99, models=models, voice=joe_voice_path())
    assert figures["payloads"] == 400 and figures["topics"] >= 11
    # every filter the daemon subscribed to (as the broker logged it) got payloads
    assert figures["subscriptions_not_fuzzed"] == [] and len(figures["subscriptions"]) >= 11, figures
    assert figures["listed_but_not_subscribed"] == [], figures
    assert figures["process_alive"] and figures["final_query_answered"], figures
    assert figures["handler_errors"] == 0 and figures["stage_failures"] == 0, figures
    assert figures["stages_stalled"] == [], figures
    assert figures["malformed_counted"] > 50, figures  # most generated payloads are not valid messages
    assert figures["daemon_rss_mb_after"] - figures["daemon_rss_mb_before"] < 50, figures

"""A small, seeded slice of ``voiced bench chaos``: every fault kind, nothing lost.

Real parts: ``voiced run`` processes, a real mosquitto (killed, restarted, frozen), a real tmpfs
filled to the last block under the outbox (root only: CI runs as root), real human speech, a
generated transducer in the sherpa layout. The benchmark runs the full counts (20 faults a phase).
"""

from __future__ import annotations

import os

import pytest

from tests.modelgen.transducer import make_transducer
from tests.mqtt.conftest import MOSQUITTO
from voiced.bench.chaos import PHASES, bench_chaos


@pytest.mark.shared
def test_broker_kills_stalls_a_full_disk_and_daemon_kills_lose_nothing(tmp_path, speech) -> None:
    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    model = make_transducer(tmp_path / "z2", "zipformer2", seed=7, int8=True)
    figures = bench_chaos(model, speech, seconds=16, faults=2, seed=1)
    for phase in PHASES:
        result = figures[phase]
        if phase in ("disk_full", "disk_full_kills") and os.geteuid() != 0:
            assert "skipped" in result
            continue
        assert result["faults"] >= 1, (phase, result)
        assert result["produced"] >= 2, (phase, result)  # real transcripts went through the fault
        assert result["outbox_left"] == 0, (phase, result)  # the daemon delivered all it had
        assert result["lost"] == 0 and result["delivered"] >= result["produced"], (phase, result)
    if os.geteuid() == 0:
        assert figures["disk_full"]["outbox_write_errors"] >= 1  # the disk really was full
        # the killed daemon held transcripts (none on the full disk), and the restarted one delivered them
        assert sum(e["held"] for e in figures["disk_full_kills"]["events"]) >= 1
    assert figures["lost_total"] == 0

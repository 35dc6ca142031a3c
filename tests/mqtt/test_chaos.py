"""A small, seeded slice of ``voiced bench chaos``: every fault kind, nothing lost.

Real parts: ``voiced run`` processes, a real mosquitto (killed, restarted, frozen), a real tmpfs
filled to the last block under the outbox (root only: CI runs as root), real human speech, a
generated transducer in the sherpa layout. The benchmark runs the full counts (20 faults a phase).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.modelgen.transducer import make_transducer
from tests.mqtt.conftest import MOSQUITTO
from voiced.bench.chaos import PHASES, bench_chaos
from voiced.errors import ConfigError


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


def _children() -> list[str]:
    """Command lines of this process's live children."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.shared
def test_a_daemon_that_cannot_start_ends_the_benchmark_with_its_error_and_leaves_nothing(tmp_path, speech) -> None:
    """It waited for the daemon's stats for ever (a missing model); and what a failed or interrupted
    run started (the daemon, mosquitto) outlived it. A typo in --phases ran nothing and reported
    nothing lost."""
    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    model = make_transducer(tmp_path / "z2", "zipformer2", seed=7, int8=True)
    with pytest.raises(RuntimeError, match=r"(?s)voiced run exited 1:.*vad\.model .*model file not found"):
        bench_chaos(model, speech, vad_model=tmp_path / "no-vad.onnx", seconds=8, faults=1, phases=("broker_stalls",))
    assert not [c for c in _children() if "mosquitto" in c or "voiced" in c], _children()
    with pytest.raises(ConfigError, match=r"--phases: unknown nope"):
        bench_chaos(model, speech, phases=("nope",))
    with pytest.raises(ConfigError, match=r"--seconds: at least 8"):
        bench_chaos(model, speech, seconds=0.5)
    with pytest.raises(ConfigError, match=r"--speech: .* has no hifitts"):
        bench_chaos(model, tmp_path, seconds=8)

"""voiced run as systemd runs it: a real AF_UNIX notify socket, watchdog, SIGHUP, SIGTERM, affinity."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.conftest import NotifySocket
from tests.support import wait_until
from voiced.runtime.affinity import thread_cpus

REPO = Path(__file__).resolve().parents[2]
ONE = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["turn on [the] {name}"]
"""
TWO = ONE + """  HassTurnOff:
    data:
      - sentences: ["turn off [the] {name}"]
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def service(tmp_path):
    """Start voiced run under a fake systemd; yields (process, notify socket, config dir)."""
    sock = NotifySocket(str(tmp_path / "notify.sock"))
    (tmp_path / "intents.yaml").write_text(ONE)
    cores = sorted(os.sched_getaffinity(0))
    first, last = cores[0], cores[-1]
    (tmp_path / "board.toml").write_text(f"""
name = "test-board"
description = "two pinned stages"
window_frames = 10
capture_rate = 16000
realtime_priority = 0
[cores]
capture = [{first}]
listen = [{last}]
intent = [{first}]
speak = [{last}]
mqtt = [{first}]
[threads]
asr = 1
vad = 1
tts = 1
[alsa]
capture = "default"
playback = "default"
""")
    (tmp_path / "voiced.toml").write_text(f"""
[site]
id = "svc"
[audio]
source = "none"
[vad]
kind = "energy"
[intents]
templates = ["intents.yaml"]
[mqtt]
host = "127.0.0.1"
port = {closed_port()}      # no broker: READY must not wait for one
[daemon]
state_dir = "state"
[hardware]
profile = "{tmp_path / 'board.toml'}"
""")
    env = dict(os.environ, NOTIFY_SOCKET=sock.path, WATCHDOG_USEC="600000", WATCHDOG_PID="",
               PYTHONPATH=str(REPO))
    log = open(tmp_path / "stderr.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "voiced.cli", "-v", "run", "--config", str(tmp_path / "voiced.toml")],
                            env=env, stdout=subprocess.DEVNULL, stderr=log)
    yield proc, sock, tmp_path
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.close()
    sock.close()


def test_ready_watchdog_reload_and_clean_stop(service) -> None:
    proc, sock, tmp = service
    messages: list[str] = []

    def seen(pred) -> str:
        return sock.wait_for(lambda m: (messages.append(m), pred(m))[1], timeout=60)

    # a HUP while the models load (logrotate, an impatient admin) killed it: systemd took that death
    # for a clean exit, so Restart=on-failure never brought it back
    seen(lambda m: "STATUS=loading models" in m)
    proc.send_signal(signal.SIGHUP)
    seen(lambda m: "READY=1" in m)
    assert proc.poll() is None
    for _ in range(3):  # it keeps pinging while every stage beats
        seen(lambda m: "WATCHDOG=1" in m)

    (tmp / "intents.yaml").write_text(TWO)
    proc.send_signal(signal.SIGHUP)
    seen(lambda m: "RELOADING=1" in m and "MONOTONIC_USEC=" in m)
    seen(lambda m: "READY=1" in m)
    wait_until(lambda: "reloaded 2 intents" in (tmp / "stderr.log").read_text(), what="the new template")
    seen(lambda m: "WATCHDOG=1" in m)

    proc.send_signal(signal.SIGTERM)
    seen(lambda m: "STOPPING=1" in m)
    assert proc.wait(timeout=30) == 0, (tmp / "stderr.log").read_text()


def test_stage_threads_are_pinned_as_the_profile_says(service) -> None:
    proc, sock, tmp = service
    sock.wait_for(lambda m: "READY=1" in m, timeout=60)
    cores = sorted(os.sched_getaffinity(0))
    want = {"capture": {cores[0]}, "listen": {cores[-1]}, "intent": {cores[0]}}
    found: dict[str, frozenset[int]] = {}
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        if name in want:
            found[name] = thread_cpus(int(task.name), proc.pid)
    assert found == want

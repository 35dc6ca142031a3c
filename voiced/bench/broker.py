"""A mosquitto on a free loopback port for the benchmarks (mqtt, chaos, soak, fuzz)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from voiced.bench.common import free_port

__all__ = ["Mosquitto"]


class Mosquitto:
    """``start``/``stop(sig)``/``signal`` one mosquitto; with ``persistent`` it keeps its state in
    ``workdir`` (sessions and queued messages survive a restart; saved after every change)."""

    def __init__(self, workdir: Path, persistent: bool = False, start: bool = True) -> None:
        self.exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.port = free_port()
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "set_tcp_nodelay true",
                 # as root mosquitto would switch to its own user, who cannot write in our directory
                 f"user {pwd.getpwuid(os.geteuid()).pw_name}"]
        if persistent:
            lines += ["persistence true", f"persistence_location {workdir}/", "autosave_interval 1",
                      "autosave_on_changes true"]
        self.conf = workdir / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([self.exe, "-c", str(self.conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("mosquitto did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
            self.proc = None

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)

    def close(self) -> None:
        self.stop()

"""A real AF_UNIX datagram socket standing in for systemd's NOTIFY_SOCKET."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import TIMEOUT

"""Generous: how long to wait for something that must happen."""


class NotifySocket:
    """Receives what the daemon sends to systemd; every datagram is kept, in order."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages: list[str] = []

    def receive(self, timeout: float = TIMEOUT) -> str | None:
        """The next datagram, or None after ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return None
        self.messages.append(data.decode("utf-8"))
        return self.messages[-1]

    def drain(self) -> list[str]:
        """Everything already queued, without waiting."""
        got = []
        while (message := self.receive(timeout=0.001)) is not None:
            got.append(message)
        return got

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = TIMEOUT) -> str:
        """Receive until a datagram satisfies ``predicate``; fail the test after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.receive(timeout=left)
            if message is not None and predicate(message):
                return message
        pytest.fail(f"no matching notification within {timeout} s; got {self.messages[-10:]}")

    def close(self) -> None:
        self.sock.close()


def assignments(message: str) -> dict[str, str]:
    """``READY=1\\nSTATUS=x`` → ``{"READY": "1", "STATUS": "x"}``."""
    return dict(line.split("=", 1) for line in message.split("\n") if line)


@pytest.fixture
def notify_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[NotifySocket]:
    # A short directory: AF_UNIX paths are limited to 108 bytes, pytest's tmp_path can exceed it.
    directory = tempfile.mkdtemp(prefix="voiced-notify-")
    sock = NotifySocket(str(Path(directory) / "notify"))
    monkeypatch.setenv("NOTIFY_SOCKET", sock.path)
    yield sock
    sock.close()
    shutil.rmtree(directory, ignore_errors=True)



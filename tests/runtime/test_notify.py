"""SystemdNotifier and WatchdogConfig against a real AF_UNIX datagram NOTIFY_SOCKET."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

import pytest

from tests.runtime.conftest import NotifySocket, assignments
from voiced.errors import ConfigError
from voiced.runtime.notify import SystemdNotifier, WatchdogConfig


def test_without_notify_socket_everything_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = SystemdNotifier()
    assert not notifier.enabled
    assert notifier.ready("up") is False
    assert notifier.status("x") is False
    assert notifier.watchdog() is False
    assert notifier.reloading() is False
    assert notifier.stopping() is False
    notifier.close()


def test_ready_carries_status_in_one_datagram(notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier()
    assert notifier.enabled
    assert notifier.ready("models loaded")
    assert assignments(notify_socket.receive()) == {"READY": "1", "STATUS": "models loaded"}


def test_status_is_one_line(notify_socket: NotifySocket) -> None:
    SystemdNotifier().status("listening\nREADY=1")  # a newline must not smuggle in an assignment
    assert assignments(notify_socket.receive()) == {"STATUS": "listening READY=1"}


def test_stopping_watchdog_and_extend_timeout(notify_socket: NotifySocket) -> None:
    notifier = SystemdNotifier()
    notifier.stopping()
    notifier.watchdog()
    notifier.extend_timeout(1.5)
    assert [notify_socket.receive() for _ in range(3)] == ["STOPPING=1", "WATCHDOG=1", "EXTEND_TIMEOUT_USEC=1500000"]


def test_reloading_carries_monotonic_usec(notify_socket: NotifySocket) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    SystemdNotifier().reloading("reloading config")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    sent = assignments(notify_socket.receive())
    assert sent["RELOADING"] == "1"
    assert sent["STATUS"] == "reloading config"
    assert before <= int(sent["MONOTONIC_USEC"]) <= after  # CLOCK_MONOTONIC, as systemd compares it


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"voiced-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0" + name)
    server.settimeout(10)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        SystemdNotifier().ready()
        assert server.recv(1024) == b"READY=1"
    finally:
        server.close()


def test_unusable_socket_is_a_warning_not_a_crash(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.notify"):
        notifier = SystemdNotifier()
    assert not notifier.enabled
    assert notifier.ready() is False
    assert "unusable" in caplog.text


def test_send_failure_is_logged(notify_socket: NotifySocket, caplog: pytest.LogCaptureFixture) -> None:
    notifier = SystemdNotifier()
    notify_socket.close()  # systemd went away
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.notify"):
        assert notifier.status("x") is False
    assert "cannot notify systemd" in caplog.text


# -- watchdog timing ---------------------------------------------------------------------------


def test_watchdog_from_env_disabled_without_usec() -> None:
    config = WatchdogConfig.from_env({})
    assert not config.enabled
    assert config.interval_s is None


def test_watchdog_interval_is_half_the_timeout() -> None:
    config = WatchdogConfig.from_env({"WATCHDOG_USEC": "30000000"})
    assert config.timeout_s == 30.0
    assert config.interval_s == 15.0


def test_watchdog_pid_must_be_ours() -> None:
    assert WatchdogConfig.from_env({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}).enabled
    assert not WatchdogConfig.from_env({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}, pid=4242).enabled


def test_watchdog_from_real_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert WatchdogConfig.from_env().interval_s == 2.0


@pytest.mark.parametrize("raw", ["abc", "0", "-5"])
def test_watchdog_bad_usec_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match="WATCHDOG_USEC"):
        WatchdogConfig.from_env({"WATCHDOG_USEC": raw})

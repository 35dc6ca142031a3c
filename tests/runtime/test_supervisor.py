"""Supervisor: stage threads, restarts, fatal failure, and the watchdog fed only while all beat.

systemd is a real AF_UNIX datagram socket; assertions are about what was sent and in which
order (e.g. no WATCHDOG=1 after a stall was reported), never about how long things took.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.runtime.conftest import NotifySocket, assignments
from tests.support import TIMEOUT, wait_until
from voiced.errors import ConfigError
from voiced.runtime.backoff import BackoffPolicy
from voiced.runtime.notify import SystemdNotifier, WatchdogConfig
from voiced.runtime.supervisor import (
    StageContext,
    StageState,
    Supervisor,
    SupervisorConfig,
)

WATCHDOG = WatchdogConfig(timeout_s=0.1)
"""WATCHDOG_USEC=100000: pings every 50 ms, so a test sees many checks quickly."""
FAST = SupervisorConfig(backoff=BackoffPolicy(initial=0.01, maximum=0.02), max_failures=5)


def healthy(ctx: StageContext) -> None:
    while not ctx.stop.is_set():
        ctx.beat()
        ctx.wait(0.01)


@pytest.fixture
def supervisors() -> Iterator[list[Supervisor]]:
    made: list[Supervisor] = []
    yield made
    for sup in made:
        sup.stop(timeout=5)


def make(supervisors: list[Supervisor], config: SupervisorConfig = FAST, **kwargs) -> Supervisor:
    sup = Supervisor(config=config, notifier=SystemdNotifier(), watchdog=kwargs.pop("watchdog", WATCHDOG), **kwargs)
    supervisors.append(sup)
    return sup


def pings_after(messages: list[str], index: int) -> int:
    return sum(m == "WATCHDOG=1" for m in messages[index + 1:])


def test_ready_status_and_periodic_watchdog(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    sup = make(supervisors)
    sup.add_stage("capture", healthy, heartbeat_timeout_s=5)
    sup.add_stage("listen", healthy, heartbeat_timeout_s=5)
    sup.start()
    sup.notifier.ready("listening")
    for _ in range(3):
        notify_socket.wait_for(lambda m: m == "WATCHDOG=1")
    got = [assignments(m) for m in notify_socket.messages]
    assert {"READY": "1", "STATUS": "listening"} in got
    assert any(a.get("STATUS", "").startswith("running: capture, listen") for a in got)
    wait_until(lambda: sup.watchdog_pings >= 3, what="the ping counter")  # counted after the send
    assert [s.state for s in sup.stages()] == [StageState.RUNNING, StageState.RUNNING]


def test_no_watchdog_pings_without_watchdog_usec(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    sup = make(supervisors, config=SupervisorConfig(check_interval_s=0.02), watchdog=WatchdogConfig())
    sup.add_stage("listen", healthy)
    sup.start()
    wait_until(lambda: sup.checks >= 5, what="5 heartbeat checks")
    assert "WATCHDOG=1" not in notify_socket.drain()
    assert sup.watchdog_pings == 0


def test_stalled_stage_stops_the_pings(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    stall, release = threading.Event(), threading.Event()

    def stalls(ctx: StageContext) -> None:
        while not ctx.stop.is_set():
            if stall.is_set():
                release.wait()  # stuck, like a hung ALSA read: no beats
                stall.clear()
            ctx.beat()
            ctx.wait(0.01)

    sup = make(supervisors)
    sup.add_stage("capture", healthy, heartbeat_timeout_s=5)
    # 1 s: far longer than the 10 ms between beats, so a busy CI machine does not fake a stall.
    sup.add_stage("listen", stalls, heartbeat_timeout_s=1.0)
    sup.start()
    notify_socket.wait_for(lambda m: m == "WATCHDOG=1")
    stall.set()

    # The monitor notices, reports it on STATUS=, and from then on sends no WATCHDOG=1.
    notify_socket.wait_for(lambda m: m == "STATUS=stalled: listen")
    stalled_at = len(notify_socket.messages) - 1
    pings_at_stall = sup.watchdog_pings
    checks_at_stall = sup.checks
    wait_until(lambda: sup.checks >= checks_at_stall + 5, what="5 more checks")
    notify_socket.drain()
    assert pings_after(notify_socket.messages, stalled_at) == 0
    assert sup.watchdog_pings == pings_at_stall
    assert sup.stage("listen").stalled and not sup.stage("capture").stalled

    # Beating again: pings resume, after a status saying so.
    release.set()
    notify_socket.wait_for(lambda m: m.startswith("STATUS=running"))
    notify_socket.wait_for(lambda m: m == "WATCHDOG=1")
    assert not sup.stage("listen").stalled


def test_exception_restarts_the_stage_and_counts(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    runs: list[int] = []

    def flaky(ctx: StageContext) -> None:
        runs.append(ctx.restarts)
        if len(runs) <= 2:
            raise RuntimeError(f"device lost #{len(runs)}")
        healthy(ctx)

    sup = make(supervisors)
    sup.add_stage("capture", flaky)
    sup.start()
    wait_until(lambda: sup.stage("capture").restarts == 2 and sup.stage("capture").state is StageState.RUNNING,
               what="two restarts")
    info = sup.stage("capture")
    assert info.failures == 2
    assert info.last_error == "RuntimeError: device lost #2"
    assert runs == [0, 1, 2]
    assert sup.fatal is None and sup.exit_code == 0
    notify_socket.wait_for(lambda m: m == "STATUS=running: capture; 2 restarts")


def test_returning_without_stop_is_a_failure(supervisors: list[Supervisor], notify_socket: NotifySocket) -> None:
    calls: list[int] = []

    def returns_once(ctx: StageContext) -> None:
        calls.append(1)
        if len(calls) > 1:
            healthy(ctx)

    sup = make(supervisors)
    sup.add_stage("intent", returns_once)
    sup.start()
    wait_until(lambda: sup.stage("intent").restarts == 1, what="a restart")
    assert sup.stage("intent").last_error == "returned without being stopped"


def test_repeated_failure_is_fatal(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    def broken(ctx: StageContext) -> None:
        raise OSError("no such device")

    config = SupervisorConfig(backoff=BackoffPolicy(initial=0.01, maximum=0.02), max_failures=3)
    sup = make(supervisors, config=config)
    sup.add_stage("capture", healthy)
    sup.add_stage("listen", broken)
    sup.start()
    assert sup.wait(TIMEOUT), "supervisor did not give up"
    assert sup.exit_code == 1
    assert "4 stage failures" in sup.fatal and "listen: OSError: no such device" in sup.fatal
    wait_until(lambda: sup.stage("listen").state is StageState.FAILED, what="listen FAILED")
    assert sup.stage("listen").failures == 4 and sup.stage("listen").restarts == 3
    notify_socket.wait_for(lambda m: m.startswith("STATUS=fatal: 4 stage failures"))

    # Fatal: the watchdog is no longer fed, even though "capture" still beats.
    checks = sup.checks
    wait_until(lambda: sup.checks >= checks + 1, what="a check after fatal")
    pings, checks = sup.watchdog_pings, sup.checks
    wait_until(lambda: sup.checks >= checks + 5, what="5 more checks")
    assert sup.watchdog_pings == pings

    assert sup.stop(timeout=10)
    stopping = assignments(notify_socket.wait_for(lambda m: m.startswith("STOPPING=1")))
    assert stopping["STATUS"].startswith("fatal:")


def test_failures_outside_the_window_are_forgiven(supervisors: list[Supervisor], notify_socket: NotifySocket) -> None:
    # Each restart waits >= 0.3 s (the backoff's initial delay), longer than the 0.2 s window:
    # never more than one failure in the window, so max_failures=1 is never exceeded.
    failures = []

    def fails_four_times(ctx: StageContext) -> None:
        failures.append(1)
        if len(failures) <= 4:
            raise RuntimeError("glitch")
        healthy(ctx)

    config = SupervisorConfig(backoff=BackoffPolicy(initial=0.3, maximum=0.3, jitter=0.0),
                              max_failures=1, failure_window_s=0.2)
    sup = make(supervisors, config=config)
    sup.add_stage("speak", fails_four_times)
    sup.start()
    wait_until(lambda: sup.stage("speak").restarts == 4 and sup.stage("speak").state is StageState.RUNNING,
               what="four restarts")
    assert sup.fatal is None


def test_stop_joins_stages_in_order(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    order: list[str] = []

    def stage(ctx: StageContext) -> None:
        healthy(ctx)
        order.append(ctx.name)

    sup = make(supervisors)
    names = ["capture", "listen", "intent", "speak"]
    for name in names:
        sup.add_stage(name, stage)
    sup.start()
    assert not sup.wait(0)
    assert sup.stop(timeout=10)
    assert order == names
    assert all(s.state is StageState.STOPPED for s in sup.stages())
    assert sup.wait(0) and sup.exit_code == 0
    notify_socket.wait_for(lambda m: m == "STOPPING=1")


def test_stop_reports_a_stage_that_does_not_end(supervisors: list[Supervisor], notify_socket: NotifySocket) -> None:
    release = threading.Event()

    def deaf(ctx: StageContext) -> None:
        release.wait()

    sup = make(supervisors)
    sup.add_stage("listen", deaf, heartbeat_timeout_s=60)
    sup.start()
    try:
        assert sup.stop(timeout=0.1) is False
    finally:
        release.set()


def test_request_stop_wakes_wait(supervisors: list[Supervisor], notify_socket: NotifySocket) -> None:
    sup = make(supervisors)
    sup.add_stage("listen", healthy)
    sup.start()
    threading.Timer(0.05, sup.request_stop).start()
    assert sup.wait(TIMEOUT)
    assert sup.fatal is None


def test_status_provider(notify_socket: NotifySocket, supervisors: list[Supervisor]) -> None:
    sup = make(supervisors, status=lambda: "3 utterances, 0 dropped windows")
    sup.add_stage("listen", healthy)
    sup.start()
    notify_socket.wait_for(lambda m: m == "STATUS=3 utterances, 0 dropped windows")


def test_add_stage_rules(supervisors: list[Supervisor], notify_socket: NotifySocket) -> None:
    sup = make(supervisors)
    sup.add_stage("listen", healthy)
    with pytest.raises(ValueError, match="twice"):
        sup.add_stage("listen", healthy)
    with pytest.raises(ConfigError, match="heartbeat_timeout_s"):
        sup.add_stage("speak", healthy, heartbeat_timeout_s=0)
    with pytest.raises(ConfigError, match="realtime_priority"):
        sup.add_stage("capture", healthy, realtime_priority=100)
    sup.start()
    with pytest.raises(RuntimeError):
        sup.add_stage("late", healthy)


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="failure_window_s"):
        SupervisorConfig(failure_window_s=0)
    with pytest.raises(ConfigError, match="max_failures"):
        SupervisorConfig(max_failures=-1)

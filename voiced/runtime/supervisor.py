"""The supervisor: named stage threads with heartbeats, restarts, and the systemd watchdog.

Each stage is a loop that calls ``ctx.beat()`` regularly and returns once ``ctx.stop`` is
set. A stage that raises (or returns while not asked to stop) is restarted in the same
thread after a :class:`~voiced.runtime.backoff.Backoff` delay; more than
``max_failures`` failures (all stages together) within ``failure_window_s`` is fatal:
:meth:`Supervisor.wait` returns and :attr:`Supervisor.exit_code` is non-zero, so systemd's
``Restart=on-failure`` starts a fresh process.

The monitor thread feeds the systemd watchdog (``WATCHDOG=1`` every half ``WATCHDOG_USEC``)
only while every running stage's heartbeat is fresh: a stalled stage stops the pings and
systemd restarts the service. It also refreshes ``STATUS=``.

    sup = Supervisor(notifier=SystemdNotifier(), status=lambda: pipeline.status_line())
    sup.add_stage("capture", capture_loop, cpus=profile.cpus("capture"), realtime_priority=5)
    sup.add_stage("listen", listen_loop, cpus=profile.cpus("listen"), heartbeat_timeout_s=10)
    sup.start(); notifier.ready()
    sup.wait()            # until fatal or request_stop() (e.g. from SIGTERM)
    sup.stop(timeout=10)
    return sup.exit_code
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NoReturn

from voiced.errors import ConfigError
from voiced.runtime.affinity import name_current_thread, pin_current_thread, set_realtime
from voiced.runtime.backoff import Backoff, BackoffPolicy
from voiced.runtime.notify import SystemdNotifier, WatchdogConfig

__all__ = ["STOP_TIMEOUT_S", "Heartbeat", "StageContext", "StageInfo", "StageState", "Supervisor", "SupervisorConfig",
           "leave_now"]

log = logging.getLogger(__name__)

StageTarget = Callable[["StageContext"], None]

STOP_TIMEOUT_S = 15.0
"""How long a stopping daemon may take, all parts together: a stage inside a model run (a Whisper
decode, a long Piper sentence on a Pi Zero) gets to finish it, within the unit's TimeoutStopSec=20s."""


@dataclass(frozen=True)
class SupervisorConfig:
    """Restart and health-check policy."""

    max_failures: int = 5
    """Stage failures (all stages together) tolerated within ``failure_window_s``; one more is fatal."""
    failure_window_s: float = 300.0
    """The sliding window failures are counted in, in seconds."""
    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(initial=1.0, maximum=30.0))
    """Delays before restarting a failed stage."""
    stable_after_s: float = 60.0
    """A stage that ran this long before failing restarts after the shortest delay again."""
    check_interval_s: float = 1.0
    """Seconds between heartbeat checks without a watchdog; with one, half ``WATCHDOG_USEC`` is used."""

    def __post_init__(self) -> None:
        if self.max_failures < 0:
            raise ConfigError("max_failures", f"must be >= 0, got {self.max_failures}")
        for key in ("failure_window_s", "stable_after_s", "check_interval_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(key, f"must be > 0, got {getattr(self, key)}")


class StageState(StrEnum):
    """Where a stage is in its life."""

    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    """Failed; waiting to restart (not checked for stalls: the failure count guards this)."""
    STOPPED = "stopped"
    FAILED = "failed"
    """Gave up: the supervisor went fatal."""


class Heartbeat:
    """The last time a stage showed progress (``time.monotonic``)."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()  # one float store: atomic under the GIL, no lock needed

    def age(self) -> float:
        """Seconds since the last beat."""
        return time.monotonic() - self._last


class StageContext:
    """What a stage loop gets: its stop event, heartbeat, and where it runs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stop = threading.Event()
        """Set when the stage must return (shutdown)."""
        self.heartbeat = Heartbeat()
        self.cpus: frozenset[int] = frozenset()
        """The cores this thread runs on, read back from the kernel after pinning."""
        self.tid: int | None = None
        """The thread's kernel id (``/proc/self/task/<tid>``)."""
        self.realtime = False
        """True when SCHED_FIFO was granted."""
        self.restarts = 0
        """How often this stage was restarted after a failure."""

    def beat(self) -> None:
        """Show progress; call at least every ``heartbeat_timeout_s`` (e.g. once per window)."""
        self.heartbeat.beat()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the stage must stop. Keep sleeps below the heartbeat timeout."""
        return self.stop.wait(seconds)


@dataclass(frozen=True)
class StageInfo:
    """A snapshot of one stage, for status lines, stats and tests."""

    name: str
    state: StageState
    restarts: int
    failures: int
    last_error: str | None
    heartbeat_age_s: float
    stalled: bool
    cpus: frozenset[int]
    tid: int | None
    realtime: bool


class _Stage:
    def __init__(self, name: str, target: StageTarget, cpus: frozenset[int] | None,
                 heartbeat_timeout_s: float, realtime_priority: int) -> None:
        self.name = name
        self.target = target
        self.cpus = cpus
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.realtime_priority = realtime_priority
        self.ctx = StageContext(name)
        self.state = StageState.STARTING
        self.failures = 0
        self.last_error: str | None = None
        self.stalled = False
        self.thread: threading.Thread | None = None
        self.pinned = threading.Event()


class Supervisor:
    """Owns the stage threads; thread-safe."""

    def __init__(self, config: SupervisorConfig | None = None, notifier: SystemdNotifier | None = None,
                 watchdog: WatchdogConfig | None = None, status: Callable[[], str] | None = None) -> None:
        """``watchdog`` defaults to :meth:`WatchdogConfig.from_env`; ``status`` gives the STATUS= line."""
        self.config = config or SupervisorConfig()
        self.notifier = notifier or SystemdNotifier()
        self.watchdog = watchdog if watchdog is not None else WatchdogConfig.from_env()
        self._status_provider = status
        self._stages: dict[str, _Stage] = {}
        self._lock = threading.Lock()
        self._failure_times: deque[float] = deque()
        self._fatal: str | None = None
        self._done = threading.Event()
        self._monitor_stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._started = False
        self._stopped: bool | None = None  # stop()'s result, once called
        self._checks = 0
        self._pings = 0
        self._last_status: str | None = None

    # -- set-up ------------------------------------------------------------------------------

    def add_stage(self, name: str, target: StageTarget, cpus: set[int] | frozenset[int] | None = None,
                  heartbeat_timeout_s: float = 10.0, *, realtime_priority: int = 0) -> StageContext:
        """Register a stage (before :meth:`start`); stages stop in the order they were added."""
        if self._started:
            raise RuntimeError("add_stage() after start()")
        if name in self._stages:
            raise ValueError(f"stage {name!r} added twice")
        if heartbeat_timeout_s <= 0:
            raise ConfigError(f"{name}.heartbeat_timeout_s", f"must be > 0, got {heartbeat_timeout_s}")
        if not 0 <= realtime_priority <= 99:
            raise ConfigError(f"{name}.realtime_priority", f"must be within 0..99, got {realtime_priority}")
        stage = _Stage(name, target, frozenset(cpus) if cpus else None, heartbeat_timeout_s, realtime_priority)
        self._stages[name] = stage
        return stage.ctx

    def start(self, timeout: float = 10.0) -> None:
        """Start every stage and the monitor; returns once each stage thread is pinned."""
        if self._started:
            raise RuntimeError("start() called twice")
        self._started = True
        for stage in self._stages.values():
            stage.thread = threading.Thread(target=self._run_stage, args=(stage,), name=stage.name, daemon=True)
            stage.thread.start()
        for stage in self._stages.values():
            stage.pinned.wait(timeout)
        self._monitor = threading.Thread(target=self._monitor_loop, name="supervisor", daemon=True)
        self._monitor.start()

    # -- the main thread's view --------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Block until fatal or :meth:`request_stop`; False on timeout."""
        return self._done.wait(timeout)

    def request_stop(self) -> None:
        """Make :meth:`wait` return; safe from a signal handler (SIGTERM). Then call :meth:`stop`."""
        self._done.set()

    @property
    def fatal(self) -> str | None:
        """Why the supervisor gave up, or None."""
        return self._fatal

    @property
    def exit_code(self) -> int:
        """0, or 1 after a fatal failure (systemd then restarts the service)."""
        return 1 if self._fatal is not None else 0

    @property
    def checks(self) -> int:
        """Heartbeat checks done by the monitor so far."""
        return self._checks

    @property
    def watchdog_pings(self) -> int:
        """WATCHDOG=1 messages sent so far."""
        return self._pings

    def stages(self) -> list[StageInfo]:
        """Snapshots of every stage, in order."""
        return [self._info(s) for s in self._stages.values()]

    def stage(self, name: str) -> StageInfo:
        return self._info(self._stages[name])

    def status_line(self) -> str:
        """The default STATUS=: stage states, restarts, stalls."""
        if self._fatal:
            return f"fatal: {self._fatal}"
        infos = self.stages()
        stalled = [i.name for i in infos if i.stalled]
        if stalled:
            return "stalled: " + ", ".join(stalled)
        parts = [i.name if i.state is StageState.RUNNING else f"{i.name} {i.state}" for i in infos]
        restarts = sum(i.restarts for i in infos)
        return "running: " + ", ".join(parts) + (f"; {restarts} restarts" if restarts else "")

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop stages one by one in order, within ``timeout`` overall; False if one did not end.

        Calling it again only returns the first call's result.
        """
        if self._stopped is not None:
            return self._stopped
        self._done.set()
        self._monitor_stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout)
        self.notifier.stopping(self._fatal and f"fatal: {self._fatal}")
        deadline = time.monotonic() + timeout
        clean = True
        for stage in self._stages.values():
            stage.ctx.stop.set()
            if stage.thread is None:
                continue
            stage.thread.join(max(0.0, deadline - time.monotonic()))
            if stage.thread.is_alive():
                log.error("stage %s did not stop within %.1f s", stage.name, timeout)
                clean = False
        self._stopped = clean
        return clean

    # -- stage threads -----------------------------------------------------------------------

    def _run_stage(self, stage: _Stage) -> None:
        ctx = stage.ctx
        ctx.tid = threading.get_native_id()
        name_current_thread(stage.name)
        try:
            ctx.cpus = pin_current_thread(stage.cpus, label=f"stage {stage.name}")
            if stage.realtime_priority:
                ctx.realtime = set_realtime(stage.realtime_priority, label=f"stage {stage.name}")
        finally:
            stage.pinned.set()
        backoff = Backoff(self.config.backoff)
        while not ctx.stop.is_set():
            ctx.beat()  # before RUNNING, so the time spent backing off is not taken for a stall
            stage.state = StageState.RUNNING
            began = time.monotonic()
            try:
                stage.target(ctx)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.exception("stage %s failed", stage.name)
            else:
                if ctx.stop.is_set():
                    break
                error = "returned without being stopped"
                log.error("stage %s %s", stage.name, error)
            if time.monotonic() - began >= self.config.stable_after_s:
                backoff.reset()
            if not self._record_failure(stage, error):
                stage.state = StageState.FAILED
                return
            stage.state = StageState.BACKOFF
            if not backoff.wait(ctx.stop):
                break
            ctx.restarts += 1
            log.warning("restarting stage %s (restart %d)", stage.name, ctx.restarts)
        stage.state = StageState.STOPPED

    def _record_failure(self, stage: _Stage, error: str) -> bool:
        """Count a failure; False when it is one too many (the supervisor goes fatal)."""
        now = time.monotonic()
        with self._lock:
            stage.failures += 1
            stage.last_error = error
            self._failure_times.append(now)
            while self._failure_times and now - self._failure_times[0] > self.config.failure_window_s:
                self._failure_times.popleft()
            recent = len(self._failure_times)
            if recent <= self.config.max_failures:
                return True
            if self._fatal is None:
                self._fatal = (f"{recent} stage failures within {self.config.failure_window_s:g} s "
                               f"(last: {stage.name}: {error})")
        log.critical("giving up: %s", self._fatal)
        self.notifier.status(f"fatal: {self._fatal}")
        self._done.set()
        return False

    # -- monitor -----------------------------------------------------------------------------

    def _monitor_loop(self) -> None:
        interval = self.watchdog.interval_s or self.config.check_interval_s
        while True:
            self._check()
            if self._monitor_stop.wait(interval):
                return

    def _check(self) -> None:
        stalled: list[_Stage] = []
        for stage in self._stages.values():
            is_stalled = (stage.state is StageState.RUNNING and not stage.ctx.stop.is_set()
                          and stage.ctx.heartbeat.age() > stage.heartbeat_timeout_s)
            if is_stalled and not stage.stalled:
                log.error("stage %s stalled: no heartbeat for %.1f s (limit %.1f s); watchdog pings stop\n%s",
                          stage.name, stage.ctx.heartbeat.age(), stage.heartbeat_timeout_s, _stack_of(stage))
            elif stage.stalled and not is_stalled:
                log.warning("stage %s is beating again", stage.name)
            stage.stalled = is_stalled
            if is_stalled:
                stalled.append(stage)
        self._send_status()
        # Pinging only while all is well is the point: a stall lets systemd restart us.
        if not stalled and self._fatal is None and self.watchdog.enabled and self.notifier.watchdog():
            self._pings += 1
        self._checks += 1

    def _send_status(self) -> None:
        text = self.status_line()
        if self._status_provider is not None and self._fatal is None and not text.startswith("stalled"):
            try:
                text = self._status_provider()
            except Exception:
                log.exception("status provider failed")
        if text != self._last_status:
            self._last_status = text
            self.notifier.status(text)

    def _info(self, stage: _Stage) -> StageInfo:
        return StageInfo(name=stage.name, state=stage.state, restarts=stage.ctx.restarts,
                         failures=stage.failures, last_error=stage.last_error,
                         heartbeat_age_s=stage.ctx.heartbeat.age(), stalled=stage.stalled,
                         cpus=stage.ctx.cpus, tid=stage.ctx.tid, realtime=stage.ctx.realtime)


def _stack_of(stage: _Stage) -> str:
    """Where a stalled thread is stuck, for the log."""
    ident = stage.thread.ident if stage.thread is not None else None
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return "(no stack)"
    return "".join(traceback.format_stack(frame)).rstrip()


def leave_now(code: int) -> NoReturn:
    """End the process with ``code`` without Python's exit clean-up, once what matters is done.

    For a stop that left a stage thread running: one inside ONNX Runtime while the interpreter
    tears down aborts the process (C++ "terminate called without an active exception", SIGABRT, a
    core dump, a failed unit after a plain ``systemctl stop``)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or vanished stream: nothing left to save
            pass
    os._exit(code)

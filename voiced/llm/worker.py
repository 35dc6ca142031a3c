"""The LLM runs in a worker process; the daemon waits for it at most the time budget.

Why a process and not a thread: onnxruntime-genai's Python binding keeps the GIL during
model loading, prompt processing and each token step (measured: a 0.66 s prompt step let
another Python thread run once). In-process, every other stage would freeze while the
model thinks, and a waiter could not even notice that its budget had passed.

The worker is ``python -m voiced.llm FD``: a fresh interpreter (forking a process
that runs threads can deadlock the child; multiprocessing's spawn re-imports the caller's
``__main__``), talking over one socket pair with pickled messages. The parent sends
``("job", Job)``, ``("cancel", id)`` or ``("stop",)``; the worker sends ``("ready", info)``
or ``("failed", message)`` once, then for each job ``("token", id, token)``… and
``("end", id, GenerationEnd)``. The worker looks for a cancel between steps, so a
cancelled job ends within one step. The parent never waits for that: the next request
first reads the old job's end, within its own budget, and reports BUSY if it is late; a job
still running ``CANCEL_GRACE_S`` after its cancel means a hung worker, killed and started again.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from voiced.llm.config import Provider
from voiced.llm.runtime import Finish, GenerationEnd, Job, ProviderChoice

__all__ = ["CANCEL_GRACE_S", "Generation", "LlmWorker", "LoadInfo", "WorkerSettings", "WorkerState", "serve"]

log = logging.getLogger(__name__)

CANCEL_GRACE_S = 5.0
"""How long a cancelled job may take to end: the worker looks for the cancel between steps, and
even the prompt's step, the longest, ends well within this unless the worker hangs (then it is
killed and started again; waiting would answer every request after it BUSY for ever)."""


class WorkerState(Enum):
    STOPPED = "stopped"
    """No worker process (not started yet, closed, or it died after loading)."""
    LOADING = "loading"
    """The worker is starting and loading the model."""
    READY = "ready"
    """The model is loaded."""
    FAILED = "failed"
    """The model could not be loaded; not retried."""


@dataclass(frozen=True)
class WorkerSettings:
    """What the worker process loads."""

    model: Path
    provider: Provider = Provider.AUTO
    threads: int = 1
    prefix_cache: bool = True
    """Reuse the processed prompt start between jobs (``voiced.llm.prefix``)."""


@dataclass(frozen=True)
class LoadInfo:
    """What the worker reports once the model is loaded."""

    choice: ProviderChoice
    device: str
    context_length: int
    chat_template: bool
    guidance: bool
    load_s: float
    prefix_cache: bool = False
    """Whether jobs reuse the processed prompt start (asked for, and the model's search allows it)."""


@dataclass
class Generation:
    """One request as the parent saw it: the streamed tokens and how it ended."""

    finish: Finish
    tokens: list[int] = field(default_factory=list)
    end: GenerationEnd | None = None
    """The worker's report (None when the budget ran out first)."""
    elapsed_s: float = 0.0

    @property
    def text(self) -> str:
        return self.end.text if self.end is not None else ""


class LlmWorker:
    """Parent side of the worker process; ``generate`` is thread-safe and never blocks past its deadline."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()  # one request at a time, and one reader of the pipe
        self._state = WorkerState.STOPPED
        self._process: Any = None
        self._conn: Connection | None = None
        self._next_id = 0
        self._pending: int | None = None  # an aborted job whose end is still to be read
        self._overdue_at = 0.0  # when the aborted job counts as hung (time.monotonic())
        self.cancel_grace_s = CANCEL_GRACE_S
        """How long an aborted job may take to end before the worker is restarted."""
        self.info: LoadInfo | None = None
        """Set once the model is loaded."""
        self.error: str | None = None
        """Why the model failed to load, or how the worker died."""
        self.restarts = 0
        """Workers started after one died."""
        self.last_abandoned: tuple[int, Finish] | None = None
        """Id and finish of the last job whose caller had left (budget) when it ended."""

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def pending(self) -> int | None:
        """Id of a job whose caller left before it ended and whose end is not read yet."""
        return self._pending

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the worker (it loads the model) unless it runs or failed; returns at once."""
        with self._lock:
            self._start()

    def wait_ready(self, timeout: float) -> WorkerState:
        """Start if needed and wait up to ``timeout`` s for the model to be loaded."""
        deadline = time.monotonic() + timeout
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return self._state
        try:
            self._start()
            self._await_ready(deadline)
            return self._state
        finally:
            self._lock.release()

    def generate(self, job: Job, deadline: float) -> Generation:
        """Run ``job`` (its id is replaced); returns by ``deadline`` (``time.monotonic()``) whatever happens."""
        begun = time.monotonic()
        if not self._lock.acquire(timeout=max(deadline - begun, 0.0)):
            return Generation(Finish.BUSY, elapsed_s=time.monotonic() - begun)
        try:
            result = self._generate(job, deadline)
        finally:
            self._lock.release()
        result.elapsed_s = time.monotonic() - begun
        return result

    def close(self, timeout: float = 2.0) -> None:
        """Stop the worker: asked first, killed when it does not exit within ``timeout``."""
        with self._lock:
            self._stop(timeout)

    # -- under self._lock ---------------------------------------------------------------

    def _start(self) -> None:
        if self._state in (WorkerState.LOADING, WorkerState.READY, WorkerState.FAILED):
            return
        ours, theirs = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[2])  # the worker imports the same voiced
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "voiced.llm", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env, close_fds=True,
            )
        self._conn = Connection(ours.detach())
        self._pending = None
        self._state = WorkerState.LOADING
        try:
            self._conn.send(("settings", self.settings))
        except OSError as exc:
            self._died(f"cannot reach the LLM worker: {exc}")
            return
        log.info("LLM worker %d started, loading %s", self._process.pid, self.settings.model)

    def _generate(self, job: Job, deadline: float) -> Generation:
        self._start()
        if not self._await_ready(deadline):
            return Generation(Finish.LOADING if self._state is WorkerState.LOADING else Finish.UNAVAILABLE)
        if self._pending is not None and not self._drain(min(deadline, self._overdue_at)):
            if time.monotonic() < self._overdue_at:
                return Generation(Finish.BUSY)
            self._restart_hung()
            if not self._await_ready(deadline):
                return Generation(Finish.LOADING if self._state is WorkerState.LOADING else Finish.UNAVAILABLE)
        self._next_id += 1
        job = replace(job, id=self._next_id)
        try:
            if self._conn is None:
                raise OSError("no pipe")
            self._conn.send(("job", job))
        except OSError as exc:
            self._died(f"cannot reach the worker: {exc}")
            return Generation(Finish.UNAVAILABLE)
        result = Generation(Finish.BUDGET)
        while True:
            msg = self._receive(deadline)
            if msg is None:
                if self._state is not WorkerState.READY:
                    return Generation(Finish.UNAVAILABLE, result.tokens)
                self._pending, self._overdue_at = job.id, time.monotonic() + self.cancel_grace_s
                try:
                    self._conn.send(("cancel", job.id))  # the worker stops at its next step
                except OSError:
                    pass  # gone: the next request finds out
                return result
            if msg[0] == "token" and msg[1] == job.id:
                result.tokens.append(msg[2])
            elif msg[0] == "end" and msg[1] == job.id:
                result.end = msg[2]
                result.finish = result.end.finish
                return result

    def _await_ready(self, deadline: float) -> bool:
        while self._state is WorkerState.LOADING:
            msg = self._receive(deadline)
            if msg is None:
                break
        return self._state is WorkerState.READY

    def _drain(self, deadline: float) -> bool:
        """Read up to the end of the aborted job; False when the deadline comes first."""
        while self._pending is not None:
            msg = self._receive(deadline)
            if msg is None:
                return False
            if msg[0] == "end" and msg[1] == self._pending:
                log.debug("abandoned LLM job %d ended: %s", msg[1], msg[2].finish.value)
                self.last_abandoned = (msg[1], msg[2].finish)
                self._pending = None
        return True

    def _receive(self, deadline: float) -> tuple[Any, ...] | None:
        """The next message, or None at the deadline or when the worker is gone; handles ready/failed."""
        conn = self._conn
        if conn is None:
            return None
        try:
            if not conn.poll(max(deadline - time.monotonic(), 0.0)):
                return None
            msg = conn.recv()
        except (EOFError, OSError):
            self._died("the LLM worker exited")
            return None
        if msg[0] == "ready":
            self.info = msg[1]
            self._state = WorkerState.READY
            self._log_ready(msg[1])
        elif msg[0] == "failed":
            self.error = msg[1]
            self._state = WorkerState.FAILED
            log.error("LLM fallback disabled: %s", msg[1])
            self._stop(0.0, state=WorkerState.FAILED)
        return msg

    def _log_ready(self, info: LoadInfo) -> None:
        choice = info.choice
        log.info("LLM ready in %.1f s on %s [%s], context %d tokens, %s, guidance %s, prefix cache %s",
                 info.load_s, choice.describe(), info.device, info.context_length,
                 "chat template" if info.chat_template else "plain prompt", "on" if info.guidance else "OFF",
                 "on" if info.prefix_cache else "off")
        if choice.requested not in (Provider.AUTO, choice.provider):
            log.warning("LLM provider %s was asked for but %s is used", choice.requested.value, choice.provider.value)
        if not info.guidance:
            log.warning("this onnxruntime-genai has no guidance: answers are checked only after generation")

    def _restart_hung(self) -> None:
        """The aborted job did not end within its grace: the worker hangs (or one step never ends)."""
        pid = self.pid
        self._stop(0.0)
        self.restarts += 1
        self.error = f"the LLM worker did not end a cancelled job within {self.cancel_grace_s:g} s"
        log.warning("%s: worker %s killed, a new one loads the model", self.error, pid)
        self._start()

    def _died(self, why: str) -> None:
        # Dying while loading is a broken model or runtime: retrying would only die again.
        after_load = self._state is WorkerState.READY
        code = self._stop(0.0, state=WorkerState.STOPPED if after_load else WorkerState.FAILED)
        why += f" (exit code {code})" if code is not None else ""
        self.error = why
        if after_load:
            self.restarts += 1
            log.warning("%s; it restarts with the next request", why)
        else:
            log.error("LLM fallback disabled: %s while loading", why)

    def _stop(self, timeout: float, state: WorkerState = WorkerState.STOPPED) -> int | None:
        """Close the pipe and end the process (killed after ``timeout``); its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._pending = None
        self._state = state
        if conn is not None:
            try:
                conn.send(("stop",))
            except OSError:
                pass
            conn.close()
        if process is None:
            return None
        try:
            return int(process.wait(timeout))
        except subprocess.TimeoutExpired:
            # Requests stop it with timeout 0: a caller's budget never waits for an exit.
            code = process.poll()
            if code is None:
                process.kill()
                code = process.wait()  # reaping after SIGKILL takes no time worth counting
            return int(code)


class _Cancelled:
    """Whether the running job was cancelled; looks at the socket between steps without blocking."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.job_id = -1
        self.stop = False
        self._cancelled = False

    def begin(self, job_id: int) -> None:
        self.job_id, self._cancelled = job_id, False

    def __call__(self) -> bool:
        while not self._cancelled and self.conn.poll(0):
            msg = self.conn.recv()
            if msg[0] == "stop":
                self.stop = self._cancelled = True
            elif msg[0] == "cancel" and msg[1] == self.job_id:
                self._cancelled = True
        return self._cancelled


def serve(fd: int) -> None:
    """The worker process (``python -m voiced.llm FD``): load the model, then answer jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    logging.basicConfig(level=logging.WARNING, format="voiced-llm: %(levelname)s %(name)s: %(message)s")
    conn = Connection(fd)
    try:
        _serve(conn)
    except (EOFError, OSError, pickle.UnpicklingError):
        pass  # the parent is gone or closed the socket: nothing left to do


def _serve(conn: Connection) -> None:
    from voiced.llm.prefix import PrefixCache
    from voiced.llm.runtime import open_model, run_generation

    settings: WorkerSettings = conn.recv()[1]
    try:
        loaded = open_model(settings.model, settings.provider, settings.threads)
        cache = PrefixCache.create(loaded) if settings.prefix_cache else None
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which logs it and gives up on the LLM
        conn.send(("failed", str(exc)))
        return
    conn.send(("ready", LoadInfo(loaded.choice, str(loaded.model.device_type), loaded.context_length,
                                 loaded.chat_template, loaded.guidance, loaded.load_s, cache is not None)))
    cancelled = _Cancelled(conn)
    while not cancelled.stop:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        if msg[0] != "job":
            continue  # a cancel for a job that had already ended
        job: Job = msg[1]
        cancelled.begin(job.id)
        end = run_generation(loaded, job, cancelled, functools.partial(_send_token, conn, job.id), cache)
        conn.send(("end", job.id, end))


def _send_token(conn: Connection, job_id: int, token: int) -> None:
    conn.send(("token", job_id, token))

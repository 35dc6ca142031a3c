"""Cloud requests off the daemon's stages: a few worker threads and a deadline keeper.

A stage hands a request over and goes on: :meth:`WorkerPool.submit` never blocks. Each
request is answered exactly once, through its callback, with what the cloud said or —
whichever comes first — ``TIMED_OUT`` at its deadline, even while a worker is still stuck
in a hung connection. Callbacks run on ``cloud-worker-N`` (an answer) or
``cloud-deadline`` (timeouts, refusals: queue full or pool closed), never on the caller's
thread; they must be quick and must not raise (an exception is logged and dropped).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Generic, TypeVar

from voiced.cloud.clients import CallKind, Count
from voiced.cloud.errors import CloudError, CloudErrorKind
from voiced.stages import Counters

__all__ = ["CloudOutcome", "CloudResult", "CloudTicket", "WorkerPool"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLOSED = CloudError(CloudErrorKind.DISABLED, "the cloud router is closed")
_LATE = CloudError(CloudErrorKind.TIMEOUT, "no answer within local_budget_s")


class CloudOutcome(Enum):
    """How a submitted request ended; only OK carries the cloud's answer."""

    OK = "ok"
    """The cloud answered; ``value`` is the text, or the Intent (None: no intent fits)."""
    UNAVAILABLE = "unavailable"
    """The cloud was not asked: disabled, no key, probe down or circuit open."""
    FAILED = "failed"
    """The cloud was asked and the call failed; ``error`` says how."""
    TIMED_OUT = "timed_out"
    """No answer within ``local_budget_s``; a late answer is dropped."""
    BUSY = "busy"
    """Too many requests waiting; this one was not queued."""


@dataclass(frozen=True)
class CloudResult(Generic[T]):
    """What a callback receives."""

    outcome: CloudOutcome
    value: T | None = None
    """The answer when ``outcome`` is OK."""
    error: CloudError | None = None
    """Why there is no answer, when known."""
    elapsed_s: float = 0.0
    """From submit to this result."""

    @property
    def ok(self) -> bool:
        return self.outcome is CloudOutcome.OK


class CloudTicket(Generic[T]):
    """A submitted request: ``wait`` for its result if a caller prefers that to the callback."""

    def __init__(self, kind: CallKind, deadline: float, clock: Callable[[], float]) -> None:
        self.kind = kind
        self.deadline = deadline
        """``time.monotonic()`` by which the result is there."""
        self._clock = clock
        self._event = threading.Event()
        self._result: CloudResult[T] | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> CloudResult[T] | None:
        """The result, waiting at most ``timeout`` and never past the deadline (plus a
        moment for the deadline thread); None if not there by then."""
        left = max(0.0, self.deadline - self._clock()) + 0.25
        self._event.wait(left if timeout is None else min(timeout, left))
        return self._result

    def _set(self, result: CloudResult[T]) -> None:
        self._result = result
        self._event.set()


class _Job(Generic[T]):
    def __init__(self, ticket: CloudTicket[T], work: Callable[[float], CloudResult[T]],
                 callback: Callable[[CloudResult[T]], None], submitted: float, counters: Counters) -> None:
        self.ticket = ticket
        self.work = work
        self.callback = callback
        self.submitted = submitted
        self._counters = counters
        self._lock = threading.Lock()
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def finish(self, result: CloudResult[T]) -> bool:
        """Answer once; a later answer (the cloud after the deadline) is dropped."""
        with self._lock:
            if self._done:
                return False
            self._done = True
        if result.outcome is CloudOutcome.TIMED_OUT:
            self._counters.add(Count.TIMED_OUT.of(self.ticket.kind))
        elif result.outcome is CloudOutcome.BUSY:
            self._counters.add(Count.BUSY.of(self.ticket.kind))
        self.ticket._set(result)
        try:
            self.callback(result)
        except Exception:  # a caller's bug must not kill a cloud thread
            log.exception("cloud %s result callback failed", self.ticket.kind.value)
        return True


class WorkerPool:
    """``workers`` threads taking requests from a bounded queue, plus the deadline thread.

    Threads start with the first request, not at start-up.
    """

    def __init__(self, workers: int, queue_size: int, counters: Counters,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._workers = workers
        self._queue: queue.Queue[_Job[object] | None] = queue.Queue(queue_size)
        self._counters = counters
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Job[object], CloudResult[object] | None]] = []
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, kind: CallKind, work: Callable[[float], CloudResult[T]],
               callback: Callable[[CloudResult[T]], None], budget_s: float) -> CloudTicket[T]:
        """Queue ``work(deadline)``; never blocks. ``callback`` gets its result or TIMED_OUT."""
        now = self._clock()
        ticket: CloudTicket[T] = CloudTicket(kind, now + budget_s, self._clock)
        job = _Job(ticket, work, callback, now, self._counters)
        refusal: CloudResult[T] | None = None
        with self._cond:
            if self._closed:
                # The deadline thread is gone: a one-off thread keeps callbacks off the caller.
                closed: CloudResult[T] = CloudResult(CloudOutcome.UNAVAILABLE, error=_CLOSED)
                threading.Thread(target=job.finish, args=(closed,), name="cloud-deadline", daemon=True).start()
                return ticket
            self._start_threads()
            try:
                self._queue.put_nowait(job)  # type: ignore[arg-type]
            except queue.Full:
                refusal = CloudResult(CloudOutcome.BUSY)
            # A refusal is answered by the deadline thread at once: callbacks never run on the caller.
            when = now if refusal is not None else ticket.deadline
            heapq.heappush(self._heap, (when, next(self._seq), job, refusal))  # type: ignore[arg-type]
            self._cond.notify_all()
        return ticket

    def start(self) -> None:
        """Start the threads now rather than on the first request (they inherit this thread's CPU affinity)."""
        with self._cond:
            self._start_threads()

    def queued(self) -> int:
        return self._queue.qsize()

    def close(self, timeout: float = 2.0) -> None:
        """Answer everything pending UNAVAILABLE and stop the threads (a worker stuck in I/O is left behind)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break  # the workers see _closed after their job anyway
        deadline = self._clock() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - self._clock()))

    # -- threads ----------------------------------------------------------------------------------

    def _start_threads(self) -> None:
        if self._threads or self._closed:
            return
        for i in range(self._workers):
            self._threads.append(threading.Thread(target=self._work, name=f"cloud-worker-{i}", daemon=True))
        self._threads.append(threading.Thread(target=self._keep_deadlines, name="cloud-deadline", daemon=True))
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None or self._closed:
                return
            if job.done:  # timed out while queued
                continue
            try:
                result = job.work(job.ticket.deadline)
            except Exception as exc:  # work returns results: this is a bug; keep serving
                log.exception("cloud %s request failed unexpectedly", job.ticket.kind.value)
                result = CloudResult(CloudOutcome.FAILED, error=CloudError(CloudErrorKind.CONNECTION, repr(exc)))
            job.finish(replace(result, elapsed_s=self._clock() - job.submitted))

    def _keep_deadlines(self) -> None:
        while True:
            due: list[tuple[_Job[object], CloudResult[object]]] = []
            with self._cond:
                while not self._closed:
                    now = self._clock()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
                now = self._clock()
                while self._heap and (self._closed or self._heap[0][0] <= now):
                    _, _, job, preset = heapq.heappop(self._heap)
                    if not job.done:
                        if preset is None:
                            preset = (CloudResult(CloudOutcome.UNAVAILABLE, error=_CLOSED) if self._closed
                                      else CloudResult(CloudOutcome.TIMED_OUT, error=_LATE))
                        due.append((job, CloudResult(preset.outcome, preset.value, preset.error, now - job.submitted)))
                closed = self._closed
            for job, result in due:
                job.finish(result)
            if closed:
                with self._cond:
                    if not self._heap:
                        return

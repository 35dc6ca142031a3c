"""Pieces the daemon's stages share: a bounded queue that drops the oldest, and counters."""

from __future__ import annotations

import collections
import threading
from typing import Generic, TypeVar

__all__ = ["Counters", "DropOldestQueue"]

T = TypeVar("T")


class Counters:
    """Named, thread-safe event counters for the stats message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: collections.Counter[str] = collections.Counter()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] += n

    def get(self, name: str) -> int:
        with self._lock:
            return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)


class DropOldestQueue(Generic[T]):
    """A bounded FIFO between two stages; when full, the oldest item makes room and is counted.

    Live audio must never back up behind a slow stage: old audio is worth less than new
    audio. A file has no clock, so its producer may block instead and lose nothing.
    """

    def __init__(self, maxsize: int, counters: Counters, drop_counter: str) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._maxsize = maxsize
        self._cond = threading.Condition()
        self._counters = counters
        self._drop_counter = drop_counter

    def put(self, item: T, block: bool = False, stop: threading.Event | None = None) -> None:
        """Add ``item``; when full, drop the oldest, or with ``block`` wait for room (until ``stop``)."""
        with self._cond:
            while block and len(self._items) >= self._maxsize and not (stop and stop.is_set()):
                self._cond.wait(0.1)
            if len(self._items) >= self._maxsize:
                self._items.popleft()
                self._counters.add(self._drop_counter)
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float) -> T | None:
        """The next item, or None after ``timeout`` seconds."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items, timeout):
                return None
            item = self._items.popleft()
            self._cond.notify_all()  # a blocked producer may go on
            return item

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

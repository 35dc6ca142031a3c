"""A durable outbox: every outgoing MQTT message is stored here before it is sent.

Messages live in one SQLite file (WAL mode) in the state directory, in the order they
were appended, until the client acknowledges them (on the broker's PUBACK); so nothing
is lost while the broker is away or across a restart of the daemon. The outbox is
bounded by count, bytes and age: when a bound is exceeded the oldest messages are
dropped, counted per reason and logged.

Row ids come from AUTOINCREMENT so they never repeat, not even after the newest rows are
deleted: the client hands messages out by "every id after the last one handed out".

A full disk (or any write error of SQLite) loses nothing: appends then wait in memory, in
order, bounded like the file, and reach the file at the next operation after space is back;
an acknowledgement that cannot be written is remembered and retried (until then the message
is not handed out again).

A message's age is measured on the boot clock while the machine has not rebooted since the
append: a Pi has no real-time clock, so its wall clock starts at the last shutdown's time and
jumps forward when NTP first answers (by weeks, for a device that was stored away); measured on
that clock, messages appended before the jump would look weeks old and be dropped unsent. Across
a reboot only the wall clock is left to measure with.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Self

from voiced.errors import ConfigError, VoicedError
from voiced.mqtt.outbox_file import open_outbox_file
from voiced.runtime.lograte import sparse_level

__all__ = ["DropReason", "Outbox", "OutboxConfig", "OutboxMessage", "SPILLED"]

SPILLED = -1
"""What ``append`` returns for a message kept in memory because the file could not take it."""

log = logging.getLogger(__name__)

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)

_Row = tuple[str, bytes, int, bool, float, str, float]
"""topic, payload, qos, retain, created (wall clock), boot id, seconds since that boot."""


@functools.cache
def _boot_id() -> str:
    """This boot's id ('' where the kernel gives none: every age is then wall-clock)."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _since_boot() -> float:
    """Seconds since boot, suspend included; setting the wall clock does not move it."""
    return time.clock_gettime(_BOOTTIME)


class DropReason(Enum):
    """Why the outbox dropped a message before it was delivered."""

    MAX_MESSAGES = "max_messages"
    """More than ``max_messages`` were waiting; the oldest went."""
    MAX_BYTES = "max_bytes"
    """The payloads waiting exceeded ``max_bytes``; the oldest went (or the message alone is larger)."""
    MAX_AGE = "max_age"
    """The message waited longer than ``max_age_s``."""


@dataclass(frozen=True)
class OutboxConfig:
    """Where the outbox lives and how much it may hold."""

    path: str
    """SQLite file, normally ``<StateDirectory>/outbox.sqlite``; created with its directory."""
    max_messages: int = 10_000
    """Most messages kept waiting; beyond it the oldest are dropped."""
    max_bytes: int = 16 * 1024 * 1024
    """Most payload bytes kept waiting; beyond it the oldest are dropped."""
    max_age_s: float = 7 * 24 * 3600.0
    """Messages older than this are dropped instead of sent (measured on the boot clock within one
    boot, on the wall clock across a reboot); 0 keeps messages however old."""
    fsync: bool = False
    """True: every append and acknowledgement reaches the disk before returning (survives
    power loss; slow and wearing on SD cards). False: survives a crash of the process, and
    the database stays intact on power loss, but the newest changes may be lost."""

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("outbox.path", "must name a file")
        if self.max_messages < 1:
            raise ConfigError("outbox.max_messages", f"must be >= 1, got {self.max_messages}")
        if self.max_bytes < 1:
            raise ConfigError("outbox.max_bytes", f"must be >= 1, got {self.max_bytes}")
        if self.max_age_s < 0:
            raise ConfigError("outbox.max_age_s", f"must be >= 0, got {self.max_age_s}")


@dataclass(frozen=True)
class OutboxMessage:
    """One stored message."""

    id: int
    """Position in the outbox: larger ids were appended later."""
    topic: str
    payload: bytes
    qos: int
    retain: bool
    created: float
    """Wall-clock time (``time.time()``) of the append."""


class Outbox:
    """The SQLite outbox; every method is thread-safe (one connection behind a lock)."""

    def __init__(self, config: OutboxConfig) -> None:
        self.config = config
        path = Path(config.path)
        self._db, self.set_aside = open_outbox_file(path, config.fsync)
        """Where a corrupt outbox file found at start was moved (None: there was none)."""
        try:
            count, size = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox").fetchone()
        except sqlite3.Error as exc:
            self._db.close()
            raise ConfigError("outbox.path", f"cannot read {path}: {exc}", str(path)) from None
        self._lock = threading.Lock()
        self._closed = False
        self._count: int = count
        self._bytes: int = size
        self._dropped = {reason: 0 for reason in DropReason}
        self._spill: list[_Row] = []  # appends the file refused, oldest first
        self._unacked_deletes: set[int] = set()  # acknowledged, but the delete could not be written
        self.write_errors = 0
        if count:
            log.info("outbox %s holds %d messages (%d bytes) from before", path, count, size)

    def append(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int | None:
        """Store a message; return its id, SPILLED when the file refused it (kept in memory, in
        order), or None when it alone exceeds ``max_bytes``.

        Older messages are dropped first when the bounds would be exceeded.
        """
        size = len(payload)
        with self._lock:
            self._check_open()
            if size > self.config.max_bytes:
                self._count_drop(DropReason.MAX_BYTES, 1, f"a {size}-byte message on {topic}, larger than the outbox")
                return None
            row = (topic, payload, qos, retain, time.time(), _boot_id(), _since_boot())
            if self._spill and not self._unspill_locked():
                return self._spill_locked(row)  # behind the others, to keep the order
            try:
                return self._insert_locked(row)
            except sqlite3.Error as exc:
                self._write_failed(exc)
                return self._spill_locked(row)

    def _insert_locked(self, row: _Row) -> int:
        topic, payload, qos, retain, created, boot_id, since_boot = row
        size = len(payload)
        count, nbytes = self._count, self._bytes
        # One transaction: the evictions and the insert reach the file together.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._expire_locked()
            self._evict_locked(DropReason.MAX_MESSAGES, lambda: self._count + 1 > self.config.max_messages)
            self._evict_locked(DropReason.MAX_BYTES, lambda: self._bytes + size > self.config.max_bytes)
            cur = self._db.execute(
                "INSERT INTO outbox (topic, payload, qos, retain, created, boot_id, since_boot)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (topic, payload, qos, int(retain), created, boot_id, since_boot),
            )
            self._db.execute("COMMIT")
        except BaseException:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # nothing was begun, or SQLite rolled back by itself
            self._count, self._bytes = count, nbytes
            raise
        self._count += 1
        self._bytes += size
        return int(cur.lastrowid or 0)

    def _spill_locked(self, row: _Row) -> int:
        self._spill.append(row)
        if len(self._spill) + self._count > self.config.max_messages:
            self._spill.pop(0)
            self._count_drop(DropReason.MAX_MESSAGES, 1, "the oldest message held in memory (disk full)")
        return SPILLED

    def _unspill_locked(self) -> bool:
        """Move the messages held in memory to the file, oldest first; True when none is left."""
        checkpointed = False
        while self._spill:
            try:
                self._insert_locked(self._spill[0])
            except sqlite3.Error:
                if checkpointed:
                    return False
                checkpointed = True
                try:  # the WAL may be what fills the disk: fold it into the file and cut it short
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    return False
                continue
            self._spill.pop(0)
        log.info("outbox %s: the file takes messages again", self.config.path)
        return True

    def _write_failed(self, exc: sqlite3.Error) -> None:
        self.write_errors += 1
        log.log(sparse_level(self.write_errors, logging.ERROR),
                "outbox %s cannot be written (%s): holding messages in memory (%d write errors so far)",
                self.config.path, exc, self.write_errors)

    def _retry_deletes_locked(self) -> None:
        for message_id in sorted(self._unacked_deletes):
            try:
                self._db.execute("DELETE FROM outbox WHERE id = ?", (message_id,))
            except sqlite3.Error:
                return
            self._unacked_deletes.discard(message_id)

    @property
    def held_in_memory(self) -> int:
        """Messages waiting for the file to take them (disk full)."""
        with self._lock:
            return len(self._spill)

    def peek(self, after_id: int = 0, limit: int = 100) -> list[OutboxMessage]:
        """Up to ``limit`` messages with an id above ``after_id``, oldest first (expired ones dropped)."""
        with self._lock:
            self._check_open()
            if self._spill:
                self._unspill_locked()
            if self._unacked_deletes:
                self._retry_deletes_locked()
            try:
                self._expire_locked()
            except sqlite3.Error as exc:  # expiry can wait for space
                self._write_failed(exc)
            rows = self._db.execute(
                "SELECT id, topic, payload, qos, retain, created FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
                (after_id, limit + len(self._unacked_deletes)),
            ).fetchall()
        messages = [OutboxMessage(i, t, bytes(p), q, bool(r), c) for i, t, p, q, r, c in rows
                    if i not in self._unacked_deletes]
        return messages[:limit]

    def ack(self, message_id: int) -> bool:
        """Delete a delivered message; False if it was already gone (dropped meanwhile)."""
        with self._lock:
            self._check_open()
            row = self._db.execute("SELECT LENGTH(payload) FROM outbox WHERE id = ?", (message_id,)).fetchone()
            if row is None or message_id in self._unacked_deletes:
                return False
            try:
                self._db.execute("DELETE FROM outbox WHERE id = ?", (message_id,))
            except sqlite3.Error as exc:  # delivered all the same: retried later, never handed out again
                self._write_failed(exc)
                self._unacked_deletes.add(message_id)
            self._count -= 1
            self._bytes -= row[0]
            return True

    def last_id(self) -> int:
        """The largest id ever handed out (0 for a new outbox)."""
        with self._lock:
            self._check_open()
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
        return int(row[0]) if row else 0

    def __len__(self) -> int:
        """Messages waiting, on file and in memory."""
        with self._lock:
            return self._count + len(self._spill)

    @property
    def size_bytes(self) -> int:
        """Payload bytes waiting."""
        with self._lock:
            return self._bytes

    def stats(self) -> Mapping[str, int]:
        """``queued``, ``queued_bytes`` and ``dropped_<reason>`` for each DropReason (this process)."""
        with self._lock:
            out: dict[str, int] = {"queued": self._count + len(self._spill), "queued_bytes": self._bytes,
                                   "held_in_memory": len(self._spill), "write_errors": self.write_errors,
                                   "corrupt_file_set_aside": int(self.set_aside is not None)}
            out.update({f"dropped_{r.value}": n for r, n in self._dropped.items()})
            return out

    def close(self) -> None:
        """Close the database; messages not acknowledged stay for the next start."""
        with self._lock:
            if not self._closed:
                if self._spill and not self._unspill_locked():
                    log.error("outbox %s: %d messages held in memory are lost: the disk is still full",
                              self.config.path, len(self._spill))
                self._closed = True
                self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise VoicedError(f"outbox {self.config.path} is closed")

    def _expire_locked(self) -> None:
        if not self.config.max_age_s or not self._count:
            return
        boot = _boot_id()
        # this boot's messages by the boot clock, earlier boots' (and unknown ones) by the wall clock
        where = "CASE WHEN boot_id = ? AND boot_id != '' THEN since_boot < ? ELSE created < ? END"
        cutoffs = (boot, _since_boot() - self.config.max_age_s, time.time() - self.config.max_age_s)
        n, size = self._db.execute(
            f"SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox WHERE {where}", cutoffs
        ).fetchone()
        if n:
            self._db.execute(f"DELETE FROM outbox WHERE {where}", cutoffs)
            self._count -= n
            self._bytes -= size
            self._count_drop(DropReason.MAX_AGE, n, f"{n} messages older than {self.config.max_age_s:g} s")

    def _evict_locked(self, reason: DropReason, over: Callable[[], bool]) -> None:
        dropped = 0
        while self._count and over():
            # Oldest first, a batch at a time: one statement per message would be slow at the bound.
            rows = self._db.execute("SELECT id, LENGTH(payload) FROM outbox ORDER BY id LIMIT 64").fetchall()
            for message_id, size in rows:
                if not over():
                    break
                self._db.execute("DELETE FROM outbox WHERE id = ?", (message_id,))
                self._count -= 1
                self._bytes -= size
                dropped += 1
        if dropped:
            self._count_drop(reason, dropped, f"the {dropped} oldest messages")

    def _count_drop(self, reason: DropReason, n: int, what: str) -> None:
        self._dropped[reason] += n
        log.warning("outbox %s: dropped %s (bound %s)", self.config.path, what, reason.value)

    def __repr__(self) -> str:
        return f"Outbox({self.config.path!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

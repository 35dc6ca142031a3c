"""A durable outbox: every outgoing MQTT message is stored here before it is sent.

Messages live in one SQLite file (WAL mode) in the state directory, in the order they
were appended, until the client acknowledges them (on the broker's PUBACK); so nothing
is lost while the broker is away or across a restart of the daemon. The outbox is
bounded by count, bytes and age: when a bound is exceeded the oldest messages are
dropped, counted per reason and logged.

Ids never repeat, not even after the newest rows are deleted (the table is AUTOINCREMENT and
the outbox continues from the largest id it has seen): the client hands messages out by "every
id after the last one handed out". The outbox gives the ids itself, not SQLite, so that a
message held in memory has its id (and its place in the order) from the start and keeps it when
it reaches the file.

A full disk (or a read-only one, or any write error of SQLite) stops neither delivery nor the
daemon: appends are then held in memory, in order, bounded like the file, handed out and
acknowledged from there, and those not yet delivered reach the file at the next operation after
the disk takes writes again; an acknowledgement that cannot be written is remembered and retried
(until then the message is not handed out again). If the disk is already full or read-only when
the outbox opens, it starts from memory and opens the file once the disk takes writes; the
messages the file held from before are then handed out after those appended meanwhile (the
client has gone past their ids). Messages held in memory are kept in a file on a RAM-backed disk
too when ``held_path`` is set (``outbox_held``): a restart of the daemon before the disk takes
writes then takes them up again; without it, or across a reboot, they are lost.

A damaged file (a failing SD card), found at opening or by a read while open, is set aside and
replaced by one holding what SQLite can still read of it (``outbox_file``); a single message read
back damaged is dropped and counted, not allowed to stop the ones after it.

A message's age is measured on the boot clock while the machine has not rebooted since the
append: a Pi has no real-time clock, so its wall clock starts at the last shutdown's time and
jumps forward when NTP first answers (by weeks, for a device that was stored away); measured on
that clock, messages appended before the jump would look weeks old and be dropped unsent. Across
a reboot only the wall clock is left to measure with, and only where it can be trusted: a message
is aged by it only if the clock was synchronized (by NTP) when the message reached the file or
later in that boot (its ``synced_created``: the boot clock carries a time read then back to the
append) and is synchronized now; the others wait, bounded by count and bytes only.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

from voiced.errors import ConfigError, VoicedError
from voiced.mqtt import outbox_file
from voiced.mqtt.outbox_file import (READ_COLUMNS, DiskUnavailable, damaged, open_outbox_file, read_back, synced_stamp,
                                     take_up)
from voiced.mqtt.outbox_held import HeldFile
from voiced.mqtt.outbox_memory import HeldMessages, Row
from voiced.mqtt.outbox_types import HELD_FILE, OUTBOX_FILE, SPILLED, DropReason, OutboxConfig, OutboxMessage
from voiced.runtime import bootclock
from voiced.runtime.lograte import sparse_level

__all__ = ["DropReason", "HELD_FILE", "OUTBOX_FILE", "Outbox", "OutboxConfig", "OutboxMessage", "SPILLED"]

log = logging.getLogger(__name__)

_REOPEN_EVERY_S = 5.0
"""How often an outbox whose file could not be opened (disk full or read-only) tries again."""


class Outbox:
    """The SQLite outbox; every method is thread-safe (one connection behind a lock)."""

    def __init__(self, config: OutboxConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._closed = False
        self._db: sqlite3.Connection | None = None  # None: the disk was full or read-only at the open
        self.set_aside: Path | None = None
        """Where a corrupt outbox file was last moved (None: none was)."""
        self._count = 0  # messages in the file
        self._bytes = 0
        self._next_id = 1
        self._dropped = {reason: 0 for reason in DropReason}
        self._unacked_deletes: set[int] = set()  # acknowledged, but the delete could not be written
        self._unstamped = False  # the file may hold messages of this boot stored before the clock was synchronized
        self._reopen_at = 0.0
        self.write_errors = 0
        try:
            self._attach_locked()
        except DiskUnavailable as exc:
            self._reopen_at = time.monotonic() + _REOPEN_EVERY_S
            log.error("outbox: %s; messages are sent from memory until it takes writes", exc)
        # appends the file refused; after the file's ids, as they are newer than its messages
        self._spill = HeldMessages(HeldFile.open(Path(config.held_path)) if config.held_path else None)
        held = self._spill.take_up(self._next_id, self._in_file_locked)
        if held:
            self._next_id += held
            log.info("outbox: %d messages held in memory before a restart taken up from %s", held,
                     config.held_path)
            self._expire_held_locked()
            self._bound_held_locked()

    def _in_file_locked(self, message_id: int, row: Row) -> bool:
        """Whether the file holds this very message under this id (not another one given the same id)."""
        if self._db is None:
            return False
        topic, payload, _, _, created, _, _ = row
        try:
            found = self._db.execute("SELECT 1 FROM outbox WHERE id = ? AND CAST(topic AS BLOB) = ?"
                                     " AND payload = ? AND created = ?", (message_id, topic.encode(), payload, created))
            return found.fetchone() is not None
        except sqlite3.Error:
            return False  # sent twice rather than lost

    def _attach_locked(self, damage: BaseException | None = None) -> None:
        """Open the file and take up its messages; DiskUnavailable if its disk is (still) full or
        read-only. ``damage``: what reading the open file raised: it is set aside and what can be
        read of it is kept under the same ids (the client may have handed them out)."""
        path = Path(self.config.path)
        db, set_aside = open_outbox_file(path, self.config.fsync, damage)
        count, size, top = take_up(path, db, 0 if damage is not None else self._next_id - 1)
        self._db, self.set_aside = db, set_aside or self.set_aside
        self._count, self._bytes = count, size
        self._next_id = max(self._next_id, top + 1)
        self._unstamped = True  # a process before, this boot, may have stored some
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
            row = (topic, payload, qos, retain, time.time(), bootclock.boot_id(), bootclock.since_boot())
            message_id = self._next_id
            self._next_id += 1
            if (self._spill or self._db is None) and not self._unspill_locked():
                return self._spill_locked(message_id, row)  # behind the others, to keep the order
            try:
                return self._insert_locked(message_id, row)
            except sqlite3.Error as exc:
                self._write_failed(exc)
                return self._spill_locked(message_id, row)

    def _file_locked(self) -> sqlite3.Connection:
        if self._db is None:
            raise sqlite3.OperationalError("the outbox file is not open (its disk was full or read-only)")
        return self._db

    def _insert_locked(self, message_id: int, row: Row) -> int:
        db = self._file_locked()
        topic, payload, qos, retain, created, boot_id, since_boot = row
        synced_created = synced_stamp(since_boot, time.time())
        size = len(payload)
        count, nbytes, unstamped = self._count, self._bytes, self._unstamped
        # One transaction: the evictions and the insert reach the file together.
        db.execute("BEGIN IMMEDIATE")
        try:
            self._expire_locked()
            self._evict_locked(DropReason.MAX_MESSAGES, lambda: self._count + 1 > self.config.max_messages)
            self._evict_locked(DropReason.MAX_BYTES, lambda: self._bytes + size > self.config.max_bytes)
            db.execute(
                "INSERT INTO outbox (id, topic, payload, qos, retain, created, boot_id, since_boot, synced_created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (message_id, topic, payload, qos, int(retain), created, boot_id, since_boot, synced_created),
            )
            db.execute("COMMIT")
        except BaseException:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # nothing was begun, or SQLite rolled back by itself
            self._count, self._bytes, self._unstamped = count, nbytes, unstamped
            raise
        self._count += 1
        self._bytes += size
        self._unstamped = self._unstamped or synced_created is None
        return message_id

    def _spill_locked(self, message_id: int, row: Row) -> int:
        self._spill.add(message_id, row)
        self._expire_held_locked()
        self._bound_held_locked()
        return SPILLED

    def _bound_held_locked(self) -> None:
        # the file's bounds, over what it holds and what waits here together
        bounds = ((DropReason.MAX_MESSAGES, lambda: len(self._spill) + self._count > self.config.max_messages),
                  (DropReason.MAX_BYTES, lambda: self._spill.bytes + self._bytes > self.config.max_bytes))
        for reason, over in bounds:
            dropped = 0
            while len(self._spill) and over():
                self._spill.remove(self._spill.oldest()[0])
                dropped += 1
            if dropped:
                self._count_drop(reason, dropped, f"the {dropped} oldest messages held in memory (the file takes none)")

    def _unspill_locked(self) -> bool:
        """Move the messages held in memory to the file, oldest first; True when none is left."""
        if self._db is None:
            if time.monotonic() < self._reopen_at:
                return False
            try:
                self._attach_locked()
            except (DiskUnavailable, ConfigError) as exc:  # not yet, or worse: the messages stay in memory
                self._reopen_at = time.monotonic() + _REOPEN_EVERY_S
                log.debug("outbox %s still cannot be opened: %s", self.config.path, exc)
                return False
            log.info("outbox %s: opened now that the disk has room", self.config.path)
        checkpointed, held = False, bool(self._spill)
        while self._spill:
            oldest, row = self._spill.oldest()
            try:
                self._insert_locked(oldest, row)
            except sqlite3.Error:
                if checkpointed:
                    return False
                checkpointed = True
                try:  # the WAL may be what fills the disk: fold it into the file and cut it short
                    self._file_locked().execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error:
                    return False
                continue
            self._spill.remove(oldest)
        if held:
            log.info("outbox %s: the file takes messages again", self.config.path)
        return True

    def _write_failed(self, exc: sqlite3.Error) -> None:
        self.write_errors += 1
        log.log(sparse_level(self.write_errors, logging.ERROR),
                "outbox %s cannot be written (%s): holding messages in memory (%d write errors so far)",
                self.config.path, exc, self.write_errors)

    def _retry_deletes_locked(self) -> None:
        if self._db is None:
            return
        for message_id in sorted(self._unacked_deletes):
            try:
                self._db.execute("DELETE FROM outbox WHERE id = ?", (message_id,))
            except sqlite3.Error:
                return
            self._unacked_deletes.discard(message_id)

    @property
    def held_in_memory(self) -> int:
        """Messages waiting for the file to take them (disk full or read-only)."""
        with self._lock:
            return len(self._spill)

    def peek(self, after_id: int = 0, limit: int = 100) -> list[OutboxMessage]:
        """Up to ``limit`` messages with an id above ``after_id``, oldest first (expired ones dropped)."""
        with self._lock:
            self._check_open()
            self._expire_held_locked()
            if self._spill or self._db is None:
                self._unspill_locked()
            if self._unacked_deletes:
                self._retry_deletes_locked()
            try:
                self._expire_locked()
            except sqlite3.Error as exc:  # expiry can wait for space
                self._write_failed(exc)
            rows = self._read_locked(f"SELECT {READ_COLUMNS} FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
                                     (after_id, limit + len(self._unacked_deletes)))
            messages = []
            for row in rows:
                if row[0] in self._unacked_deletes:
                    continue  # delivered, and already counted off
                fields = read_back(row)
                if fields is None:
                    self._drop_damaged_locked(row[0], len(row[2]) if isinstance(row[2], bytes) else 0)
                else:
                    messages.append(OutboxMessage(row[0], *fields))
            messages += [OutboxMessage(i, topic, payload, qos, retain, created)
                         for i, (topic, payload, qos, retain, created, *_) in self._spill.after(after_id, limit)]
        messages.sort(key=lambda m: m.id)  # the file's from before a late open come after these
        return messages[:limit]

    def _read_locked(self, query: str, params: tuple) -> list[tuple]:
        """The rows of a read of the file (none while there is no file); a read that meets damage sets
        the file aside and reads the new one."""
        if self._db is None:
            return []
        try:
            return self._db.execute(query, params).fetchall()
        except sqlite3.DatabaseError as exc:
            if not damaged(exc):
                raise
            self._recover_locked(exc)
            return [] if self._db is None else self._db.execute(query, params).fetchall()

    def _recover_locked(self, exc: BaseException) -> None:
        """The open file read back damaged (a failing SD card): set it aside and go on with what can be
        read of it, or from memory if not even a new file can be made."""
        log.error("outbox %s read back damaged while open (%s)", self.config.path, exc)
        db, self._db = self._file_locked(), None
        db.close()
        self._count = self._bytes = 0  # until the new file says what it kept
        try:
            self._attach_locked(exc)
        except (DiskUnavailable, ConfigError) as failure:
            self._reopen_at = time.monotonic() + _REOPEN_EVERY_S
            log.error("outbox %s: %s; messages are sent from memory", self.config.path, failure)

    def _drop_damaged_locked(self, message_id: int, size: int) -> None:
        log.error("outbox %s: message %d reads back damaged (the disk?): dropped", self.config.path, message_id)
        self._dropped[DropReason.DAMAGED] += 1
        self._count -= 1
        self._bytes -= size
        try:
            self._file_locked().execute("DELETE FROM outbox WHERE id = ?", (message_id,))
        except sqlite3.Error as exc:  # never handed out all the same
            self._write_failed(exc)
            self._unacked_deletes.add(message_id)

    def ack(self, message_id: int) -> bool:
        """Delete a delivered message; False if it was already gone (dropped meanwhile)."""
        with self._lock:
            self._check_open()
            if self._spill.remove(message_id):
                return True  # delivered before it reached the file: it never will
            rows = self._read_locked("SELECT LENGTH(payload) FROM outbox WHERE id = ?", (message_id,))
            if not rows or message_id in self._unacked_deletes:
                return False
            [row] = rows
            try:
                self._file_locked().execute("DELETE FROM outbox WHERE id = ?", (message_id,))
            except sqlite3.Error as exc:  # delivered all the same: retried later, never handed out again
                self._write_failed(exc)
                self._unacked_deletes.add(message_id)
            self._count -= 1
            self._bytes -= row[0]
            return True

    def last_id(self) -> int:
        """The largest id ever given (0 for a new outbox)."""
        with self._lock:
            self._check_open()
            return self._next_id - 1

    def __len__(self) -> int:
        """Messages waiting, on file and in memory."""
        with self._lock:
            return self._count + len(self._spill)

    @property
    def size_bytes(self) -> int:
        """Payload bytes waiting, on file and in memory."""
        with self._lock:
            return self._bytes_locked()

    def _bytes_locked(self) -> int:
        return self._bytes + self._spill.bytes

    def stats(self) -> Mapping[str, int]:
        """``queued``, ``queued_bytes``, ``held_in_memory``, ``write_errors``, ``corrupt_file_set_aside``,
        ``file_open`` (0 while the disk was full or read-only since the start) and ``dropped_<reason>``
        for each DropReason (this process)."""
        with self._lock:
            out: dict[str, int] = {"queued": self._count + len(self._spill), "queued_bytes": self._bytes_locked(),
                                   "held_in_memory": len(self._spill), "write_errors": self.write_errors,
                                   "corrupt_file_set_aside": int(self.set_aside is not None),
                                   "file_open": int(self._db is not None)}
            out.update({f"dropped_{r.value}": n for r, n in self._dropped.items()})
            return out

    def close(self) -> None:
        """Close the database; messages not acknowledged stay for the next start."""
        with self._lock:
            if not self._closed:
                self._reopen_at = 0.0  # a last try to open the file, however recent the one before
                if self._spill and not self._unspill_locked():
                    if self._spill.file is None:
                        log.error("outbox %s: %d messages held in memory are lost: the file still takes none",
                                  self.config.path, len(self._spill))
                    else:
                        log.warning("outbox %s still takes no writes: %d messages held stay in %s for the next "
                                    "start (lost on a reboot)", self.config.path, len(self._spill),
                                    self._spill.file.path)
                self._closed = True
                if self._db is not None:
                    self._db.close()
                if self._spill.file is not None:
                    self._spill.file.close()

    def _check_open(self) -> None:
        if self._closed:
            raise VoicedError(f"outbox {self.config.path} is closed")

    def _expire_held_locked(self) -> None:
        if not self.config.max_age_s:
            return
        held = self._spill.drop_older_than(bootclock.since_boot() - self.config.max_age_s)
        if held:
            self._count_drop(DropReason.MAX_AGE, held,
                             f"{held} messages held in memory, older than {self.config.max_age_s:g} s")

    def _expire_locked(self) -> None:
        if not self.config.max_age_s or not self._count or self._db is None:
            return
        boot = bootclock.boot_id()
        # This boot's messages by the boot clock; earlier boots' (and unknown ones) by the wall clock, but
        # only while it is synchronized and only those stamped while it was: a Pi's clock reads 1970 or
        # the last shutdown's time until NTP answers, and a message stamped then would look weeks old
        # (a stamp after now is no age either: it is not below the cutoff).
        where = ("CASE WHEN boot_id = ? AND boot_id != '' THEN since_boot < ?"
                 " ELSE ? AND synced_created IS NOT NULL AND synced_created < ? END")
        synced = outbox_file.wall_clock_synced()
        if synced and self._unstamped:  # this boot's messages stored before NTP answered: the boot clock
            self._db.execute("UPDATE outbox SET synced_created = ? - (? - since_boot)"  # carries now back to them
                             " WHERE synced_created IS NULL AND boot_id = ? AND boot_id != ''",
                             (time.time(), bootclock.since_boot(), boot))
            self._unstamped = False
        cutoffs = (boot, bootclock.since_boot() - self.config.max_age_s, synced, time.time() - self.config.max_age_s)
        n, size = self._db.execute(
            f"SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox WHERE {where}", cutoffs
        ).fetchone()
        if n:
            self._db.execute(f"DELETE FROM outbox WHERE {where}", cutoffs)
            self._count -= n
            self._bytes -= size
            self._count_drop(DropReason.MAX_AGE, n, f"{n} messages older than {self.config.max_age_s:g} s")

    def _evict_locked(self, reason: DropReason, over: Callable[[], bool]) -> None:
        db = self._file_locked()
        dropped = 0
        while self._count and over():
            # Oldest first, a batch at a time: one statement per message would be slow at the bound.
            rows = db.execute("SELECT id, LENGTH(payload) FROM outbox ORDER BY id LIMIT 64").fetchall()
            for message_id, size in rows:
                if not over():
                    break
                db.execute("DELETE FROM outbox WHERE id = ?", (message_id,))
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

"""The messages the outbox holds in memory (its file's disk full or read-only), also kept in a file
on a RAM-backed disk, so that a restart of the daemon does not lose them.

A device whose SD card filled up keeps answering from memory; if the daemon is then restarted (the
watchdog, a crash, an update) before the card takes writes again, what it held would be gone. The
runtime directory (``/run/voiced`` under systemd, a tmpfs kept across restarts of the service with
``RuntimeDirectoryPreserve=restart``) is on another disk that does not fill with the card: each held
message is written there too and deleted when it is delivered or reaches the outbox file. A reboot
empties it, as it does the memory.

The file has the outbox file's format (``outbox_file``: opened the same way, what can be read of a
damaged one kept; the damaged copy is deleted, not kept as the outbox file's is: it would take RAM).
A write that fails is logged and the message stays held in memory: this file only adds to what
survives, it never stops delivery. /run is RAM that the whole system
writes to (systemd, udev, sockets): the file's payloads take at most a quarter of that disk's size,
and messages beyond that are held in memory only (logged); the file keeps a rollback journal, whose
size is that of one write, not a WAL.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from pathlib import Path

from voiced.errors import ConfigError
from voiced.mqtt import outbox_file
from voiced.mqtt.outbox_file import (READ_COLUMNS, DiskUnavailable, delete_set_aside, open_outbox_file, read_back,
                                     synced_stamp)
from voiced.mqtt.outbox_memory import Row
from voiced.runtime import bootclock
from voiced.runtime.lograte import sparse_level

__all__ = ["HeldFile"]

log = logging.getLogger(__name__)

_SHARE_OF_DISK = 4
"""The file's payloads take at most 1/this of its disk's size."""
_INSERT = ("INSERT OR REPLACE INTO outbox (id, topic, payload, qos, retain, created, boot_id, since_boot,"
           " synced_created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")


class HeldFile:
    """The held messages' file; not thread-safe (the outbox's lock covers it)."""

    def __init__(self, path: Path, db: sqlite3.Connection, max_bytes: int) -> None:
        self.path = path
        self._db = db
        self.max_bytes = max_bytes
        """Most payload bytes the file keeps; the messages beyond are held in memory only."""
        self._sizes: dict[int, int] = {}  # payload bytes of each message in the file
        self._bytes = 0
        self.errors = 0
        """Writes that failed (those messages were held in memory only)."""
        self.over = 0
        """Messages held in memory only because the file had ``max_bytes``."""

    @classmethod
    def open(cls, path: Path) -> HeldFile | None:
        """The file at ``path`` (created with its directory), or None when it cannot be opened (logged:
        the outbox then holds messages in memory only)."""
        try:
            db, aside = open_outbox_file(path, fsync=False)
        except (ConfigError, DiskUnavailable) as exc:  # the error names outbox.path: say which file it is
            log.warning("messages held while the outbox file takes no writes are kept in memory only: %s",
                        exc.problem if isinstance(exc, ConfigError) else exc)
            return None
        if aside is not None:  # what could be read of it is in the new file; a copy would take RAM
            try:
                delete_set_aside(aside)
            except OSError as exc:
                log.warning("cannot delete %s: %s", aside, exc)
            log.error("held messages' file %s was damaged: kept what could be read of it, deleted the rest", path)
        try:  # a rollback journal: a WAL would keep up to 4 MB more of /run after the messages are gone
            db.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.Error as exc:
            log.warning("held messages' file %s stays in WAL mode: %s", path, exc)
        return cls(path, db, shutil.disk_usage(path.parent).total // _SHARE_OF_DISK)

    def left(self) -> list[tuple[int, Row]]:
        """What a process before held at its end, oldest first. A message of an earlier boot (a
        ``path`` on a disk that a reboot keeps) is restamped as this boot's, as old as the wall clock
        says if it was known right at the message's write and is now, else as appended now (a Pi's
        clock reads 1970 or the last shutdown's time until NTP answers)."""
        try:
            rows = self._db.execute(f"SELECT {READ_COLUMNS}, CAST(boot_id AS BLOB), since_boot, synced_created"
                                    " FROM outbox ORDER BY id").fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            log.error("held messages' file %s cannot be read (%s): the messages it held are lost", self.path, exc)
            return []
        boot, now, synced = bootclock.boot_id(), bootclock.since_boot(), outbox_file.wall_clock_synced()
        out = []
        for row in rows:
            fields = read_back(row[:6])
            if fields is None:
                continue  # damaged past use
            topic, payload, qos, retain, created = fields
            boot_id, since_boot, synced_created = row[6], row[7], row[8]
            if not boot or boot_id != boot.encode() or not isinstance(since_boot, (int, float)):
                known = synced and isinstance(synced_created, (int, float))
                since_boot = now - (max(0.0, time.time() - synced_created) if known else 0.0)
            out.append((row[0], (topic, payload, qos, retain, created, boot, float(since_boot))))
        return out

    def replace(self, rows: list[tuple[int, Row]]) -> None:
        """Hold exactly ``rows`` (the ones left, under their new ids)."""
        if self._write("DELETE FROM outbox", (), [self._values(i, row) for i, row in rows]):
            self._sizes = {i: len(row[1]) for i, row in rows}
            self._bytes = sum(self._sizes.values())

    def add(self, message_id: int, row: Row) -> None:
        size = len(row[1])
        if self._bytes + size > self.max_bytes:
            self.over += 1
            log.log(sparse_level(self.over), "held messages' file %s has its %d bytes: message %d is held in "
                    "memory only (%d so far)", self.path, self.max_bytes, message_id, self.over)
            return
        if self._write(_INSERT, self._values(message_id, row)):
            self._sizes[message_id] = size
            self._bytes += size

    def remove(self, message_id: int) -> None:
        size = self._sizes.get(message_id)
        if size is not None and self._write("DELETE FROM outbox WHERE id = ?", (message_id,)):
            del self._sizes[message_id]
            self._bytes -= size

    @staticmethod
    def _values(message_id: int, row: Row) -> tuple:
        """``_INSERT``'s values: the row's, and its wall-clock time if the clock is known right now."""
        return message_id, *row, synced_stamp(row[6], time.time())

    def _write(self, statement: str, params: tuple, more: list[tuple] | None = None) -> bool:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(statement, params)
                if more:
                    self._db.executemany(_INSERT, more)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self.errors += 1
            log.log(sparse_level(self.errors, logging.ERROR),
                    "held messages' file %s cannot be written (%s): held in memory only (%d errors so far)",
                    self.path, exc, self.errors)
            return False
        return True

    def close(self) -> None:
        self._db.close()

"""The messages the outbox holds in memory (its file's disk full or read-only), also kept in a file
on a RAM-backed disk, so that a restart of the daemon does not lose them.

A device whose SD card filled up keeps answering from memory; if the daemon is then restarted (the
watchdog, a crash, an update) before the card takes writes again, what it held would be gone. The
runtime directory (``/run/voiced`` under systemd, a tmpfs kept across restarts of the service with
``RuntimeDirectoryPreserve=restart``) is on another disk that does not fill with the card: each held
message is written there too and deleted when it is delivered or reaches the outbox file. A reboot
empties it, as it does the memory.

The file has the outbox file's format (``outbox_file``: opened the same way, a damaged one set aside
with what can be read of it kept). A write that fails is logged and the message stays held in memory:
this file only adds to what survives, it never stops delivery.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from voiced.errors import ConfigError
from voiced.mqtt.outbox_file import READ_COLUMNS, DiskUnavailable, open_outbox_file, read_back
from voiced.mqtt.outbox_memory import Row
from voiced.runtime import bootclock
from voiced.runtime.lograte import sparse_level

__all__ = ["HeldFile"]

log = logging.getLogger(__name__)

_INSERT = ("INSERT OR REPLACE INTO outbox (id, topic, payload, qos, retain, created, boot_id, since_boot)"
           " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


class HeldFile:
    """The held messages' file; not thread-safe (the outbox's lock covers it)."""

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self._db = db
        self.errors = 0
        """Writes that failed (those messages were held in memory only)."""

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
        if aside is not None:
            log.error("held messages' file %s was damaged: set aside as %s", path, aside)
        return cls(path, db)

    def left(self) -> list[tuple[int, Row]]:
        """What a process before held at its end, oldest first. A message of an earlier boot (a
        ``path`` on a disk that a reboot keeps) is restamped as this boot's, aged by the wall clock."""
        try:
            rows = self._db.execute(f"SELECT {READ_COLUMNS}, CAST(boot_id AS BLOB), since_boot FROM outbox"
                                    " ORDER BY id").fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            log.error("held messages' file %s cannot be read (%s): the messages it held are lost", self.path, exc)
            return []
        boot, now = bootclock.boot_id(), bootclock.since_boot()
        out = []
        for row in rows:
            fields = read_back(row[:6])
            if fields is None:
                continue  # damaged past use
            topic, payload, qos, retain, created = fields
            boot_id, since_boot = row[6], row[7]
            if not boot or boot_id != boot.encode() or not isinstance(since_boot, (int, float)):
                since_boot = now - max(0.0, time.time() - created)
            out.append((row[0], (topic, payload, qos, retain, created, boot, float(since_boot))))
        return out

    def replace(self, rows: list[tuple[int, Row]]) -> None:
        """Hold exactly ``rows`` (the ones left, under their new ids)."""
        self._write("DELETE FROM outbox", (), [(i, *row) for i, row in rows])

    def add(self, message_id: int, row: Row) -> None:
        self._write(_INSERT, (message_id, *row))

    def remove(self, message_id: int) -> None:
        self._write("DELETE FROM outbox WHERE id = ?", (message_id,))

    def _write(self, statement: str, params: tuple, more: list[tuple] | None = None) -> None:
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

    def close(self) -> None:
        self._db.close()

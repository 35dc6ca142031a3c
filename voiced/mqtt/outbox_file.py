"""The outbox's SQLite file: opened in WAL mode, its schema brought up to date, a corrupt file
set aside so the daemon still starts, and its messages taken up (renumbered when the file could
only be opened late).

An SD card that lost power at the wrong moment, or began to fail, can leave a file SQLite no
longer reads. Refusing to start would lose every message to come and leave the device in a
restart loop until someone deletes the file by hand; instead the file is renamed to
``NAME.corrupt-YYYYmmddTHHMMSS`` (with its ``-wal`` and ``-shm``) and kept, and a new outbox
begins with the messages SQLite can still read from it (those on damaged pages are lost). Only
the newest ``KEEP_SET_ASIDE`` such copies are kept: a failing card damages the file again and
again, and each copy (up to the outbox's bytes and its WAL) would otherwise fill the disk.

A message's wall-clock time of append is kept twice: ``created`` as the clock read then, and
``synced_created`` only when the clock was known to be right (synchronized by NTP, see
:func:`wall_clock_synced`), NULL otherwise. A Pi has no real-time clock: until NTP answers its
clock reads 1970 or the last shutdown's time, and a message stamped then would look weeks old at
the next boot. Only ``synced_created`` may age a message across a reboot.

A file that cannot be opened because its disk is full or mounted read-only (what the kernel
does to an SD card that reports errors) raises :class:`DiskUnavailable` (the outbox then works
from memory until the disk takes writes); any other path that cannot be opened (permissions, a
directory) is a configuration error. Nothing is moved in either case.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import glob
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from voiced.errors import ConfigError
from voiced.runtime import bootclock

__all__ = ["DiskProblem", "DiskUnavailable", "KEEP_SET_ASIDE", "READ_COLUMNS", "damaged", "delete_set_aside",
           "disk_state", "disk_unavailable", "open_outbox_file", "read_back", "synced_stamp", "take_up",
           "wall_clock_synced"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    topic   TEXT    NOT NULL,
    payload BLOB    NOT NULL,
    qos     INTEGER NOT NULL,
    retain  INTEGER NOT NULL,
    created REAL    NOT NULL,
    boot_id TEXT    NOT NULL DEFAULT '',
    since_boot REAL NOT NULL DEFAULT 0,
    synced_created REAL DEFAULT NULL
)
"""
_BOOT_COLUMNS = ("ALTER TABLE outbox ADD COLUMN boot_id TEXT NOT NULL DEFAULT ''",
                 "ALTER TABLE outbox ADD COLUMN since_boot REAL NOT NULL DEFAULT 0")
"""An outbox written before messages carried their boot: its rows get '' (not of this boot)."""
_SYNCED_COLUMN = "ALTER TABLE outbox ADD COLUMN synced_created REAL DEFAULT NULL"
"""An outbox written before messages said whether their clock was right: its rows get NULL (not known
right, so never aged across a reboot)."""
_READ_NAMES = ("id", "topic", "payload", "qos", "retain", "created")
"""The columns of ``READ_COLUMNS``, in the table's order: an outbox from before messages carried their boot."""
_BOOT_NAMES = (*_READ_NAMES, "boot_id", "since_boot")
"""The columns of an outbox from before messages said whether their clock was right."""
_ALL_NAMES = (*_BOOT_NAMES, "synced_created")
"""The table's columns today, in order."""
_COLUMNS = ", ".join(_ALL_NAMES)
_PLACES = ", ".join("?" * len(_ALL_NAMES))
_SEQUENCE_NAMES = ("name", "seq")
"""The columns of SQLite's own sqlite_sequence (AUTOINCREMENT's last ids), which ``take_up`` reads."""
READ_COLUMNS = "id, CAST(topic AS BLOB), CAST(payload AS BLOB), qos, retain, created"
"""What ``read_back`` takes: text read as bytes, so a damaged one cannot stop the read."""
_LAST_ID = 2**63 - 1
"""SQLite's largest rowid."""
_COMPANIONS = ("-wal", "-shm", "-journal")
"""SQLite's files beside the database (WAL mode; the rollback journal the held messages' file
keeps): they belong to it and go aside with it."""
_ROOM_NEEDED = 256 * 1024
"""Free bytes below which a failed open is put down to a full disk: opening in WAL mode writes
the -shm index (32 KiB) and the first -wal frames."""
KEEP_SET_ASIDE = 3
"""Corrupt copies of an outbox kept (the newest); older ones are deleted when another is set aside."""
_CORRUPT = ".corrupt-"
"""What ``_set_aside`` puts between the outbox's name and the time in a corrupt copy's name."""
_TIME_ERROR = 5
"""What adjtimex(2) returns while the kernel holds the clock unsynchronized (STA_UNSYNC): from boot
until an NTP client (systemd-timesyncd, chrony with ``rtcsync``, ntpd) sets it, and again once none
has for hours."""
_TIMEX_BYTES = 512
"""Room for the kernel's struct timex (208 bytes on 64-bit Linux), which adjtimex(2) fills."""
_TIMESYNC_FLAG = Path("/run/systemd/timesync/synchronized")
"""Made by systemd-timesyncd at its first synchronization of this boot (/run is emptied at boot)."""


class DiskProblem(StrEnum):
    """Why a disk takes no writes."""

    FULL = "full"
    READ_ONLY = "read-only"


class DiskUnavailable(Exception):
    """The outbox file cannot be opened because its disk is full or read-only."""


def open_outbox_file(path: Path, fsync: bool,
                     damage: BaseException | None = None) -> tuple[sqlite3.Connection, Path | None]:
    """The connection to the outbox at ``path`` (created with its directory), and where a corrupt
    file found there was set aside (None if there was none). ``damage``: what reading the file
    raised while it was open (SQLite's check at opening may not see it): it is set aside at once.
    ConfigError names the path when it cannot be opened at all; DiskUnavailable when a full or
    read-only disk is why."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if damage is not None:
            return _replace_damaged(path, fsync, damage)
        try:
            return _open(path, fsync), None
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if not damaged(exc):
                raise  # cannot open, read-only, disk full, locked: the file may be fine
            return _replace_damaged(path, fsync, exc)
    except (OSError, sqlite3.Error) as exc:
        why = disk_unavailable(path, exc)
        if why:
            raise DiskUnavailable(f"cannot open {path}: {exc} (the disk is {why})") from None
        raise ConfigError("outbox.path", f"cannot open {path}: {exc}", str(path)) from None


def _replace_damaged(path: Path, fsync: bool, exc: BaseException) -> tuple[sqlite3.Connection, Path]:
    """Set the damaged file aside and open a new one holding what can be read of it."""
    aside = _set_aside(path)
    _prune_set_aside(path, aside)  # first: the room the old copies take may be what the new file needs
    rows = _salvage(aside)
    db = _open(path, fsync)
    try:
        with db:
            db.executemany(f"INSERT INTO outbox ({_COLUMNS}) VALUES ({_PLACES})", rows)
    except BaseException:
        db.close()
        raise
    log.error("outbox %s is corrupt (%s): moved to %s; a new outbox begins with %s", path, exc, aside,
              f"the {len(rows)} messages SQLite could still read from it" if rows else "none of its messages")
    return db, aside


def damaged(exc: BaseException) -> bool:
    """Whether ``exc``, raised by opening or reading the outbox, comes of what the file holds (not of
    the disk, permissions or another process)."""
    if isinstance(exc, UnicodeDecodeError) or "Could not decode to UTF-8" in str(exc):
        return True  # its schema's text damaged
    if "unsupported file format" in str(exc):
        return True  # the header's schema format number damaged (only SQLite's own 1-4 are read)
    name = getattr(exc, "sqlite_errorname", None) or ""
    # a bare DatabaseError: what quick_check found (raised by _open)
    return name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB" or type(exc) is sqlite3.DatabaseError


def _salvage(aside: Path) -> list[tuple]:
    """The messages of a corrupt outbox that SQLite can still read, oldest first: read in id order
    up to a damaged page, then on from the first id past it (the table's tree leads to the leaf
    that holds an id; leaves hold ids in order, so that id is found by stepping 1, 2, 4, ...
    forward to a readable one and halving back)."""
    try:
        db = sqlite3.connect(f"{aside.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    rows: list[tuple] = []
    try:
        # by position, not by name: a column whose name a bad byte changed still holds its values
        names = ['"' + row[1].replace('"', '""') + '"' for row in db.execute("PRAGMA table_info(outbox)")]
        if len(names) not in (len(_READ_NAMES), len(_BOOT_NAMES), len(_ALL_NAMES)):  # the fewer: written before
            return []
        key, topic, payload, qos, retain, created = names[:6]
        boot = f"CAST({names[6]} AS BLOB), {names[7]}" if len(names) > len(_READ_NAMES) else "'', 0"
        synced = names[8] if len(names) == len(_ALL_NAMES) else "NULL"
        select = (f"SELECT {key}, CAST({topic} AS BLOB), CAST({payload} AS BLOB), {qos}, {retain}, {created},"
                  f" {boot}, {synced} FROM outbox WHERE {key} >= ? ORDER BY {key}")

        def readable(message_id: int) -> bool:  # the first message from this id on, as the loop reads it
            try:
                db.execute(f"{select} LIMIT 1", (message_id,)).fetchone()
            except (sqlite3.Error, UnicodeDecodeError):
                return False
            return True

        after = 1
        while after <= _LAST_ID:
            try:
                for row in db.execute(select, (after,)):
                    if not isinstance(row[0], int) or row[0] < after:
                        continue  # an id damaged out of order (a page cut short reads as 0s): on, not back
                    fields = read_back(row[:6])
                    if fields is not None:  # a row damaged past use is left behind
                        boot_id, since_boot, synced_created = row[6:]
                        rows.append((row[0], *fields, _text(boot_id), since_boot if _number(since_boot) else 0.0,
                                     synced_created if _number(synced_created) else None))
                    after = row[0] + 1
                break  # the end of the table
            except (sqlite3.Error, UnicodeDecodeError):  # a damaged page, or a topic no longer UTF-8
                bad, step = after, 1
                while bad + step <= _LAST_ID and not readable(bad + step):
                    bad, step = bad + step, step * 2
                good = min(bad + step, _LAST_ID + 1)
                while good - bad > 1:
                    middle = (bad + good) // 2
                    bad, good = (bad, middle) if readable(middle) else (middle, good)
                after = good
    except (sqlite3.Error, UnicodeDecodeError):
        pass  # not even the table's description reads: nothing to keep
    finally:
        db.close()
    return rows


def _text(value: object) -> str:
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else value if isinstance(value, str) else ""
    except UnicodeDecodeError:
        return ""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_back(row: tuple) -> tuple[str, bytes, int, bool, float] | None:
    """Topic, payload, QoS, retain and creation time of a row read with ``READ_COLUMNS``, or None
    when the disk damaged it past use (a topic no longer UTF-8, a field of the wrong type): such a
    row must be dropped, or it would stop every message after it."""
    _, topic, payload, qos, retain, created = row
    if not (isinstance(topic, bytes) and isinstance(payload, bytes) and qos in (0, 1, 2)
            and isinstance(retain, int) and _number(created)):
        return None
    try:
        return topic.decode("utf-8"), payload, int(qos), bool(retain), float(created)
    except UnicodeDecodeError:
        return None


def take_up(path: Path, db: sqlite3.Connection, taken: int) -> tuple[int, int, int]:
    """Messages, payload bytes and the largest id ever given in the outbox ``db`` (at ``path``).

    ``taken``: ids 1..taken were given while the file could not be opened, to messages held in
    memory and handed out already perhaps; the file's messages then move past them, in their
    order, so that "every id after the last one handed out" finds them. Closes ``db`` and raises
    DiskUnavailable or ConfigError when it cannot."""
    try:
        count, size, top = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0), COALESCE(MAX(id), 0) FROM outbox").fetchone()
        seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
        top = max(top, seq[0] if seq else 0)
        if count and taken:
            shift = top + taken + 1  # every id moves above both the file's and those taken
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE outbox SET id = id + ?", (shift,))
            db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'outbox'", (top + shift,))
            db.execute("COMMIT")
            top += shift
    except sqlite3.Error as exc:
        db.close()
        why = disk_unavailable(path, exc)
        if why:
            raise DiskUnavailable(f"cannot take up {path}: {exc} (the disk is {why})") from None
        raise ConfigError("outbox.path", f"cannot read {path}: {exc}", str(path)) from None
    return count, size, top


def disk_unavailable(path: Path, exc: BaseException) -> DiskProblem | None:
    """FULL or READ_ONLY when that is why ``exc`` was raised by opening or writing the outbox at
    ``path``; None for any other cause."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskProblem.FULL
    if isinstance(exc, OSError) and exc.errno == errno.EROFS:
        return DiskProblem.READ_ONLY
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return DiskProblem.FULL
    return disk_state(path)  # SQLite reports either as an I/O error or "unable to open database file"


def disk_state(path: Path) -> DiskProblem | None:
    """FULL or READ_ONLY when the disk that holds (or would hold) ``path`` takes no writes, else None."""
    folder = next((p for p in (path.parent, *path.parents) if p.is_dir()), None)
    if folder is None:
        return None
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return DiskProblem.READ_ONLY
        return DiskProblem.FULL if shutil.disk_usage(folder).free < _ROOM_NEEDED else None
    except OSError:
        return None


def _open(path: Path, fsync: bool) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        # every page of the tables and their indexes; the outbox is small, so this is quick
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"quick_check: {'; '.join(problems[:3])}")
        db.execute(_SCHEMA)
        columns = tuple(row[1] for row in db.execute("PRAGMA table_info(outbox)"))
        if columns == _READ_NAMES:  # written before messages carried their boot
            for statement in (*_BOOT_COLUMNS, _SYNCED_COLUMN):
                db.execute(statement)
        elif columns == _BOOT_NAMES:  # written before messages said whether their clock was right
            db.execute(_SYNCED_COLUMN)
        elif columns != _ALL_NAMES:
            # a column name changed by a bad byte is valid SQL to SQLite's check: every read would fail
            raise sqlite3.DatabaseError(f"the outbox table's columns are {', '.join(columns)}: its schema is damaged")
        sequence = tuple(row[1] for row in db.execute("PRAGMA table_info(sqlite_sequence)"))
        if sequence not in ((), _SEQUENCE_NAMES):  # () before the first message
            raise sqlite3.DatabaseError(f"sqlite_sequence's columns are {', '.join(sequence)}: its schema is damaged")
    except BaseException:
        db.close()
        raise
    return db


def delete_set_aside(aside: Path) -> None:
    """Delete a file ``open_outbox_file`` set aside, with its companions."""
    for name in (aside.name, *(aside.name + suffix for suffix in _COMPANIONS)):
        aside.with_name(name).unlink(missing_ok=True)


def _set_aside(path: Path) -> Path:
    stamp = f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    aside, n = path.with_name(stamp), 1
    while aside.exists():  # one set aside earlier in the same second is kept too
        n += 1
        aside = path.with_name(f"{stamp}-{n}")
    path.rename(aside)
    for suffix in _COMPANIONS:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            companion.rename(aside.with_name(aside.name + suffix))
    return aside


def _prune_set_aside(path: Path, newest: Path) -> None:
    """Delete all but the newest ``KEEP_SET_ASIDE`` corrupt copies of the outbox at ``path`` (``newest``,
    just set aside, always stays), with their companions; logged. Newest by when they were set aside
    (the rename's change time): their names' times are those of a clock NTP may have moved since."""
    def set_aside_at(aside: Path) -> tuple[int, str, int]:
        # the change time ticks coarsely: copies set aside within a tick go by their names' time and number
        stamp, _, number = aside.name.removeprefix(path.name + _CORRUPT).partition("-")
        try:
            changed = aside.stat().st_ctime_ns
        except OSError:
            changed = 0  # gone meanwhile: first to go
        return changed, stamp, int(number) if number.isdigit() else 1

    copies = [p for p in path.parent.glob(f"{glob.escape(path.name)}{_CORRUPT}*")
              if p != newest and not p.name.endswith(_COMPANIONS)]
    copies.sort(key=set_aside_at, reverse=True)
    for aside in copies[KEEP_SET_ASIDE - 1:]:
        try:
            delete_set_aside(aside)
        except OSError as exc:
            log.warning("cannot delete %s, an older corrupt copy of outbox %s: %s", aside, path, exc)
            continue
        log.warning("outbox %s: deleted %s, an older corrupt copy (the newest %d are kept)", path, aside,
                    KEEP_SET_ASIDE)


def wall_clock_synced() -> bool:
    """Whether the wall clock is known right now: the kernel holds it synchronized (adjtimex(2), what
    ``timedatectl`` shows as "System clock synchronized"), or where that cannot be asked,
    systemd-timesyncd has synchronized it this boot."""
    adjtimex = _adjtimex()
    if adjtimex is not None:
        state = adjtimex(ctypes.create_string_buffer(_TIMEX_BYTES))  # all zero (modes 0): only reads
        if state >= 0:
            return state != _TIME_ERROR
    return _TIMESYNC_FLAG.exists()


def synced_stamp(since_boot: float, now: float) -> float | None:
    """The wall-clock time of the moment ``since_boot`` of this boot, worked out from ``now`` (the wall
    clock's reading) and the boot clock, when the wall clock is known right (the ``synced_created`` of a
    message appended then); None when it is not."""
    if not wall_clock_synced():
        return None
    return now - max(0.0, bootclock.since_boot() - since_boot)


@functools.cache
def _adjtimex() -> Callable[[ctypes.Array[ctypes.c_char]], int] | None:
    try:
        return ctypes.CDLL(None).adjtimex  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not Linux
        return None

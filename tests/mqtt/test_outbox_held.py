"""Messages held in memory while the outbox's disk is full, kept in a file on another (RAM-backed) disk
so that a restart of the daemon does not lose them. Real parts: a small tmpfs filled to the last block
(root only: CI runs as root), a real process killed with SIGKILL while it holds messages."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.disk_fixtures import SmallDisk
from tests.mqtt.test_outbox import FakeClock, clock, drain, outbox_from_before, reboot  # noqa: F401 (a fixture)
from voiced.bench.smalldisk import mount_small
from voiced.errors import ConfigError
from voiced.mqtt.outbox import SPILLED, Outbox, OutboxConfig
from voiced.mqtt import outbox_held
from voiced.mqtt.outbox_held import HeldFile
from voiced.runtime import bootclock

_HOLDER = """
import sys, time
from voiced.mqtt.outbox import SPILLED, Outbox, OutboxConfig
box = Outbox(OutboxConfig(path=sys.argv[1], held_path=sys.argv[2]))
assert [box.append("t", b"held %d" % n) for n in range(5)] == [SPILLED] * 5
print("holding", flush=True)
time.sleep(120)
"""


def in_file(held: Path) -> tuple[int, int]:
    """Messages and payload bytes in the held file, read by a connection of its own (closed at once)."""
    db = sqlite3.connect(held)
    try:
        return db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox").fetchone()
    finally:
        db.close()


def killed_while_holding(path: str, held: Path) -> None:
    """A daemon's outbox that held five messages in memory (its disk full) when it was SIGKILLed."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, path, str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "holding\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def from_before(small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> str:
    """An outbox file on ``small_disk`` holding b"old 0" from a run before; reopened at every operation."""
    return outbox_from_before(small_disk, monkeypatch)


@pytest.mark.parametrize("disk_at_restart", ["free", "still full"])
def test_messages_held_when_the_daemon_is_killed_are_delivered_after_the_restart(
        tmp_path: Path, small_disk: SmallDisk, from_before: str, disk_at_restart: str) -> None:
    """The SD card full, the broker away, and the daemon killed (the watchdog, a crash): what it held in
    memory comes back from the runtime directory. The killed process gave its messages ids the file had
    given before (it never could open the file): they are renumbered, not lost to a clash."""
    held = tmp_path / "run" / "outbox-held.sqlite3"
    small_disk.fill()
    killed_while_holding(from_before, held)
    if disk_at_restart == "free":
        small_disk.free()
    box = Outbox(OutboxConfig(path=from_before, held_path=str(held)))
    assert box.held_in_memory == 5
    if disk_at_restart == "still full":
        assert [m.payload for m in box.peek()] == [b"held %d" % n for n in range(5)]  # from memory at once
        small_disk.free()
    got = drain(box)
    assert sorted(got) == [b"held %d" % n for n in range(5)] + [b"old 0"]  # every one, once
    assert [p for p in got if p.startswith(b"held")] == [b"held %d" % n for n in range(5)]  # in order
    assert box.held_in_memory == 0 and len(box) == 0
    box.close()
    with Outbox(OutboxConfig(path=from_before, held_path=str(held))) as again:
        assert again.held_in_memory == 0 and again.peek() == []  # delivered: not taken up a second time


def test_held_messages_that_reach_the_file_leave_the_runtime_directory(
        tmp_path: Path, small_disk: SmallDisk, from_before: str) -> None:
    """Once the disk has room they are in the outbox file, under the same ids, and only there: a restart
    then hands each out once."""
    held = tmp_path / "run" / "outbox-held.sqlite3"
    box = Outbox(OutboxConfig(path=from_before, held_path=str(held)))
    small_disk.fill()
    assert [box.append("t", b"new %d" % n) for n in range(3)] == [SPILLED] * 3
    handed = box.peek()
    small_disk.free()
    assert box.peek() == handed and box.held_in_memory == 0  # moved to the file
    box.close()
    with Outbox(OutboxConfig(path=from_before, held_path=str(held))) as again:
        assert again.held_in_memory == 0 and again.peek() == handed


def test_a_daemon_stopped_on_a_full_disk_keeps_what_it_holds_for_the_next_start(
        tmp_path: Path, small_disk: SmallDisk, from_before: str, caplog: pytest.LogCaptureFixture) -> None:
    held = str(tmp_path / "run" / "outbox-held.sqlite3")
    small_disk.fill()
    box = Outbox(OutboxConfig(path=from_before, held_path=held))
    box.append("t", b"a")
    box.append("t", b"b")
    [a, _] = box.peek()
    box.ack(a.id)  # delivered before the stop: not kept
    with caplog.at_level("WARNING", logger="voiced.mqtt.outbox"):
        box.close()
    assert "1 messages held stay in" in caplog.text and "lost" not in caplog.text.split("stay in")[0]
    with Outbox(OutboxConfig(path=from_before, held_path=held)) as again:
        assert [m.payload for m in again.peek()] == [b"b"]
        small_disk.free()
        assert drain(again) == [b"b", b"old 0"]


def test_held_messages_keep_the_bounds_when_taken_up(tmp_path: Path, small_disk: SmallDisk, from_before: str) -> None:
    held = str(tmp_path / "run" / "outbox-held.sqlite3")
    small_disk.fill()
    killed_while_holding(from_before, Path(held))
    with Outbox(OutboxConfig(path=from_before, held_path=held, max_messages=3)) as box:
        # the file's "old 0" counts once the file opens; until then the three newest held stay
        assert [m.payload for m in box.peek()] == [b"held 2", b"held 3", b"held 4"]
        assert box.stats()["dropped_max_messages"] == 2
        small_disk.free()


def test_a_runtime_directory_that_takes_no_writes_leaves_messages_held_in_memory(
        tmp_path: Path, small_disk: SmallDisk, caplog: pytest.LogCaptureFixture) -> None:
    """The file beside memory only adds to what survives: when it cannot be written (here on the same full
    disk, or at a path that cannot exist) delivery goes on from memory."""
    path = str(small_disk.path / "outbox.sqlite3")
    box = Outbox(OutboxConfig(path=path, held_path=str(small_disk.path / "held.sqlite3")))
    small_disk.fill()
    with caplog.at_level("ERROR", logger="voiced.mqtt.outbox_held"):
        assert [box.append("t", b"m %d" % n) for n in range(40)] == [SPILLED] * 40
    assert "cannot be written" in caplog.text and box.held_in_memory == 40
    assert [m.payload for m in box.peek(limit=100)] == [b"m %d" % n for n in range(40)]
    small_disk.free()
    assert len(drain(box)) == 40
    box.close()
    (tmp_path / "a-file").write_text("")
    caplog.clear()
    with caplog.at_level("WARNING", logger="voiced.mqtt.outbox_held"):
        box = Outbox(OutboxConfig(path=path, held_path=str(tmp_path / "a-file" / "held.sqlite3")))
    assert "kept in memory only" in caplog.text
    small_disk.fill()
    assert box.append("t", b"still held") == SPILLED and [m.payload for m in box.peek()] == [b"still held"]
    small_disk.free()
    box.close()


def test_the_held_path_must_be_another_file(tmp_path: Path) -> None:
    path = str(tmp_path / "outbox.sqlite3")
    with pytest.raises(ConfigError, match="held_path"):
        OutboxConfig(path=path, held_path=path)


def test_the_held_file_takes_at_most_a_quarter_of_its_ram_disk(tmp_path: Path, small_disk: SmallDisk,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """/run is RAM the whole system writes to: a disk full for long must not let voiced fill it. Past a
    quarter of its size the messages are held in memory only, and all are still delivered."""
    run = tmp_path / "run"
    if not mount_small(run, "4m"):
        pytest.skip("mounting a second small tmpfs needs root (CI runs as root)")
    try:
        held = run / "outbox-held.sqlite3"
        box = Outbox(OutboxConfig(path=str(small_disk.path / "outbox.sqlite3"), held_path=str(held)))
        small_disk.fill()
        payload = b"x" * 10_000
        with caplog.at_level("WARNING", logger="voiced.mqtt.outbox_held"):
            assert [box.append("t", payload + b"%03d" % n) for n in range(200)] == [SPILLED] * 200  # 2 MB
        assert "held in memory only" in caplog.text
        assert shutil.disk_usage(run).free > 2 * 1024 * 1024  # most of the RAM disk is left to the system
        count, size = in_file(held)
        assert 0 < count < 200 and size <= 1024 * 1024  # a quarter of 4 MB, the oldest first
        assert box.held_in_memory == 200
        small_disk.free()
        assert len(drain(box)) == 200
        assert in_file(held) == (0, 0)
        box.close()
    finally:
        subprocess.run(["umount", "--lazy", str(run)], capture_output=True)


def test_a_held_file_that_is_no_database_does_not_stop_the_outbox(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    held = tmp_path / "run" / "outbox-held.sqlite3"
    held.parent.mkdir()
    held.write_bytes(b"not sqlite " * 1000)
    with caplog.at_level("ERROR"):
        box = Outbox(OutboxConfig(path=str(tmp_path / "state" / "outbox.sqlite3"), held_path=str(held)))
    assert "was damaged" in caplog.text and box.held_in_memory == 0
    assert box.append("t", b"x") != SPILLED and [m.payload for m in box.peek()] == [b"x"]
    assert sorted(p.name for p in held.parent.iterdir()) == [held.name]  # no damaged copy left in RAM
    box.close()


def test_a_message_moved_to_the_file_before_a_kill_is_sent_once(tmp_path: Path) -> None:
    """A daemon killed after moving held messages to the outbox file (its disk free again) and before
    deleting them from the held file leaves them in both files: each is sent once. A held message
    under an id the file gave to another one is still taken up."""
    path, held = tmp_path / "state" / "outbox.sqlite3", tmp_path / "run" / "outbox-held.sqlite3"
    with Outbox(OutboxConfig(path=str(path))) as box:
        assert [box.append("t", b"moved %d" % n) for n in range(3)] == [1, 2, 3]
    db = sqlite3.connect(path)
    rows = db.execute("SELECT id, topic, payload, qos, retain, created, boot_id, since_boot FROM outbox").fetchall()
    db.close()
    file = HeldFile.open(held)
    assert file is not None
    for message_id, topic, payload, qos, retain, created, boot, since_boot in rows[1:]:  # 2 and 3: moved
        file.add(message_id, (topic, payload, qos, bool(retain), created, boot, since_boot))
    for message_id, payload in ((1, b"another"), (4, b"held")):
        file.add(message_id, ("t", payload, 1, False, time.time(), bootclock.boot_id(), bootclock.since_boot()))
    file.close()
    box = Outbox(OutboxConfig(path=str(path), held_path=str(held)))
    assert drain(box) == [b"moved 0", b"moved 1", b"moved 2", b"another", b"held"]
    assert in_file(held) == (0, 0)
    box.close()


def test_held_messages_of_a_boot_before_ntp_answered_are_not_aged_after_a_reboot(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A held file on a disk that a reboot keeps: a message held while the clock read 1970 (a Pi
    before NTP answers) is taken up after the reboot, not dropped as decades old; one held while the
    clock was right still ages by it."""
    monkeypatch.setattr(outbox_held, "time", clock)
    path, held = tmp_path / "state" / "outbox.sqlite3", tmp_path / "keep" / "outbox-held.sqlite3"
    file = HeldFile.open(held)
    assert file is not None
    week = 7 * 86400
    for message_id, now, synced in ((1, 40.0, False), (2, 1_800_000_000.0 - week - 60, True)):
        clock.now, clock.synced = now, synced
        file.add(message_id, ("t", b"held %d" % message_id, 1, False, now, "boot-1", clock.boot))
    file.close()
    reboot(clock, monkeypatch, "boot-2", 1_800_000_000.0, synced=True)
    with Outbox(OutboxConfig(path=str(path), held_path=str(held))) as box:
        assert [m.payload for m in box.peek()] == [b"held 1"]
        assert box.stats()["dropped_max_age"] == 1

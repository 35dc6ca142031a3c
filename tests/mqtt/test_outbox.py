"""The SQLite outbox on its own: order, acknowledgement, persistence, bounds, threads."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

import voiced.mqtt.outbox as outbox_module
from voiced.mqtt import outbox_file
from voiced.runtime import bootclock
from voiced.errors import ConfigError
from voiced.mqtt.outbox import SPILLED, Outbox, OutboxConfig

from tests.disk_fixtures import SmallDisk


def open_outbox(tmp_path: Path, **bounds: float) -> Outbox:
    return Outbox(OutboxConfig(str(tmp_path / "state" / "outbox.sqlite"), **bounds))  # type: ignore[arg-type]


def test_messages_come_back_in_order_with_their_fields(tmp_path: Path) -> None:
    with open_outbox(tmp_path) as box:
        ids = [box.append(f"t/{i}", bytes([i]) * i, qos=1, retain=i % 2 == 0) for i in range(1, 6)]
        assert ids == sorted(ids)
        got = box.peek()
        assert [m.topic for m in got] == [f"t/{i}" for i in range(1, 6)]
        assert [m.payload for m in got] == [bytes([i]) * i for i in range(1, 6)]
        assert [m.retain for m in got] == [False, True, False, True, False]
        assert all(m.qos == 1 for m in got)
        assert [m.id for m in box.peek(after_id=ids[2])] == ids[3:]
        assert [m.id for m in box.peek(limit=2)] == ids[:2]
        assert len(box) == 5 and box.size_bytes == 15


def test_ack_deletes_and_ids_never_repeat(tmp_path: Path) -> None:
    with open_outbox(tmp_path) as box:
        first = box.append("a", b"1")
        assert first is not None
        assert box.ack(first) is True
        assert box.ack(first) is False  # already gone
        assert len(box) == 0
        # An empty table must not hand out the same id again: the client sends "after the last id".
        second = box.append("b", b"2")
        assert second is not None and second > first
        assert box.last_id() == second


def test_waiting_messages_survive_a_reopen(tmp_path: Path) -> None:
    box = open_outbox(tmp_path)
    for i in range(10):
        box.append("t", str(i).encode())
    for m in box.peek(limit=4):
        box.ack(m.id)
    box.close()
    assert (tmp_path / "state" / "outbox.sqlite").exists()
    with open_outbox(tmp_path) as again:
        assert [m.payload for m in again.peek()] == [str(i).encode() for i in range(4, 10)]
        assert again.stats()["queued"] == 6
        mode = sqlite3.connect(tmp_path / "state" / "outbox.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_max_messages_drops_the_oldest_and_counts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with open_outbox(tmp_path, max_messages=3) as box:
        for i in range(5):
            box.append("t", str(i).encode())
        assert [m.payload for m in box.peek()] == [b"2", b"3", b"4"]
        assert box.stats()["dropped_max_messages"] == 2
    assert "max_messages" in caplog.text


def test_max_bytes_drops_the_oldest_and_refuses_a_message_larger_than_the_outbox(tmp_path: Path) -> None:
    with open_outbox(tmp_path, max_bytes=10) as box:
        box.append("t", b"aaaa")
        box.append("t", b"bbbb")
        box.append("t", b"cccc")  # 12 bytes would be too many: "aaaa" goes
        assert [m.payload for m in box.peek()] == [b"bbbb", b"cccc"]
        assert box.append("t", b"x" * 11) is None
        assert [m.payload for m in box.peek()] == [b"bbbb", b"cccc"]
        stats = box.stats()
        assert stats["dropped_max_bytes"] == 2
        assert stats["queued_bytes"] == 8


class FakeClock:
    """The wall clock (``time.time``), whether it is synchronized (``outbox_file.wall_clock_synced``) and
    the boot clock (``bootclock.since_boot``), set by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.boot = 500.0
        self.synced = True

    def wall_clock_synced(self) -> bool:
        return self.synced

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.boot += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(outbox_module, "time", fake)
    monkeypatch.setattr(outbox_file, "wall_clock_synced", fake.wall_clock_synced, raising=False)
    monkeypatch.setattr(bootclock, "since_boot", lambda: fake.boot)
    monkeypatch.setattr(bootclock, "boot_id", lambda: "boot-1")
    return fake


def test_max_age_drops_old_messages_before_they_are_sent(tmp_path: Path, clock: FakeClock) -> None:
    with open_outbox(tmp_path, max_age_s=60) as box:
        box.append("t", b"old")
        clock.advance(30)
        box.append("t", b"newer")
        clock.advance(31)  # "old" is 61 s old now, "newer" 31 s
        assert [m.payload for m in box.peek()] == [b"newer"]
        assert box.stats()["dropped_max_age"] == 1
        assert len(box) == 1


def test_max_age_zero_keeps_everything(tmp_path: Path, clock: FakeClock) -> None:
    with open_outbox(tmp_path, max_age_s=0) as box:
        box.append("t", b"x")
        clock.advance(10 * 365 * 86400)
        assert len(box.peek()) == 1


def test_a_wall_clock_set_forward_does_not_age_messages(tmp_path: Path, clock: FakeClock) -> None:
    """A Pi boots with the last shutdown's time and NTP later moves it by weeks: messages appended
    before that are as old as the boot clock says, not the wall clock."""
    with open_outbox(tmp_path) as box:  # the daemon's 7-day bound
        box.append("t", b"heard before NTP answered")
        clock.now += 30 * 86400  # NTP sets the clock 30 days forward
        clock.boot += 5
        assert [m.payload for m in box.peek()] == [b"heard before NTP answered"]
        clock.advance(7 * 86400)  # really a week later: now it is too old
        assert box.peek() == [] and box.stats()["dropped_max_age"] == 1


def test_after_a_reboot_the_wall_clock_ages_messages(tmp_path: Path, clock: FakeClock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with open_outbox(tmp_path, max_age_s=3600) as box:
        box.append("t", b"a")
        clock.advance(60)
        box.append("t", b"b")
    monkeypatch.setattr(bootclock, "boot_id", lambda: "boot-2")
    clock.boot = 20.0  # a new boot's clock starts again
    clock.now += 3600 - 30  # "a" 3,630 s old by the wall clock, "b" 3,570 s
    with open_outbox(tmp_path, max_age_s=3600) as box:
        assert [m.payload for m in box.peek()] == [b"b"]


def reboot(clock: FakeClock, monkeypatch: pytest.MonkeyPatch, boot_id: str, now: float, synced: bool) -> None:
    """A power cut and a new boot: another boot id, its boot clock from 20 s, the wall clock at ``now``."""
    monkeypatch.setattr(bootclock, "boot_id", lambda: boot_id)
    clock.boot, clock.now, clock.synced = 20.0, now, synced


_NTP_TIME = 1_800_000_000.0
"""The wall clock once NTP has answered (2027)."""


@pytest.mark.parametrize("stored_at", [40.0, _NTP_TIME - 21 * 86400], ids=["1970", "fake-hwclock-3-weeks-behind"])
def test_messages_stored_before_ntp_answered_are_not_dropped_after_a_reboot(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, stored_at: float) -> None:
    """A Pi has no real-time clock: it boots at 1970, or at the time fake-hwclock saved at the last
    shutdown (weeks old for a device put away), until NTP answers. Messages stored then (the broker
    away) must not look weeks old at the next boot, once NTP has set the clock."""
    clock.now, clock.synced = stored_at, False
    with open_outbox(tmp_path) as box:  # the daemon's 7-day bound
        for n in range(3):
            box.append("hermes/intent/HassTurnOn", b'{"n": %d}' % n)
    reboot(clock, monkeypatch, "boot-2", _NTP_TIME + 600, synced=True)  # 10 minutes later, NTP answers
    with open_outbox(tmp_path) as box:
        assert [m.payload for m in box.peek()] == [b'{"n": %d}' % n for n in range(3)]
        assert box.stats()["dropped_max_age"] == 0


def test_a_wall_clock_not_synchronized_now_ages_no_message_of_an_earlier_boot(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock that is wrong now (ahead: a real-time clock set wrong, before NTP corrects it) is no
    measure of age either; once it is synchronized again, the messages age by it."""
    clock.now = _NTP_TIME
    with open_outbox(tmp_path, max_age_s=3600) as box:
        box.append("t", b"stamped right")
    reboot(clock, monkeypatch, "boot-2", _NTP_TIME + 365 * 86400, synced=False)
    with open_outbox(tmp_path, max_age_s=3600) as box:
        assert [m.payload for m in box.peek()] == [b"stamped right"]
        clock.now, clock.synced = _NTP_TIME + 3600 + 1, True  # NTP answers: the message really is an hour old
        assert box.peek() == [] and box.stats()["dropped_max_age"] == 1


def test_a_message_stored_before_ntp_answered_ages_across_a_reboot_once_ntp_answered_in_its_boot(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the clock is synchronized, the boot clock carries it back to the messages of this boot
    stamped before: they are not kept for ever (up to the count and bytes bounds) for want of a stamp."""
    clock.now, clock.synced = 40.0, False
    with open_outbox(tmp_path, max_age_s=3600) as box:
        box.append("t", b"heard at 1970")
        clock.boot += 60
        clock.now, clock.synced = _NTP_TIME, True  # a minute later NTP answers
        assert [m.payload for m in box.peek()] == [b"heard at 1970"]
    reboot(clock, monkeypatch, "boot-2", _NTP_TIME + 3600 - 60 + 1, synced=True)  # an hour after it was heard
    with open_outbox(tmp_path, max_age_s=3600) as box:
        assert box.peek() == [] and box.stats()["dropped_max_age"] == 1


def test_an_outbox_file_of_the_version_before_opens_and_keeps_its_messages(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file written before messages said whether their clock was right opens as it is (the column is
    added); its messages of an earlier boot are not aged, their stamps may be of a clock not yet set."""
    path = tmp_path / "state" / "outbox.sqlite"
    path.parent.mkdir()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL,"
               " qos INTEGER NOT NULL, retain INTEGER NOT NULL, created REAL NOT NULL,"
               " boot_id TEXT NOT NULL DEFAULT '', since_boot REAL NOT NULL DEFAULT 0)")
    db.executemany("INSERT INTO outbox (topic, payload, qos, retain, created, boot_id, since_boot)"
                   " VALUES ('t', ?, 1, 0, 40.0, 'boot-0', 30.0)", [(b"a",), (b"b",)])
    db.commit()
    db.close()
    clock.now = _NTP_TIME
    with open_outbox(tmp_path) as box:
        assert [(m.id, m.payload, m.created) for m in box.peek()] == [(1, b"a", 40.0), (2, b"b", 40.0)]
        assert box.append("t", b"c") == 3
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(outbox)")]
    assert columns[-1] == "synced_created"


def corrupt_copies(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if ".corrupt-" in p.name)


def test_only_the_newest_corrupt_copies_are_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A failing SD card damages the outbox again and again: each copy set aside (up to the outbox's
    16 MB and its WAL) must not stay for ever and fill the disk."""
    path = tmp_path / "state" / "outbox.sqlite"
    path.parent.mkdir()
    for n in range(1, 6):
        path.write_bytes(b"damage %d " % n * 1000)
        with open_outbox(tmp_path) as box:
            aside = box.set_aside
        assert aside is not None
        if n == 1:  # a WAL that went aside with it goes with it
            aside.with_name(aside.name + "-wal").write_bytes(b"wal")
        path.unlink()
    kept = corrupt_copies(path)
    assert sorted(p.read_bytes()[:8] for p in kept) == [b"damage 3", b"damage 4", b"damage 5"]
    assert len(kept) == outbox_file.KEEP_SET_ASIDE
    removed = [r.getMessage() for r in caplog.records if "older corrupt copy" in r.getMessage()]
    assert len(removed) == 2 and all(str(path.parent) in m for m in removed)


def outbox_of_before_boot_clocks(tmp_path: Path, rows: list[tuple[bytes, float]]) -> Path:
    """An outbox file as voiced wrote it before messages carried their boot, holding (payload, created) rows."""
    path = tmp_path / "state" / "outbox.sqlite"
    path.parent.mkdir()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL,"
               " qos INTEGER NOT NULL, retain INTEGER NOT NULL, created REAL NOT NULL)")
    db.executemany("INSERT INTO outbox (topic, payload, qos, retain, created) VALUES ('t', ?, 1, 0, ?)", rows)
    db.commit()
    db.close()
    return path


def test_an_outbox_file_from_before_boot_clocks_keeps_its_messages(tmp_path: Path, clock: FakeClock) -> None:
    outbox_of_before_boot_clocks(tmp_path, [(b"\x01", clock.now - 60)])
    with open_outbox(tmp_path, max_age_s=3600, max_messages=2) as box:
        box.append("t", b"\x02")
        assert [m.payload for m in box.peek()] == [b"\x01", b"\x02"]
        clock.advance(3600 - 30)  # the old row's stamp may be of a clock not yet set: it is not aged
        assert [m.payload for m in box.peek()] == [b"\x01", b"\x02"]
        box.append("t", b"\x03")  # but it keeps the bounds
        assert [m.payload for m in box.peek()] == [b"\x02", b"\x03"]
        assert box.stats()["dropped_max_age"] == 0 and box.stats()["dropped_max_messages"] == 1


def test_concurrent_appends_keep_every_message_once(tmp_path: Path) -> None:
    with open_outbox(tmp_path) as box:
        def writer(n: int) -> None:
            for i in range(200):
                box.append(f"w/{n}", f"{n}:{i}".encode())

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = box.peek(limit=10_000)
        assert len(got) == 800 == len(box)
        for n in range(4):
            mine = [m.payload for m in got if m.topic == f"w/{n}"]
            assert mine == [f"{n}:{i}".encode() for i in range(200)]  # each writer's order kept


@pytest.mark.parametrize(
    ("field", "value"), [("max_messages", 0), ("max_bytes", 0), ("max_age_s", -1.0), ("path", "")]
)
def test_bad_config_names_the_key(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"path": "/tmp/x.sqlite", field: value}
    with pytest.raises(ConfigError) as err:
        OutboxConfig(**kwargs)  # type: ignore[arg-type]
    assert err.value.key == f"outbox.{field}"


def test_unusable_path_is_a_config_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as err:
        Outbox(OutboxConfig(str(blocker / "outbox.sqlite")))
    assert str(blocker) in str(err.value)


def test_a_file_that_is_no_database_is_set_aside_and_a_new_outbox_begins(tmp_path: Path, caplog) -> None:
    path = tmp_path / "state" / "outbox.sqlite"
    path.parent.mkdir()
    garbage = bytes(range(256)) * 32
    path.write_bytes(garbage)
    with open_outbox(tmp_path) as box:
        assert box.set_aside is not None and box.set_aside.read_bytes() == garbage  # kept as it was
        assert box.set_aside.name.startswith("outbox.sqlite.corrupt-")
        assert box.stats()["corrupt_file_set_aside"] == 1
        box.append("t", b"after")
        assert [m.payload for m in box.peek()] == [b"after"]
    assert any(r.levelname == "ERROR" and "is corrupt" in r.getMessage() for r in caplog.records)
    with open_outbox(tmp_path) as box:  # the new file is a good one: nothing more is moved
        assert box.set_aside is None and [m.payload for m in box.peek()] == [b"after"]


def test_two_corrupt_files_set_aside_in_the_same_second_are_both_kept(tmp_path: Path) -> None:
    path = tmp_path / "state" / "outbox.sqlite"
    path.parent.mkdir()
    asides = []
    for garbage in (b"first " * 1000, b"second " * 1000):
        path.write_bytes(garbage)
        with open_outbox(tmp_path) as box:
            asides.append(box.set_aside)
        path.unlink()
    assert len(set(asides)) == 2 and [a.read_bytes()[:6] for a in asides] == [b"first ", b"second"]


def test_an_outbox_damaged_inside_is_set_aside_and_what_can_be_read_is_kept(tmp_path: Path) -> None:
    """Pages of a real outbox overwritten, as a failing SD card leaves them: SQLite's check finds it; the
    new outbox begins with every message on the pages left whole, unchanged and in order."""
    with open_outbox(tmp_path) as box:
        ids = [box.append(f"t/{i}", bytes([i % 256]) * 1000) for i in range(400)]
    path = tmp_path / "state" / "outbox.sqlite"
    with path.open("r+b") as f:
        f.seek(4096 * 3)
        f.write(b"\xff" * 4096 * 20)  # pages of the table itself: the oldest messages'
        f.seek(4096 * 60)
        f.write(b"\xff" * 4096 * 3)  # and a few in the middle
    damaged = path.read_bytes()
    with open_outbox(tmp_path) as box:
        assert box.set_aside is not None and box.set_aside.read_bytes() == damaged  # read, never written
        kept = box.peek(limit=1000)
        assert 250 < len(kept) < 400 and kept[-1].id == ids[-1]  # read past both damaged stretches
        assert [m.id for m in kept] == sorted(m.id for m in kept)
        assert all(m.topic == f"t/{ids.index(m.id)}" and m.payload == bytes([ids.index(m.id) % 256]) * 1000
                   for m in kept)
        assert box.append("t", b"x") == ids[-1] + 1  # ids go on from the old ones


def test_an_outbox_that_goes_bad_while_open_is_set_aside_and_delivery_goes_on(tmp_path: Path) -> None:
    """A failing SD card damages pages under the running daemon; SQLite meets it at the next read. The
    file goes aside, what can be read of it stays under the same ids (some are in flight), and the
    outbox goes on instead of failing every read from then on."""
    with open_outbox(tmp_path) as box:
        ids = [box.append(f"t/{i}", bytes([i % 256]) * 1000) for i in range(400)]
        in_flight = box.peek(limit=10)
        path = tmp_path / "state" / "outbox.sqlite"
        other = sqlite3.connect(path)
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page into the file itself
        with path.open("r+b") as f:
            f.seek(4096 * 40)
            f.write(b"\xff" * 4096 * 5)
        other.execute("UPDATE sqlite_sequence SET seq = seq")  # a write: the outbox's page cache is stale
        other.commit()
        other.close()
        rest = box.peek(after_id=in_flight[-1].id, limit=1000)
        assert box.set_aside is not None and box.stats()["corrupt_file_set_aside"] == 1
        assert 300 < len(rest) < 390 and rest[-1].id == ids[-1]
        assert all(m.payload == bytes([ids.index(m.id) % 256]) * 1000 for m in rest)
        assert box.ack(in_flight[0].id) is True  # acknowledged under the id it was handed out with
        assert box.append("t", b"after") == ids[-1] + 1


def test_an_outbox_whose_sequence_table_lost_a_column_name_is_set_aside(tmp_path: Path) -> None:
    """Found by fuzzing (seed 21): sqlite_sequence's "name" changed by one byte made reading the last
    id given ("no such column: name") a ConfigError that stopped the start."""
    with open_outbox(tmp_path) as box:
        box.append("t", b"x")
    path = tmp_path / "state" / "outbox.sqlite"
    data = path.read_bytes()
    at = data.index(b"sqlite_sequence(name,seq)") + len("sqlite_sequence(")
    path.write_bytes(data[:at] + b"q" + data[at + 1:])
    with open_outbox(tmp_path) as box:
        assert box.set_aside is not None
        assert box.append("t", b"y") == 2 and drain(box) == [b"x", b"y"]  # ids go on from the old ones


def test_an_outbox_whose_schema_format_number_is_damaged_is_set_aside(tmp_path: Path) -> None:
    """Found by fuzzing (seed 17): the header's schema format number (bytes 44-47, 1-4) damaged made
    SQLite answer "unsupported file format", which was taken for a path that cannot be opened and
    stopped the start."""
    with open_outbox(tmp_path) as box:
        box.append("t", b"x")
    path = tmp_path / "state" / "outbox.sqlite"
    data = bytearray(path.read_bytes())
    data[47] = 47
    path.write_bytes(bytes(data))
    with open_outbox(tmp_path) as box:
        assert box.set_aside is not None and box.set_aside.read_bytes() == bytes(data)
        assert box.append("t", b"y") is not None and drain(box) == [b"y"]


def test_a_file_cut_short_mid_page_does_not_stop_the_start(tmp_path: Path) -> None:
    """Found by fuzzing (seed 17): a file cut short inside a page of the table, with its header's
    change counter damaged (so SQLite takes the size from the file, not the header), reads the cut
    page's messages with id 0 and then fails; reading on from "the last id + 1" went back to the
    beginning for ever and the daemon never started. The messages before the cut are kept, once each."""
    from voiced.bench.fuzz_files import outbox_file, mutate_bytes

    real = outbox_file(tmp_path)  # 60 messages of 10-500 bytes, as the fuzzer makes them
    path = tmp_path / "state" / "outbox.sqlite"
    path.parent.mkdir()
    path.write_bytes(mutate_bytes(real, [(26, real[26] ^ 0xFF)], 41763))  # 10.2 of its 12 pages
    with open_outbox(tmp_path) as box:
        kept = box.peek(limit=1000)
        assert box.set_aside is not None
        assert 0 < len(kept) < 60 and [m.id for m in kept] == list(range(1, len(kept) + 1))
        assert [m.topic for m in kept] == [f"hermes/intent/n{n}" for n in range(len(kept))]


def test_a_corrupt_outbox_of_before_boot_clocks_is_salvaged_too(tmp_path: Path) -> None:
    path = outbox_of_before_boot_clocks(tmp_path, [(b"%04d" % i + b"." * 2000, 1e9 + i) for i in range(300)])
    with path.open("r+b") as f:
        f.seek(4096 * 40)
        f.write(b"\xff" * 4096 * 4)
    with open_outbox(tmp_path, max_age_s=0) as box:
        kept = [m.payload[:4] for m in box.peek(limit=1000)]
        assert box.set_aside is not None and 200 < len(kept) < 300 and kept[-1] == b"0299"


def test_a_message_damaged_in_a_sound_file_is_dropped_and_does_not_stop_the_others(tmp_path: Path) -> None:
    """Found by fuzzing: a topic no longer UTF-8 (a flipped bit in a record SQLite's check does not
    read) made every peek raise, so the client sent nothing ever again."""
    with open_outbox(tmp_path) as box:
        ids = [box.append(f"t/{n}", b"%d" % n) for n in range(5)]
    db = sqlite3.connect(tmp_path / "state" / "outbox.sqlite")
    db.execute("UPDATE outbox SET topic = CAST(X'74ff32' AS TEXT) WHERE id = ?", (ids[2],))
    db.commit()
    db.close()
    with open_outbox(tmp_path) as box:
        assert box.set_aside is None  # the file itself is sound
        assert [m.payload for m in box.peek()] == [b"0", b"1", b"3", b"4"]
        assert box.stats()["dropped_damaged"] == 1 and len(box) == 4
    with open_outbox(tmp_path) as box:
        assert [m.payload for m in box.peek()] == [b"0", b"1", b"3", b"4"]  # gone from the file too


def test_an_outbox_whose_schema_text_is_damaged_is_set_aside(tmp_path: Path) -> None:
    """Found by fuzzing: a column name no longer UTF-8 raised from the open and stopped the daemon."""
    with open_outbox(tmp_path) as box:
        box.append("t", b"x")
    path = tmp_path / "state" / "outbox.sqlite"
    data = path.read_bytes()
    at = data.index(b"payload")
    path.write_bytes(data[:at + 4] + b"\xff" + data[at + 5:])
    with open_outbox(tmp_path) as box:
        assert box.set_aside is not None and box.append("t", b"y") is not None


@pytest.mark.parametrize("column", [b"created", b"payload", b"topic", b"boot_id", b"since_boot"])
def test_an_outbox_whose_schema_lost_a_column_name_is_set_aside(tmp_path: Path, column: bytes) -> None:
    """Found by fuzzing (seed 13): a column renamed by one changed byte ("creaqed") passed SQLite's
    check and raised "no such column" from the first read, which stopped the daemon at start (a boot
    column: "duplicate column name" from adding it again, as to an outbox from before them, seed
    17). The messages are read back by the columns' places."""
    with open_outbox(tmp_path) as box:
        box.append("t", b"x")
    path = tmp_path / "state" / "outbox.sqlite"
    data = path.read_bytes()
    at = data.index(column + b" ")
    path.write_bytes(data[:at + 4] + b"q" + data[at + 5:])
    with open_outbox(tmp_path) as box:
        assert box.set_aside is not None and box.stats()["corrupt_file_set_aside"] == 1
        assert box.append("t", b"y") is not None and drain(box) == [b"x", b"y"]


def test_an_outbox_on_a_full_disk_is_never_moved(small_disk: SmallDisk) -> None:
    """Only a corrupt file goes aside: one that cannot be opened for want of space stays as it is."""
    path = str(small_disk.path / "outbox.sqlite3")
    with Outbox(OutboxConfig(path=path)) as box:
        box.append("t", b"kept")
    small_disk.fill()
    with Outbox(OutboxConfig(path=path)) as box:
        assert box.set_aside is None
    assert [p.name for p in small_disk.path.iterdir() if "corrupt" in p.name] == []
    small_disk.free()
    with Outbox(OutboxConfig(path=path)) as box:
        assert box.set_aside is None and [m.payload for m in box.peek()] == [b"kept"]


def drain(box: Outbox, after: int = 0) -> list[bytes]:
    """Everything after ``after``, acknowledged as a client would on each PUBACK; each under an id of its own."""
    got, ids = [], []
    while batch := box.peek(after, 50):
        for m in batch:
            got.append(m.payload)
            ids.append(m.id)
            box.ack(m.id)
        after = batch[-1].id
    assert len(set(ids)) == len(ids), ids
    return got


def test_a_full_disk_holds_messages_in_memory_in_order_and_loses_none(small_disk: SmallDisk) -> None:
    box = Outbox(OutboxConfig(path=str(small_disk.path / "outbox.sqlite3")))
    small_disk.fill()
    payload = b"x" * 500  # 200 of them (and the WAL) fit the disk once the ballast is gone
    ids = [box.append("t", payload + str(n).encode()) for n in range(200)]
    assert SPILLED in ids and box.held_in_memory > 0 and box.stats()["write_errors"] >= 1
    assert len(box) == 200  # every message waits, on file or in memory
    small_disk.free()  # space is back
    assert drain(box) == [payload + str(n).encode() for n in range(200)]  # all of them, in order
    assert box.held_in_memory == 0 and len(box) == 0
    box.close()


def test_a_full_disk_does_not_hold_up_delivery(small_disk: SmallDisk) -> None:
    """Messages the file refused are handed out from memory at once; those delivered never reach the file,
    the others do, with the ids they were handed out with, once there is room."""
    path = str(small_disk.path / "outbox.sqlite3")
    box = Outbox(OutboxConfig(path=path))
    box.append("t", b"before")
    small_disk.fill()
    assert [box.append("t", b"full %d" % n) for n in range(6)] == [SPILLED] * 6
    handed = box.peek(limit=10)
    assert [m.payload for m in handed] == [b"before"] + [b"full %d" % n for n in range(6)]
    ids = [m.id for m in handed]
    assert ids == sorted(set(ids))  # distinct, in order
    assert box.peek(after_id=ids[2], limit=2) == handed[3:5]
    for m in handed[:4]:  # delivered while the disk is full
        assert box.ack(m.id) is True
    assert box.ack(handed[1].id) is False  # once only
    assert len(box) == 3 and box.held_in_memory == 3
    small_disk.free()
    assert box.peek() == handed[4:]  # the same messages under the same ids, now from the file
    assert box.held_in_memory == 0
    box.close()
    with Outbox(OutboxConfig(path=path)) as again:  # on file: they survive the process
        assert again.peek() == handed[4:]


def outbox_from_before(small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch, messages: int = 1) -> str:
    """The path of an outbox on ``small_disk`` left holding b"old 0".. by a run before; a reopen is
    tried at every operation."""
    monkeypatch.setattr(outbox_module, "_REOPEN_EVERY_S", 0.0)
    path = str(small_disk.path / "outbox.sqlite3")
    with Outbox(OutboxConfig(path=path)) as box:
        for n in range(messages):
            box.append("t", b"old %d" % n)
    return path


def test_an_outbox_opened_on_a_full_disk_works_from_memory_and_takes_up_its_file_later(
        small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon restarted while the disk is full still starts and publishes; the messages its file held
    from before are handed out once the file opens, after the ones handed out meanwhile."""
    path = outbox_from_before(small_disk, monkeypatch, messages=3)
    small_disk.fill()
    box = Outbox(OutboxConfig(path=path))  # no ConfigError: the daemon starts
    assert box.peek() == [] and box.held_in_memory == 0 and box.stats()["file_open"] == 0
    assert [box.append("t", b"new %d" % n) for n in range(4)] == [SPILLED] * 4
    handed = box.peek()
    assert [m.payload for m in handed] == [b"new %d" % n for n in range(4)]
    for m in handed[:2]:
        box.ack(m.id)
    assert box.peek(after_id=handed[-1].id) == []  # the file is still out of reach
    small_disk.free()
    old = box.peek(after_id=handed[-1].id)  # where the client's pointer is
    assert box.stats()["file_open"] == 1
    assert [m.payload for m in old] == [b"old %d" % n for n in range(3)]
    assert min(m.id for m in old) > max(m.id for m in handed)  # after everything handed out: none skipped
    for m in old:
        box.ack(m.id)
    assert [m.payload for m in box.peek()] == [b"new 2", b"new 3"]  # handed out, not yet acknowledged
    later = box.append("t", b"later")
    assert later is not None and later > max(m.id for m in old)
    box.close()
    with Outbox(OutboxConfig(path=path)) as again:
        assert [m.payload for m in again.peek()] == [b"new 2", b"new 3", b"later"]
        assert again.append("t", b"next") == later + 1  # ids keep growing across processes


def test_the_file_from_before_is_taken_up_with_nothing_held_in_memory(
        small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    path = outbox_from_before(small_disk, monkeypatch)
    small_disk.fill()
    box = Outbox(OutboxConfig(path=path))
    box.append("t", b"new")
    [new] = box.peek()
    box.ack(new.id)  # delivered: nothing is held any more
    small_disk.free()
    assert [m.payload for m in box.peek(after_id=new.id)] == [b"old 0"]
    box.close()


def test_messages_held_in_memory_keep_the_outbox_bounds(small_disk: SmallDisk, clock: FakeClock) -> None:
    """Count, bytes and age bound what waits in memory as they bound the file: a disk full for a week
    with the broker away must not grow the daemon without end."""
    box = Outbox(OutboxConfig(path=str(small_disk.path / "outbox.sqlite3"), max_messages=6, max_bytes=2_000,
                              max_age_s=3_600))
    small_disk.fill()
    for n in range(10):
        box.append("t", b"%03d" % n + b"x" * 497)  # 500 bytes each: four fit max_bytes
    stats = box.stats()
    assert box.held_in_memory == 4 and stats["queued_bytes"] == 2_000 and stats["dropped_max_bytes"] == 6
    assert [m.payload[:3] for m in box.peek()] == [b"006", b"007", b"008", b"009"]  # the newest stay
    for n in range(4):
        box.append("t", b"small %d" % n)
    assert box.held_in_memory == 6 and box.stats()["dropped_max_messages"] >= 1
    clock.advance(3_601)
    assert box.peek() == [] and box.held_in_memory == 0 and box.stats()["dropped_max_age"] == 6
    small_disk.free()
    box.close()


def test_a_daemon_stopped_while_the_disk_is_still_full_says_what_is_lost(
        small_disk: SmallDisk, caplog: pytest.LogCaptureFixture) -> None:
    small_disk.fill()
    box = Outbox(OutboxConfig(path=str(small_disk.path / "outbox.sqlite3")))
    box.append("t", b"a")
    box.append("t", b"b")
    with caplog.at_level("ERROR", logger="voiced.mqtt.outbox"):
        box.close()
    assert "2 messages held in memory are lost" in caplog.text


def test_a_daemon_restarted_on_a_read_only_disk_starts_from_memory(
        small_disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    """An SD card the kernel remounted read-only after errors is met like a full disk."""
    path = outbox_from_before(small_disk, monkeypatch)
    small_disk.read_only()
    restarted = Outbox(OutboxConfig(path=path))  # no ConfigError: the daemon starts
    assert restarted.append("t", b"after") == SPILLED
    [after] = restarted.peek()
    assert after.payload == b"after"
    small_disk.read_only(False)
    assert [m.payload for m in restarted.peek(after_id=after.id)] == [b"old 0"]
    restarted.close()


def test_an_unwritable_outbox_path_is_still_a_configuration_error(tmp_path: Path) -> None:
    """Only a full disk starts the outbox in memory: a path that can never work is the user's to fix."""
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(ConfigError, match="outbox.path"):
        Outbox(OutboxConfig(path=str(tmp_path / "a-directory")))

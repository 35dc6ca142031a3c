"""Messages the outbox holds in memory while its file takes no writes (a full or read-only disk)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voiced.mqtt.outbox_held import HeldFile

__all__ = ["HeldMessages", "Row"]

Row = tuple[str, bytes, int, bool, float, str, float]
"""topic, payload, qos, retain, created (wall clock), boot id, seconds since that boot."""


class HeldMessages:
    """Held messages by id, oldest first (ids only grow, so this is also the order of their
    appends), with their payload bytes counted, and kept in ``file`` too when one is given (so a
    restart of the daemon does not lose them). Not thread-safe: the outbox's lock covers it."""

    def __init__(self, file: HeldFile | None = None) -> None:
        self._rows: dict[int, Row] = {}
        self._file = file
        self.bytes = 0
        """Payload bytes held."""

    def take_up(self, first_id: int, moved: Callable[[int, Row], bool] = lambda message_id, row: False) -> int:
        """Hold what a process before left in the file, renumbered from ``first_id`` in its order (ids it
        gave may have been given again since, by the outbox file); how many. ``moved(id, row)``: the
        message already reached the outbox file (a process killed between moving a message there and
        deleting it here): it is not taken up again, which would send it twice."""
        if self._file is None:
            return 0
        left = self._file.left()
        rows = list(enumerate((row for i, row in left if not moved(i, row)), start=first_id))
        if left:
            self._file.replace(rows)
        for message_id, row in rows:
            self._rows[message_id] = row
            self.bytes += len(row[1])
        return len(rows)

    @property
    def file(self) -> HeldFile | None:
        return self._file

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, message_id: int, row: Row) -> None:
        self._rows[message_id] = row
        self.bytes += len(row[1])
        if self._file is not None:
            self._file.add(message_id, row)

    def oldest(self) -> tuple[int, Row]:
        message_id = next(iter(self._rows))
        return message_id, self._rows[message_id]

    def remove(self, message_id: int) -> bool:
        """Forget a message; False if it was not held."""
        row = self._rows.pop(message_id, None)
        if row is None:
            return False
        self.bytes -= len(row[1])
        if self._file is not None:
            self._file.remove(message_id)
        return True

    def drop_older_than(self, since_boot: float) -> int:
        """Forget the messages appended before ``since_boot`` (this boot's clock: a process holds only
        messages of its own boot); how many went."""
        dropped = 0
        while self._rows and self.oldest()[1][6] < since_boot:
            self.remove(self.oldest()[0])
            dropped += 1
        return dropped

    def after(self, after_id: int, limit: int) -> Iterator[tuple[int, Row]]:
        """Up to ``limit`` held messages with an id above ``after_id``, oldest first."""
        given = 0
        for message_id, row in self._rows.items():
            if given == limit:
                return
            if message_id > after_id:
                given += 1
                yield message_id, row

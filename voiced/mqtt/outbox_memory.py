"""Messages the outbox holds in memory while its file takes no writes (a full or read-only disk)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["HeldMessages", "Row"]

Row = tuple[str, bytes, int, bool, float, str, float]
"""topic, payload, qos, retain, created (wall clock), boot id, seconds since that boot."""


class HeldMessages:
    """Held messages by id, oldest first (ids only grow, so this is also the order of their
    appends), with their payload bytes counted. Not thread-safe: the outbox's lock covers it."""

    def __init__(self) -> None:
        self._rows: dict[int, Row] = {}
        self.bytes = 0
        """Payload bytes held."""

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, message_id: int, row: Row) -> None:
        self._rows[message_id] = row
        self.bytes += len(row[1])

    def oldest(self) -> tuple[int, Row]:
        message_id = next(iter(self._rows))
        return message_id, self._rows[message_id]

    def remove(self, message_id: int) -> bool:
        """Forget a message; False if it was not held."""
        row = self._rows.pop(message_id, None)
        if row is None:
            return False
        self.bytes -= len(row[1])
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

"""What the outbox takes and gives: its bounds, its messages, and why it drops one."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from voiced.errors import ConfigError

__all__ = ["DropReason", "HELD_FILE", "OUTBOX_FILE", "OutboxConfig", "OutboxMessage", "SPILLED"]

OUTBOX_FILE = "outbox.sqlite3"
"""The daemon's outbox file, in its state directory."""
HELD_FILE = "outbox-held.sqlite3"
"""Where the daemon keeps messages held in memory too, in its runtime directory."""
SPILLED = -1
"""What ``append`` returns for a message kept in memory because the file could not take it."""


class DropReason(Enum):
    """Why the outbox dropped a message before it was delivered."""

    MAX_MESSAGES = "max_messages"
    """More than ``max_messages`` were waiting; the oldest went."""
    MAX_BYTES = "max_bytes"
    """The payloads waiting exceeded ``max_bytes``; the oldest went (or the message alone is larger)."""
    MAX_AGE = "max_age"
    """The message waited longer than ``max_age_s``."""
    DAMAGED = "damaged"
    """The file gave the message back unreadable (a damaged disk)."""


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
    boot; across a reboot on the wall clock, only for messages stamped while it was synchronized and
    only while it is: the others are kept, bounded by count and bytes); 0 keeps messages however old."""
    held_path: str | None = None
    """SQLite file on a RAM-backed disk (the runtime directory) where messages held in memory while
    ``path``'s disk takes no writes are kept too, so that a restart of the daemon does not lose them;
    None: in memory only."""
    fsync: bool = False
    """True: every append and acknowledgement reaches the disk before returning (survives
    power loss; slow and wearing on SD cards). False: survives a crash of the process, and
    the database stays intact on power loss, but the newest changes may be lost."""

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("outbox.path", "must name a file")
        if self.held_path is not None and (not self.held_path or self.held_path == self.path):
            raise ConfigError("outbox.held_path", "must name a file other than outbox.path")
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
    """Wall-clock time (``time.time()``) of the append: wrong (1970, or days behind) on a Pi that had
    not reached NTP yet."""

"""How often a fault that repeats is logged: a daemon left alone for months must not fill the
journal with one line per bad message or per retry, yet the log must still say the fault goes on."""

from __future__ import annotations

import logging

__all__ = ["sparse_level"]


def sparse_level(n: int, level: int = logging.WARNING, first: int = 1, every: int = 100) -> int:
    """The level for the ``n``-th occurrence (from 1): ``level`` for the first ``first`` and every
    ``every``-th, DEBUG for the rest."""
    return level if n <= first or n % every == 0 else logging.DEBUG

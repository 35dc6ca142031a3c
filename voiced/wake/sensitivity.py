"""How readily a wake word is taken: Home Assistant's three levels over the configured thresholds.

A box across a loud room misses the wake word at a threshold that is right for a quiet one; a
user fixes that from Home Assistant (a ``select``, as on HA's own voice hardware), not by editing
``[wake] threshold`` over SSH. The configured threshold is *moderately sensitive*; *very
sensitive* halves it, *slightly sensitive* takes it halfway to 1 (0.5 → 0.25 / 0.75), each
per-head threshold alike.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Sensitivity", "sensitive_threshold"]


class Sensitivity(StrEnum):
    """The levels, named as Home Assistant's own voice satellites name them."""

    SLIGHTLY = "Slightly sensitive"
    MODERATELY = "Moderately sensitive"
    VERY = "Very sensitive"

    @classmethod
    def named(cls, name: object) -> Sensitivity | None:
        """The level called ``name`` (as Home Assistant's select sends it, as controls.json keeps
        it); None for anything else."""
        try:
            return cls(name)
        except ValueError:
            return None


def sensitive_threshold(threshold: float, level: Sensitivity) -> float:
    """``threshold`` (in (0, 1]) at ``level``: still in (0, 1]."""
    if level is Sensitivity.VERY:
        return threshold / 2
    if level is Sensitivity.SLIGHTLY:
        return threshold + (1 - threshold) / 2
    return threshold

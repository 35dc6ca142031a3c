"""Several rooms, one answer: which site's wake word detection opens the session.

Each site in an arbitration group announces its detection (a :class:`Claim`: score and the
signal-to-noise ratio of the wake audio); after a short window every site applies the same
rule to the claims it has seen, so the site that heard the wake word best answers and the
others stand down. The transport (MQTT) is the adapter's; the rule and the SNR live here.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Arbiter", "Claim", "SnrTracker", "winner"]


@dataclass(frozen=True)
class Claim:
    site_id: str
    wake_word: str
    score: float
    snr_db: float
    session_id: str

    def rank(self) -> tuple[float, float, str]:
        """Best first when sorted: higher SNR, then higher score, then the smaller siteId (a
        deterministic tie-break every site computes alike)."""
        return (-round(self.snr_db, 1), -round(self.score, 3), self.site_id)


def winner(claims: Iterable[Claim]) -> Claim:
    return min(claims, key=Claim.rank)


class Arbiter(Protocol):
    def contest(self, claim: Claim, decided: Callable[[bool], None]) -> None:
        """Announce ``claim``; call ``decided(won)`` once, from any thread, when the window closes
        (at once with True when the others cannot be reached: answer locally)."""


FRAME = 160  # 10 ms at 16 kHz


class SnrTracker:
    """Signal-to-noise ratio of the last wake word: loud frames of the last second over the quiet
    frames of the last few seconds (percentiles of 10 ms frame energies, so a click or a gap does
    not decide)."""

    def __init__(self, history_s: float = 4.0, signal_s: float = 1.0) -> None:
        self._db: collections.deque[float] = collections.deque(maxlen=int(history_s * 100))
        self._signal_frames = int(signal_s * 100)
        self._rest = np.zeros(0, np.float32)

    def push(self, samples: np.ndarray) -> None:
        x = np.concatenate([self._rest, np.asarray(samples, np.float32)])
        n = len(x) // FRAME
        self._rest = x[n * FRAME:]
        if n:
            energy = np.mean(x[:n * FRAME].reshape(n, FRAME) ** 2, axis=1)
            self._db.extend((10 * np.log10(energy + 1e-10)).tolist())

    def snr_db(self) -> float:
        if not self._db:
            return 0.0
        db = np.array(self._db)
        signal = float(np.percentile(db[-self._signal_frames:], 90))
        noise = float(np.percentile(db, 10))
        return round(signal - noise, 2)

"""The energy gate: per-frame RMS level in dBFS against a threshold, with an optional noise floor.

Alone it is the ``energy`` VAD (probabilities 0 or 1); in front of Silero it decides which
windows are quiet enough that running the network on them would be wasted CPU.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from voiced.audio.frames import FRAME_MS, FRAME_SAMPLES, Window
from voiced.configfile import section_from_dict
from voiced.errors import ConfigError
from voiced.vad.base import frame_count

__all__ = ["SILENCE_DB", "EnergyGate", "EnergyGateConfig", "frame_levels_db"]

log = logging.getLogger(__name__)

SILENCE_DB = -120.0
"""Level reported for digital silence (instead of minus infinity)."""


@dataclass(frozen=True)
class EnergyGateConfig:
    """When a 10 ms frame is loud enough to possibly be speech."""

    threshold_db: float = -50.0
    """Frames with an RMS level below this (dBFS, full-scale square wave = 0 dB) are silence.

    Measured with Silero behind the gate (300 ms hangover): from -60 to -40 dB every
    hifitts utterance and each of the 220 moonshine words stays one utterance, and the
    skip ratio barely moves on the hifitts stream (0.34 to 0.37); what moves is Silero
    speech frames lost on quiet read speech (two_cities_16k, speech peaks -22 dBFS):
    134 of 3245 at -40 dB, 40 at -45 and -50, 19 at -55, 0 at -60 where that recording's
    -60 dBFS floor is never skipped. -50 dB leaves 10 dB or more above a quiet room's
    floor (-60 to -70 dBFS) so an idle device rests, and keeps speech losses small.
    """
    adaptive: bool = False
    """Raise the threshold to ``noise_margin_db`` above the tracked noise floor.

    Off by default: in front of Silero a raised threshold would hide quiet speech in a
    noisy room, which Silero itself tells from noise. Turn it on for the ``energy`` VAD
    in rooms with steady noise (fans, hum) above ``threshold_db``.
    """
    noise_margin_db: float = 10.0
    """How far above the noise floor a frame must be to count as speech (adaptive only)."""
    hangover_ms: int = 300
    """With Silero: how long Silero keeps running after the last window with a loud frame.

    Only after this much gate-silence are windows skipped, so Silero hears the pauses
    inside and between words (and the quiet fricatives after them) as it would ungated.
    """
    noise_window_s: float = 3.0
    """The noise floor is the quietest frame of this many past seconds (adaptive only).

    Speech almost never goes 3 s without a frame near the floor (pauses, stops), so the
    floor does not creep up into the speech; new steady noise is learnt within 3 s.
    """

    def __post_init__(self) -> None:
        if not -120.0 <= self.threshold_db <= 0.0:
            raise ConfigError("threshold_db", f"must be within [-120, 0] dBFS, got {self.threshold_db}")
        if not 0 <= self.hangover_ms <= 10_000:
            raise ConfigError("hangover_ms", f"must be within [0, 10000] ms, got {self.hangover_ms}")
        if not 0.0 <= self.noise_margin_db <= 60.0:
            raise ConfigError("noise_margin_db", f"must be within [0, 60] dB, got {self.noise_margin_db}")
        if not 0.1 <= self.noise_window_s <= 60.0:
            raise ConfigError("noise_window_s", f"must be within [0.1, 60] s, got {self.noise_window_s}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None, section: str = "") -> EnergyGateConfig:
        """Build from a TOML table; errors name the key (prefixed with ``section``) and ``source``."""
        return section_from_dict(cls, data, section, source)


def frame_levels_db(samples: np.ndarray) -> np.ndarray:
    """RMS level in dBFS of each 10 ms frame (a short last frame is measured over what it has)."""
    x = np.asarray(samples, dtype=np.float32)
    n = frame_count(len(x))
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    full = len(x) // FRAME_SAMPLES
    power = np.empty(n, dtype=np.float64)
    power[:full] = np.mean(np.square(x[: full * FRAME_SAMPLES].reshape(full, FRAME_SAMPLES), dtype=np.float64), axis=1)
    if full < n:
        power[full] = np.mean(np.square(x[full * FRAME_SAMPLES :], dtype=np.float64))
    floor = 10.0 ** (SILENCE_DB / 10.0)
    return (10.0 * np.log10(np.maximum(power, floor))).astype(np.float32)


class EnergyGate:
    """Per-stream energy detector: 1.0 for frames above the threshold, 0.0 below.

    Holds the noise-floor history when ``adaptive``; ``reset()`` forgets it.
    """

    def __init__(self, config: EnergyGateConfig | None = None) -> None:
        self.config = config or EnergyGateConfig()
        self._floor_frames = max(1, round(self.config.noise_window_s * 1000 / FRAME_MS))
        # Monotonic deque of (frame number, level): its head is the minimum of the window.
        self._minima: deque[tuple[int, float]] = deque()
        self._frame = 0

    @property
    def noise_floor_db(self) -> float | None:
        """The tracked noise floor, or None before the first frame or when not adaptive."""
        return self._minima[0][1] if self._minima else None

    def frame_probabilities(self, window: Window) -> np.ndarray:
        """1.0 where a frame's level reaches the (effective) threshold, else 0.0."""
        levels = frame_levels_db(window.samples)
        return (levels >= self.thresholds_db(levels)).astype(np.float32)

    def thresholds_db(self, levels: np.ndarray) -> np.ndarray:
        """The effective threshold of each of these next frames; advances the noise floor."""
        cfg = self.config
        if not cfg.adaptive:
            self._frame += len(levels)
            return np.full(len(levels), cfg.threshold_db, dtype=np.float32)
        out = np.empty(len(levels), dtype=np.float32)
        minima = self._minima
        for i, level in enumerate(levels.tolist()):
            while minima and minima[-1][1] >= level:
                minima.pop()
            minima.append((self._frame, level))
            while minima[0][0] <= self._frame - self._floor_frames:
                minima.popleft()
            out[i] = max(cfg.threshold_db, minima[0][1] + cfg.noise_margin_db)
            self._frame += 1
        return out

    def reset(self) -> None:
        self._minima.clear()
        self._frame = 0

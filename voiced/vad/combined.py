"""The energy gate in front of Silero, and building a detector or endpointer from a VadKind."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.audio.frames import FRAME_MS, Window
from voiced.errors import ConfigError
from voiced.runtime.onnx import SessionOptions
from voiced.vad.base import SpeechDetector, VadKind
from voiced.vad.endpointer import EndpointConfig, Endpointer
from voiced.vad.gate import EnergyGate, EnergyGateConfig
from voiced.vad.silero import SileroDetector, SileroVad

__all__ = ["GateStats", "GatedDetector", "build_endpointer", "create_detector"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GateStats:
    """How much work the energy gate saved Silero."""

    windows: int
    """Windows seen."""
    skipped: int
    """Windows the gate called silence, on which Silero did not run."""

    @property
    def skip_ratio(self) -> float:
        return self.skipped / self.windows if self.windows else 0.0


class GatedDetector:
    """Energy gate → Silero: a quiet window is silence (all 0) and Silero does not run on it.

    A window is quiet when every frame is below the gate and the gate has been shut for
    more than ``hangover_ms`` (counting this window), so Silero still hears short pauses.

    Other windows get Silero's probabilities as they are, quiet frames included: the
    energy of speech dips in closures and pauses, and Silero knows better there.
    After a skip Silero restarts from a fresh state, warmed up on the quiet just before
    and on its usual chunk grid (see ``SileroDetector.skip``).
    """

    def __init__(self, gate: EnergyGate, silero: SileroDetector) -> None:
        self.gate = gate
        self.silero = silero
        self._hangover = -(-gate.config.hangover_ms // FRAME_MS)
        self._quiet = self._hangover  # frames since the last loud one; a stream starts idle
        self._windows = 0
        self._skipped = 0

    @property
    def stats(self) -> GateStats:
        """Counts since this detector was made (``reset`` keeps them: they are for monitoring)."""
        return GateStats(self._windows, self._skipped)

    def frame_probabilities(self, window: Window) -> np.ndarray:
        self._windows += 1
        # The gate runs on every window so an adaptive noise floor keeps up.
        loud = self.gate.frame_probabilities(window)
        if loud.any():
            self._quiet = len(loud) - 1 - int(np.flatnonzero(loud)[-1])
        else:
            self._quiet += len(loud)
        if not loud.any() and self._quiet > self._hangover:
            self._skipped += 1
            self.silero.skip(window)
            return np.zeros(len(loud), dtype=np.float32)
        return self.silero.frame_probabilities(window)

    def reset(self) -> None:
        self.gate.reset()
        self.silero.reset()
        self._quiet = self._hangover


def create_detector(
    kind: VadKind, silero: SileroVad | None = None, gate: EnergyGateConfig | None = None
) -> SpeechDetector:
    """A fresh per-stream detector of ``kind`` (ENERGY or SILERO; SILERO needs the loaded model)."""
    if kind is VadKind.ENERGY:
        return EnergyGate(gate)
    if kind is VadKind.SILERO:
        if silero is None:
            raise ConfigError("vad_model", "the silero VAD needs a Silero VAD v5 model file")
        return GatedDetector(EnergyGate(gate), silero.create_detector())
    raise ConfigError("vad", f"{kind.value!r} has no speech detector")


def build_endpointer(
    kind: VadKind,
    model_path: str | Path | None = None,
    config: EndpointConfig | None = None,
    gate: EnergyGateConfig | None = None,
    options: SessionOptions | None = None,
) -> Endpointer | None:
    """An endpointer for ``kind``, loading the Silero model from ``model_path`` when needed.

    Returns None for VadKind.NONE: without a VAD the whole stream is one utterance.
    """
    if kind is VadKind.NONE:
        return None
    model = None
    if kind is VadKind.SILERO:
        if model_path is None:
            raise ConfigError("vad_model", "the silero VAD needs a Silero VAD v5 model file")
        model = SileroVad.load(model_path, options)
    return Endpointer(config or EndpointConfig(), create_detector(kind, model, gate))

"""Wake-word detection on the capture stream: one WakeStream per audio stream, any number of heads.

    model = WakeModel.load("models/openwakeword", ["alexa_v0.1"])
    stream = WakeDetector(model, WakeConfig()).create_stream()
    for detection in stream.accept_waveform(samples):    # 16 kHz float samples in [-1, 1]
        ...

The front end (:mod:`voiced.wake.frontend`) runs once per call on every whole 80 ms frame the
stream holds: as one streaming graph when there is one, else a mel call per frame and one
embedding call for all of them. Scores equal the ``openwakeword`` package's
frame for frame once a head's N embeddings come from real audio (openWakeWord fills its
history with embeddings of random noise at start; voiced fills it with silence's, and reports
no score for the first ``warmup_frames``, as openWakeWord zeroes its first 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from voiced.errors import ConfigError
from voiced.wake.model import FRAME_SAMPLES, MEL_CONTEXT, WakeModel
from voiced.wake.sensitivity import Sensitivity, sensitive_threshold

__all__ = ["Detection", "WakeConfig", "WakeDetector", "WakeStream"]

FRAME_S = FRAME_SAMPLES / 16_000


@dataclass(frozen=True)
class WakeConfig:
    """When a score counts as a wake word."""

    threshold: float = 0.5
    """Score (0..1) a frame must reach; per head in ``thresholds``."""
    thresholds: dict[str, float] = field(default_factory=dict)
    """Per-label thresholds (label: the head's file name without .onnx, e.g. "alexa_v0.1")."""
    patience: int = 1
    """Consecutive 80 ms frames at or over the threshold before a detection."""
    refractory_s: float = 2.0
    """After a detection, that label stays silent this long (one utterance, one detection)."""
    warmup_frames: int = 5
    """Frames after the stream starts that never detect (openWakeWord zeroes its first 5)."""

    def __post_init__(self) -> None:
        for key, value in {"threshold": self.threshold, **self.thresholds}.items():
            if not 0.0 < value <= 1.0:
                raise ConfigError(f"wake.{key}" if key == "threshold" else f"wake.thresholds.{key}",
                                  f"must be within (0, 1], got {value}")
        if self.patience < 1:
            raise ConfigError("wake.patience", f"must be at least 1, got {self.patience}")
        if self.refractory_s < 0:
            raise ConfigError("wake.refractory_s", f"must be >= 0, got {self.refractory_s}")

    def threshold_for(self, label: str) -> float:
        return self.thresholds.get(label, self.threshold)

    def at(self, level: Sensitivity) -> WakeConfig:
        """These rules with every threshold moved to ``level`` (see ``voiced.wake.sensitivity``)."""
        return replace(self, threshold=sensitive_threshold(self.threshold, level),
                       thresholds={k: sensitive_threshold(v, level) for k, v in self.thresholds.items()})


@dataclass(frozen=True)
class Detection:
    """A wake word heard: which, how sure, when (seconds of stream time at the end of its frame)."""

    label: str
    score: float
    time: float


class WakeDetector:
    """A loaded WakeModel and its detection rules; create one stream per audio stream."""

    def __init__(self, model: WakeModel, config: WakeConfig | None = None) -> None:
        self.model = model
        self.config = config or WakeConfig()
        self.labels = [label for head in model.heads for label in head.labels]
        silence = np.zeros(MEL_CONTEXT + FRAME_SAMPLES * 10, np.float32)
        embeddings, _ = model.frontend.advance(model.frontend.initial_state(), silence)
        self._silent_embedding = embeddings[-1]  # a whole window of silence

    def create_stream(self) -> WakeStream:
        return WakeStream(self)


class WakeStream:
    """Per-stream state: pending samples, mel and embedding history, per-label trigger state."""

    def __init__(self, detector: WakeDetector) -> None:
        self._detector = detector
        self.config = detector.config
        """The rules this stream detects by (the detector's; swapped whole when the sensitivity changes)."""
        self.reset()

    def reset(self) -> None:
        d = self._detector
        self._pending = np.zeros(0, np.float32)
        self._context = np.zeros(MEL_CONTEXT, np.float32)
        self._frontend_state = d.model.frontend.initial_state()  # after openWakeWord's initial mel history
        self._embeddings = np.tile(d._silent_embedding, (d.model.max_frames, 1))
        self.frames = 0
        self._over = dict.fromkeys(d.labels, 0)
        self._quiet_until = dict.fromkeys(d.labels, -1.0)
        self.last_scores: list[dict[str, float]] = []
        """Every label's score for each frame of the last accept_waveform call."""

    def accept_waveform(self, samples: np.ndarray) -> Iterator[Detection]:
        """Add 16 kHz float samples in [-1, 1]; score every whole 80 ms frame; yield the detections."""
        # openWakeWord is fed int16 PCM; these are the same values as floats
        pcm = np.clip(np.round(np.asarray(samples, np.float32) * 32768.0), -32768, 32767)
        self._pending = np.concatenate([self._pending, pcm]) if len(self._pending) else pcm
        n = len(self._pending) // FRAME_SAMPLES
        self.last_scores = []
        if n == 0:
            return
        model = self._detector.model
        audio = np.concatenate([self._context, self._pending[:n * FRAME_SAMPLES]])
        self._context = audio[-MEL_CONTEXT:]
        self._pending = self._pending[n * FRAME_SAMPLES:]
        new, self._frontend_state = model.frontend.advance(self._frontend_state, audio)
        self._embeddings = np.concatenate([self._embeddings, new])[-(model.max_frames + n):]
        for j in range(n):
            upto = len(self._embeddings) - (n - 1 - j)
            history = self._embeddings[:upto]
            scores = dict(zip(self._detector.labels, np.concatenate(model.scores(history)).tolist()))
            self.frames += 1
            self.last_scores.append(scores)
            yield from self._decide(scores)
        self._embeddings = self._embeddings[-model.max_frames:]

    def _decide(self, scores: dict[str, float]) -> Iterator[Detection]:
        config = self.config
        now = self.frames * FRAME_S
        for label, score in scores.items():
            if self.frames <= config.warmup_frames or now < self._quiet_until[label]:
                self._over[label] = 0
                continue
            if score >= config.threshold_for(label):
                self._over[label] += 1
                if self._over[label] >= config.patience:
                    self._over[label] = 0
                    self._quiet_until[label] = now + config.refractory_s
                    yield Detection(label, score, now)
            else:
                self._over[label] = 0

"""What every VAD part shares: the kinds, the detector interface, frames, config parsing."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from enum import Enum
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from voiced.audio.frames import FRAME_SAMPLES, Window
from voiced.errors import ConfigError

__all__ = ["SpeechDetector", "VadKind", "config_from_dict", "frame_count"]

T = TypeVar("T")


class VadKind(Enum):
    """Which voice activity detector the listening loop uses (the CLI's ``--vad`` values)."""

    NONE = "none"
    """No VAD: the whole stream is one utterance."""
    ENERGY = "energy"
    """The energy gate alone: frames louder than a threshold are speech."""
    SILERO = "silero"
    """The energy gate in front of Silero VAD: Silero runs only on windows the gate lets through."""


@runtime_checkable
class SpeechDetector(Protocol):
    """Per-stream speech detection: one probability per 10 ms frame of each window.

    Windows must be fed in stream order without gaps; a detector keeps whatever it needs
    between windows (a noise floor, a model state, samples not yet analysed).
    """

    def frame_probabilities(self, window: Window) -> np.ndarray:
        """Speech probability in [0, 1] of each frame of ``window`` (float32, ``frame_count`` long)."""
        ...

    def reset(self) -> None:
        """Forget the stream: the next window starts a new one."""
        ...


def frame_count(n_samples: int) -> int:
    """Frames in ``n_samples``; a short last frame (end of stream) counts as a frame."""
    return -(-n_samples // FRAME_SAMPLES)


def config_from_dict(cls: type[T], data: Mapping[str, Any], source: str | None = None, section: str = "") -> T:
    """Build the frozen config dataclass ``cls`` from a TOML-like mapping.

    Unknown keys and values of the wrong type raise ConfigError naming ``section.key`` and
    ``source``; range checks are the dataclass's own ``__post_init__``.
    """
    prefix = f"{section}." if section else ""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{prefix}{key}", f"unknown key (known: {', '.join(sorted(fields))})", source)
        kwargs[key] = _coerce(fields[key].type, value, f"{prefix}{key}", source)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{prefix}{exc.key}", exc.problem, source) from None


def _coerce(annotation: object, value: Any, key: str, source: str | None) -> Any:
    # Annotations are strings here (postponed evaluation); the configs use only these three.
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {value!r}", source)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"must be a number, got {value!r}", source)
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(key, f"must be a whole number, got {value!r}", source)
        return int(value)
    if not math.isfinite(value):
        raise ConfigError(key, f"must be finite, got {value!r}", source)
    return float(value)

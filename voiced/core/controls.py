"""What the user sets on the device from Home Assistant (the microphone switch, the volume slider, the wake
word sensitivity), kept across restarts.

A microphone switched off for privacy must stay off after a power cut, and a volume turned down
at night must not come back loud: the settings live in ``controls.json`` in the state directory,
written whole (a temporary file renamed over it) on every change. A missing file is the
defaults (microphone on, ``[playback] volume``, the configured wake thresholds); a damaged one is
logged and read as the defaults, never stopping the start; a disk that takes no writes keeps them
in memory.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from voiced.wake.sensitivity import Sensitivity

__all__ = ["CONTROLS_FILE", "Controls", "load_controls", "read_controls", "save_controls"]

log = logging.getLogger(__name__)

CONTROLS_FILE = "controls.json"
_MICROPHONE = "microphone"
_VOLUME = "volume"
_WAKE_SENSITIVITY = "wake_sensitivity"


@dataclass(frozen=True)
class Controls:
    microphone: bool = True
    """False: every captured window is dropped (no wake word, no VAD, nothing streamed)."""
    volume: float | None = None
    """Gain in [0, 1] of everything played; None: ``[playback] volume``."""
    wake_sensitivity: Sensitivity = Sensitivity.MODERATELY
    """How readily a wake word is taken; moderately: the configured thresholds."""


def load_controls(path: Path) -> Controls:
    """The settings saved at ``path``; the defaults when there are none or they cannot be read (logged)."""
    controls, problems = read_controls(path)
    for problem in problems:
        log.warning("%s", problem)
    return controls


def read_controls(path: Path) -> tuple[Controls, list[str]]:
    """The settings saved at ``path`` and what was wrong with them: each damaged setting (or the
    whole file) reads as its default, never stopping the start."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return Controls(), []
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return Controls(), [f"{path} cannot be read ({exc}): the microphone is on, the volume [playback]'s"]
    if not isinstance(data, dict):
        return Controls(), [f"{path} is not a JSON object: the microphone is on, the volume [playback]'s"]
    problems = []
    microphone, volume = data.get(_MICROPHONE, True), data.get(_VOLUME)
    if not isinstance(microphone, bool):
        problems.append(f"{path}: {microphone!r} is not true or false: the microphone is on")
        microphone = True
    if volume is not None and (isinstance(volume, bool) or not isinstance(volume, (int, float))
                               or not math.isfinite(volume) or not 0 <= volume <= 1):
        problems.append(f"{path}: volume {volume!r} is not within 0..1: [playback] volume is used")
        volume = None
    saved = data.get(_WAKE_SENSITIVITY, Sensitivity.MODERATELY.value)
    sensitivity = Sensitivity.named(saved)
    if sensitivity is None:
        problems.append(f"{path}: wake sensitivity {saved!r} is not one of {', '.join(Sensitivity)}: the "
                        "configured thresholds are used")
        sensitivity = Sensitivity.MODERATELY
    return Controls(microphone, None if volume is None else float(volume), sensitivity), problems


def save_controls(path: Path, controls: Controls) -> bool:
    """Write ``controls`` to ``path`` whole; False (logged) when the disk does not take it."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp.write_text(json.dumps({_MICROPHONE: controls.microphone, _VOLUME: controls.volume,
                                    _WAKE_SENSITIVITY: controls.wake_sensitivity.value}), "utf-8")
        os.replace(temp, path)
        return True
    except OSError as exc:
        log.warning("cannot keep the device settings in %s (%s): they last until the daemon stops", path, exc)
        try:
            temp.unlink()
        except OSError:
            pass
        return False

"""What the user sets on the device from Home Assistant (the microphone switch, the volume slider, the wake
word sensitivity), kept across restarts.

A microphone switched off for privacy must stay off after a power cut, and a volume turned down
at night must not come back loud: the settings live in ``controls.json`` in the state directory,
written whole on every change: a temporary file, fsynced, renamed over it, then the directory
fsynced, so that after a power cut the file is the new settings, not the old ones or an empty
file (where the filesystem refuses a directory's fsync, best effort). Temporary files a crash left
(``.controls.json.<pid>.tmp``) are removed at the next load or save. A missing file is the
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
    _remove_leftovers(path)
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
    """Write ``controls`` to ``path`` whole and durably; False (logged) when the disk does not take it."""
    temp = _temp_path(path, os.getpid())
    _remove_leftovers(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "w", encoding="utf-8") as f:
            f.write(json.dumps({_MICROPHONE: controls.microphone, _VOLUME: controls.volume,
                                _WAKE_SENSITIVITY: controls.wake_sensitivity.value}))
            f.flush()
            os.fsync(f.fileno())  # the data on disk before the name points at it
        os.replace(temp, path)
        _fsync_directory(path.parent)  # the rename itself on disk
        return True
    except OSError as exc:
        log.warning("cannot keep the device settings in %s (%s): they last until the daemon stops", path, exc)
        try:
            temp.unlink()
        except OSError:
            pass
        return False


def _temp_path(path: Path, pid: int | str) -> Path:
    """Where process ``pid`` writes ``path`` before renaming it (``"*"``: a glob of every process's)."""
    return path.with_name(f".{path.name}.{pid}.tmp")


def _remove_leftovers(path: Path) -> None:
    """Remove temporary files of ``path`` that other processes left (a crash between write and rename)."""
    mine = _temp_path(path, os.getpid())
    try:
        leftovers = [p for p in path.parent.glob(_temp_path(path, "*").name) if p != mine]
    except OSError:
        return
    for leftover in leftovers:
        try:
            leftover.unlink()
            log.debug("removed %s, left by a process that stopped while saving", leftover)
        except OSError:
            pass


def _fsync_directory(directory: Path) -> None:
    """fsync ``directory`` so that a rename in it survives a power cut; best effort (some filesystems
    and platforms refuse a directory's fsync)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        log.debug("cannot open %s to fsync it: %s", directory, exc)
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        log.debug("cannot fsync %s: %s", directory, exc)
    finally:
        os.close(fd)

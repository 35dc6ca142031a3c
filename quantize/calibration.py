"""Calibration inputs: finding audio, splitting off a held-back set, reading .npz tensors.

The split is by whole file (or whole .npz sample), never by window: windows of one
recording are correlated, so validating on windows of a file that was also calibrated on
would flatter the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from voiced.errors import ConfigError

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["AudioItem", "Feeds", "find_audio", "load_npz", "split", "subsample"]

Feeds = dict[str, np.ndarray]
T = TypeVar("T")


@dataclass(frozen=True)
class AudioItem:
    """One recording; ``label`` is its folder's name (``moonshine_alphanumeric/<label>/x.wav``)."""

    path: Path
    label: str


def find_audio(paths: Sequence[str | Path], option: str = "--audio") -> list[AudioItem]:
    """Every .wav under ``paths`` (files or directories, recursive), sorted; none raises ConfigError naming the path."""
    items: list[AudioItem] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() == ".wav" and p.is_file())
            if not found:
                raise ConfigError(option, f"empty calibration set: no .wav files in directory {path}")
        elif path.is_file():
            if path.suffix.lower() != ".wav":
                raise ConfigError(option, f"{path} is not a .wav file")
            found = [path]
        else:
            raise ConfigError(option, f"{path} does not exist")
        items += [AudioItem(p, p.parent.name) for p in found]
    return items


def split(items: Sequence[T], holdout: float, seed: int = 0) -> tuple[list[T], list[T]]:
    """(calibration, held back): a seeded shuffle, ``holdout`` of the items held back (at least one
    of each when there are two or more items and ``holdout`` > 0)."""
    n = len(items)
    if n == 0:
        return [], []
    held = round(n * holdout)
    if holdout > 0 and n >= 2:
        held = min(max(held, 1), n - 1)
    order = np.random.default_rng(seed).permutation(n)
    held_idx = set(order[:held].tolist())
    return [x for i, x in enumerate(items) if i not in held_idx], [x for i, x in enumerate(items) if i in held_idx]


def calibration_and_check(audio: Sequence[str | Path], validate_audio: Sequence[str | Path], holdout: float,
                          seed: int) -> tuple[list[AudioItem], list[AudioItem]]:
    """(calibration, validation) utterances for ``voiced-quantize asr``: ``--validate-audio`` when given,
    else a seeded share of ``--audio`` held back; ConfigError when there is nothing to check on."""
    if not audio:
        raise ConfigError("--audio", "voiced-quantize asr needs --audio (real utterances) for calibration and validation")
    items = find_audio(audio)
    validate_items = find_audio(validate_audio, "--validate-audio") if validate_audio else []
    cal_items, held_items = (items, []) if validate_items else split(items, holdout, seed)
    check_items = validate_items or held_items
    if not check_items:
        if len(items) >= 2:  # --holdout 0 held nothing back
            raise ConfigError("--holdout", f"{holdout} holds none of the {len(items)} utterances back for validation:"
                              " raise it, or give --validate-audio")
        raise ConfigError("--audio", "need at least two utterances (one to calibrate on, one held back), or --validate-audio")
    return cal_items, check_items


def subsample(feeds: Sequence[T], limit: int) -> list[T]:
    """At most ``limit`` items spread evenly over ``feeds`` (keeps every part of every file represented)."""
    if len(feeds) <= limit:
        return list(feeds)
    idx = np.linspace(0, len(feeds) - 1, limit).round().astype(int)
    return [feeds[i] for i in idx]


def load_npz(path: str | Path, session: ort.InferenceSession) -> list[Feeds]:
    """Samples from an .npz holding one array per model input.

    An array whose rank equals the input's holds samples along axis 0 (each fed with a batch
    of one); one rank higher holds whole per-sample inputs along axis 0. A rank-0 input (e.g.
    Silero's ``sr``) may be a scalar shared by every sample.
    """
    path = Path(path)
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError("--npz", f"cannot read {path} as .npz: {exc}") from None
    inputs = session.get_inputs()
    missing = [i.name for i in inputs if i.name not in data.files]
    if missing:
        raise ConfigError("--npz", f"{path} lacks arrays for model inputs {', '.join(missing)} (has {', '.join(data.files) or 'none'})")
    columns: dict[str, list[np.ndarray] | np.ndarray] = {}
    count: int | None = None
    for inp in inputs:
        arr = data[inp.name]
        rank = len(inp.shape)
        if rank == 0 and arr.ndim == 0:
            columns[inp.name] = arr
            continue
        if arr.ndim == rank:
            samples = [arr[i : i + 1] for i in range(arr.shape[0])] if rank else [arr]
        elif arr.ndim == rank + 1:
            samples = [arr[i] for i in range(arr.shape[0])]
        else:
            raise ConfigError("--npz", f"{path}: array {inp.name} has shape {arr.shape}; the input has rank {rank}")
        if count is not None and len(samples) != count:
            raise ConfigError("--npz", f"{path}: arrays hold different numbers of samples ({count} vs {len(samples)} in {inp.name})")
        count = len(samples)
        columns[inp.name] = samples
    if not count:
        raise ConfigError("--npz", f"empty calibration set: {path} holds no samples")
    return [
        {name: (col if isinstance(col, np.ndarray) else col[i]) for name, col in columns.items()}
        for i in range(count)
    ]

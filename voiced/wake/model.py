"""openWakeWord models, loaded once and shared: the front end (mel spectrogram + embedding) and heads.

The pipeline is openWakeWord's: 16 kHz audio as int16-valued floats → ``melspectrogram.onnx``
(8 frames per 80 ms, each call given 480 samples of context before its new audio) → ``x/10 + 2``
→ 76-frame windows every 8 frames → ``embedding_model.onnx`` (one 96-d embedding per 80 ms) →
each head over its last N embeddings (N from the head's input shape). The front end is the
cost and is shared by every head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.errors import ModelError
from voiced.runtime.onnx import SessionOptions, create_session

__all__ = ["FRAME_SAMPLES", "MEL_CONTEXT", "WakeHead", "WakeModel"]

log = logging.getLogger(__name__)

FRAME_SAMPLES = 1280
"""One wake-word frame: 80 ms at 16 kHz."""
MEL_CONTEXT = 480
"""Samples before the new audio each mel call sees (openWakeWord's 3 hops of context)."""
MEL_PER_FRAME = 8
WINDOW = 76
"""Mel frames per embedding window."""
MEL_BINS = 32


def _pick(path: Path) -> Path:
    """``NAME.int8.onnx`` beside ``NAME.onnx`` when voiced-quantize made one."""
    int8 = path.with_name(path.stem + ".int8.onnx")
    return int8 if path.suffix == ".onnx" and not path.stem.endswith(".int8") and int8.is_file() else path


@dataclass(frozen=True)
class WakeHead:
    """One wake word (or intent) classifier over the last ``frames`` embeddings."""

    name: str
    path: Path
    frames: int
    labels: tuple[str, ...]
    """What each reported score means (a single wake word: the head's name)."""
    columns: tuple[int, ...]
    """The output column of each label; a multi-class head's background class is not reported."""


class WakeModel:
    """The shared front end plus any number of heads; per-stream state lives in WakeStream."""

    def __init__(self, melspec: Path, embedding: Path, heads: list[Path], options: SessionOptions) -> None:
        self.melspec = create_session(_pick(melspec), options)
        self.embedding = create_session(_pick(embedding), options)
        self._mel_in = self.melspec.get_inputs()[0].name
        self._emb_in = self.embedding.get_inputs()[0].name
        self.heads: list[WakeHead] = []
        self._head_sessions = []
        for path in heads:
            session = create_session(_pick(path), options)
            inp = session.get_inputs()[0]
            shape = inp.shape
            if len(shape) != 3 or shape[2] != 96 or not isinstance(shape[1], int):
                raise ModelError(f"{path}: input {inp.name} {shape} is not an openWakeWord head ([1, N, 96])")
            out = session.get_outputs()[0]
            width = out.shape[-1] if isinstance(out.shape[-1], int) else 1
            name = path.name.removesuffix(".onnx").removesuffix(".int8")
            labels, columns = (name,), (0,)
            if width > 1:  # openWakeWord's multi-class heads name their classes in the output's name
                classes = _class_names(out.name, width)
                labels, columns = tuple(classes.values()), tuple(classes)
            self.heads.append(WakeHead(name, path, shape[1], labels, columns))
            self._head_sessions.append((session, inp.name))
        if not self.heads:
            raise ModelError("wake word: no head models given")
        self.max_frames = max(h.frames for h in self.heads)

    @classmethod
    def load(cls, directory_or_melspec: str | Path, heads: list[str | Path], embedding: str | Path | None = None,
             options: SessionOptions | None = None) -> WakeModel:
        """Front end from a folder holding ``melspectrogram.onnx`` and ``embedding_model.onnx`` (or the
        mel file itself with ``embedding``); ``heads`` are paths, or names of ``NAME.onnx`` in that folder."""
        base = Path(directory_or_melspec)
        folder = base if base.is_dir() else base.parent
        mel = folder / "melspectrogram.onnx" if base.is_dir() else base
        emb = Path(embedding) if embedding is not None else folder / "embedding_model.onnx"
        paths = []
        for head in heads:
            p = Path(head)
            if p.suffix != ".onnx" and len(p.parts) == 1:  # a name like "alexa_v0.1"
                p = folder / f"{head}.onnx"
            paths.append(p)
        for p in (mel, emb, *paths):
            if not _pick(p).is_file():
                raise ModelError(f"wake word model not found: {p}")
        return cls(mel, emb, paths, options or SessionOptions())

    def mel(self, samples: np.ndarray) -> np.ndarray:
        """Mel frames [n, 32] (openWakeWord's x/10 + 2) of int16-valued samples, context included."""
        out = self.melspec.run(None, {self._mel_in: samples[np.newaxis].astype(np.float32)})[0]
        return np.squeeze(out, axis=(1,)).reshape(-1, MEL_BINS) / 10.0 + 2.0

    def embed(self, windows: np.ndarray) -> np.ndarray:
        """Embeddings [b, 96] of mel windows [b, 76, 32], in one call."""
        x = windows.astype(np.float32)[:, :, :, np.newaxis]
        return self.embedding.run(None, {self._emb_in: x})[0].reshape(len(windows), 96)

    def scores(self, embeddings: np.ndarray) -> list[np.ndarray]:
        """Each head's scores on the newest embeddings [n >= head.frames, 96]."""
        out = []
        for head, (session, name) in zip(self.heads, self._head_sessions):
            x = embeddings[-head.frames:][np.newaxis].astype(np.float32)
            row = np.asarray(session.run(None, {name: x})[0], np.float32).reshape(-1)
            out.append(row[list(head.columns)])
        return out


def _class_names(output_name: str, width: int) -> dict[int, str]:
    """Column → class name from an output named like ``{"1": "1_minute_timer", …}``; column 0 is background."""
    import json

    try:
        mapping = json.loads(output_name)
        return {int(k): str(v) for k, v in sorted(mapping.items(), key=lambda kv: int(kv[0]))
                if 0 < int(k) < width}
    except (ValueError, AttributeError):
        return {i: f"class_{i}" for i in range(1, width)}

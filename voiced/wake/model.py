"""openWakeWord models, loaded once and shared: the front end (mel spectrogram + embedding) and heads.

The pipeline is openWakeWord's: 16 kHz audio as int16-valued floats → ``melspectrogram.onnx``
(8 frames per 80 ms, each call given 480 samples of context before its new audio) → ``x/10 + 2``
→ 76-frame windows every 8 frames → ``embedding_model.onnx`` (one 96-d embedding per 80 ms) →
each head over its last N embeddings (N from the head's input shape). The front end is the
cost and is shared by every head. The embedding model runs in its streaming form
(``embedding_model.stream.onnx``, see :mod:`voiced.wake.embedding`) when ``voiced-quantize
wake-stream`` wrote one beside it: the same numbers for about a quarter of the CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.errors import ModelError
from voiced.models.manifest import sha256_file, verify_model_file
from voiced.runtime.onnx import SessionOptions, create_session
from voiced.wake.embedding import MEL_BINS, MEL_PER_FRAME, WINDOW, Embedder, StreamingEmbedding, WindowEmbedding, stream_path

__all__ = ["FRAME_SAMPLES", "MEL_BINS", "MEL_CONTEXT", "MEL_PER_FRAME", "WINDOW", "WakeHead", "WakeModel"]

log = logging.getLogger(__name__)

FRAME_SAMPLES = 1280
"""One wake-word frame: 80 ms at 16 kHz."""
MEL_CONTEXT = 480
"""Samples before the new audio each mel call sees (openWakeWord's 3 hops of context)."""


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

    def __init__(self, melspec: Path, embedding: Path, heads: list[Path], options: SessionOptions,
                 stream: bool = True) -> None:
        self.melspec = create_session(_pick(melspec), options)
        self._mel_in = self.melspec.get_inputs()[0].name
        streaming = stream_path(embedding)
        self.embedder: Embedder
        if stream and streaming.is_file():
            _check_derived_from(streaming, embedding)
            self.embedder = StreamingEmbedding(create_session(streaming, options), streaming)
        else:
            if stream:
                log.warning("%s: no streaming form beside it; `voiced-quantize wake-stream %s` makes one"
                            " (the same scores for about a third of the wake word's CPU)", embedding, embedding.parent)
            self.embedder = WindowEmbedding(create_session(_pick(embedding), options))
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
             options: SessionOptions | None = None, stream: bool = True) -> WakeModel:
        """Front end from a folder holding ``melspectrogram.onnx`` and ``embedding_model.onnx`` (or the
        mel file itself with ``embedding``); ``heads`` are paths, or names of ``NAME.onnx`` in that folder.
        ``stream``: use ``embedding_model.stream.onnx`` when it is there (False: the window form, to compare)."""
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
        return cls(mel, emb, paths, options or SessionOptions(), stream)

    def mel(self, samples: np.ndarray) -> np.ndarray:
        """Mel frames [n, 32] (openWakeWord's x/10 + 2) of int16-valued samples, context included."""
        out = self.melspec.run(None, {self._mel_in: samples[np.newaxis].astype(np.float32)})[0]
        return np.squeeze(out, axis=(1,)).reshape(-1, MEL_BINS) / 10.0 + 2.0

    def scores(self, embeddings: np.ndarray) -> list[np.ndarray]:
        """Each head's scores on the newest embeddings [n >= head.frames, 96]."""
        out = []
        for head, (session, name) in zip(self.heads, self._head_sessions):
            x = embeddings[-head.frames:][np.newaxis].astype(np.float32)
            row = np.asarray(session.run(None, {name: x})[0], np.float32).reshape(-1)
            out.append(row[list(head.columns)])
        return out


def _check_derived_from(streaming: Path, embedding: Path) -> None:
    """A streaming form made from another embedding model (the source replaced since) must not load."""
    manifest = verify_model_file(streaming).manifest
    if manifest is None or not embedding.is_file():
        return
    made_from, actual = manifest.source.get("sha256"), sha256_file(embedding)
    if made_from != actual:
        raise ModelError(f"{streaming} was made from an embedding model with sha256 {made_from}, but {embedding} has"
                         f" {actual}: run voiced-quantize wake-stream {embedding.parent} again")


def _class_names(output_name: str, width: int) -> dict[int, str]:
    """Column → class name from an output named like ``{"1": "1_minute_timer", …}``; column 0 is background."""
    import json

    try:
        mapping = json.loads(output_name)
        return {int(k): str(v) for k, v in sorted(mapping.items(), key=lambda kv: int(kv[0]))
                if 0 < int(k) < width}
    except (ValueError, AttributeError):
        return {i: f"class_{i}" for i in range(1, width)}

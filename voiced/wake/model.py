"""openWakeWord models, loaded once and shared: the front end (mel spectrogram + embedding) and heads.

The pipeline is openWakeWord's: 16 kHz audio as int16-valued floats → ``melspectrogram.onnx``
(8 frames per 80 ms, each call given 480 samples of context before its new audio) → ``x/10 + 2``
→ 76-frame windows every 8 frames → ``embedding_model.onnx`` (one 96-d embedding per 80 ms) →
each head over its last N embeddings (N from the head's input shape). The front end is the
cost and is shared by every head. It runs as one streaming graph (``frontend.stream.onnx``, see
:mod:`voiced.wake.frontend`) when ``voiced-quantize wake-stream`` made one beside the models:
the same numbers for about a third of the CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.errors import ModelError
from voiced.models.manifest import manifest_path, sha256_file, verify_model_file
from voiced.runtime.onnx import SessionOptions, create_session
from voiced.wake.frontend import (
    FRAME_SAMPLES, FRONTEND_STREAM, MEL_CONTEXT, FrontEnd, StreamingFrontEnd, WindowFrontEnd,
)

__all__ = ["FRAME_SAMPLES", "MEL_CONTEXT", "WakeHead", "WakeModel", "check_made_from", "is_head_path"]

log = logging.getLogger(__name__)


def is_head_path(head: str) -> bool:
    """Whether a wake word head is given as a file path (else a name like "alexa_v0.1" in the folder)."""
    p = Path(head)
    return p.suffix == ".onnx" or len(p.parts) > 1


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
        streaming = embedding.with_name(FRONTEND_STREAM)
        self.frontend: FrontEnd
        if stream and streaming.is_file() and not manifest_path(streaming).is_file():
            # what it was made from is unknown (cp *.onnx leaves the .json behind): it may be stale
            log.warning("%s has no manifest (%s): it cannot be checked against the models it was made from;"
                        " the published front end is used (run voiced-quantize wake-stream %s again)",
                        streaming, manifest_path(streaming).name, streaming.parent)
            stream = False
        if stream and streaming.is_file():
            check_made_from(streaming, melspec, embedding)
            self.frontend = StreamingFrontEnd(create_session(streaming, options), streaming)
        else:
            if stream:
                log.warning("%s: no %s beside it; `voiced-quantize wake-stream %s` makes one (the same scores"
                            " for about a third of the wake word's CPU)", embedding, FRONTEND_STREAM, embedding.parent)
            self.frontend = WindowFrontEnd(create_session(_pick(melspec), options), create_session(_pick(embedding), options))
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
        ``stream``: use ``frontend.stream.onnx`` when it is there (False: the published models, to compare)."""
        mel, emb, paths = cls.find(directory_or_melspec, heads, embedding)
        return cls(mel, emb, paths, options or SessionOptions(), stream)

    @staticmethod
    def find(directory_or_melspec: str | Path, heads: list[str | Path],
             embedding: str | Path | None = None) -> tuple[Path, Path, list[Path]]:
        """The mel, embedding and head files :meth:`load` takes (before ``NAME.int8.onnx`` is
        preferred); ModelError names the first one missing."""
        base = Path(directory_or_melspec)
        folder = base if base.is_dir() else base.parent
        mel = folder / "melspectrogram.onnx" if base.is_dir() else base
        emb = Path(embedding) if embedding is not None else folder / "embedding_model.onnx"
        paths = [Path(head) if is_head_path(head) else folder / f"{head}.onnx" for head in heads]
        for p in (mel, emb, *paths):
            if not _pick(p).is_file():
                raise ModelError(f"wake word model not found: {p}")
        return mel, emb, paths

    def scores(self, embeddings: np.ndarray) -> list[np.ndarray]:
        """Each head's scores on the newest embeddings [n >= head.frames, 96]."""
        out = []
        for head, (session, name) in zip(self.heads, self._head_sessions):
            x = embeddings[-head.frames:][np.newaxis].astype(np.float32)
            row = np.asarray(session.run(None, {name: x})[0], np.float32).reshape(-1)
            out.append(row[list(head.columns)])
        return out


def check_made_from(streaming: Path, melspec: Path, embedding: Path) -> None:
    """A streaming front end made from other models (one replaced since) must not load."""
    manifest = verify_model_file(streaming).manifest
    if manifest is None:
        return
    made_from = {manifest.source.get("file"): manifest.source.get("sha256"),
                 **{str(s.get("file")): s.get("sha256") for s in manifest.quantization.get("sources", [])}}
    for path in (melspec, embedding):
        if path.name in made_from and path.is_file() and made_from[path.name] != (actual := sha256_file(path)):
            raise ModelError(f"{streaming} was made from a {path.name} with sha256 {made_from[path.name]}, but {path}"
                             f" has {actual}: run voiced-quantize wake-stream {path.parent} again")


def _class_names(output_name: str, width: int) -> dict[int, str]:
    """Column → class name from an output named like ``{"1": "1_minute_timer", …}``; column 0 is background."""
    import json

    try:
        mapping = json.loads(output_name)
        return {int(k): str(v) for k, v in sorted(mapping.items(), key=lambda kv: int(kv[0]))
                if 0 < int(k) < width}
    except (ValueError, AttributeError):
        return {i: f"class_{i}" for i in range(1, width)}

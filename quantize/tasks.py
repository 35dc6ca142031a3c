"""Per model family: the inputs it is calibrated on, and what "FP32 and INT8 agree" means for it.

- Silero VAD: speech/non-speech decisions at 0.5, each model carrying its own state over
  whole recordings as the daemon runs it.
- openWakeWord embedding: wake-word heads found beside the model score every clip with
  FP32 and with INT8 embeddings; a decision is "max score >= 0.5"; plus embedding cosine.
- Spelling CNN (a classifier): top-1 agreement, and top-1 accuracy against folder labels.
- .npz: top-1 agreement when the first output is [1, classes], else mean cosine.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quantize.calibration import AudioItem, Feeds
from quantize.frontends import (
    OwwFrontEnd,
    SpellingFrontEnd,
    load_audio,
    oww_noise,
    silero_run,
)
from quantize.options import Kind
from quantize.progress import Progress
from voiced.errors import ConfigError
from voiced.runtime.onnx import SessionOptions, create_session

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["ModelTask", "TaskResult", "cosine", "make_task"]

log = logging.getLogger(__name__)

THRESHOLD = 0.5


@dataclass(frozen=True)
class TaskResult:
    """FP32 vs INT8 on the task the model exists for."""

    metric: str
    """What ``agreement`` counts, in words."""
    agreement: float
    """Fraction (0..1) of decisions on which INT8 agrees with FP32."""
    count: int
    """Decisions compared."""
    details: dict[str, Any] = field(default_factory=dict)
    accuracy_fp32: float | None = None
    """Top-1 accuracy against labels, when the validation clips carry known labels."""
    accuracy_int8: float | None = None


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


class ModelTask(ABC):
    """A model family's front end and task comparison."""

    kind: Kind

    @abstractmethod
    def feeds(self, session: ort.InferenceSession, items: Sequence[Any], label: str) -> list[Feeds]:
        """Model inputs made from ``items`` as the FP32 model sees them in use."""

    @abstractmethod
    def compare(self, fp32: ort.InferenceSession, int8: ort.InferenceSession, items: Sequence[Any]) -> TaskResult:
        """Run both models on ``items`` and count agreeing decisions."""


def make_task(kind: Kind, model: Path, *, melspectrogram: Path | None = None, meta: Path | None = None) -> ModelTask | None:
    """The task for ``kind``; front-end files default to the ones beside ``model``."""
    if kind is Kind.SILERO:
        return SileroTask()
    if kind is Kind.OWW_EMBEDDING:
        mel = melspectrogram or model.parent / "melspectrogram.onnx"
        if not mel.is_file():
            raise ConfigError("--melspectrogram", f"openWakeWord's melspectrogram.onnx not found at {mel}")
        return OwwTask(OwwFrontEnd(mel), _find_heads(model.parent, exclude={model.name, mel.name}))
    if kind is Kind.SPELLING_CNN:
        path = meta or model.parent / "spelling_cnn_meta.json"
        if not path.is_file():
            raise ConfigError("--meta", f"the spelling CNN meta file (classes, mel dims) was not found at {path}")
        return SpellingTask(SpellingFrontEnd.from_meta(path))
    if kind is Kind.NPZ:
        return NpzTask()
    return None


# ------------------------------------------------------------------------------ Silero


class SileroTask(ModelTask):
    kind = Kind.SILERO

    def feeds(self, session: ort.InferenceSession, items: Sequence[AudioItem], label: str) -> list[Feeds]:
        out: list[Feeds] = []
        with Progress(label, len(items), "files") as progress:
            for item in items:
                out += silero_run(session, load_audio(item.path))[0]
                progress.step()
        return out

    def compare(self, fp32: ort.InferenceSession, int8: ort.InferenceSession, items: Sequence[AudioItem]) -> TaskResult:
        a, b = [], []
        with Progress("validate silero (each model carries its own state)", len(items), "files") as progress:
            for item in items:
                audio = load_audio(item.path)
                a.append(silero_run(fp32, audio, keep_feeds=False)[1])
                b.append(silero_run(int8, audio, keep_feeds=False)[1])
                progress.step()
        pa, pb = np.concatenate(a), np.concatenate(b)
        err = np.abs(pa - pb)
        return TaskResult(
            metric=f"speech/non-speech decisions at {THRESHOLD} agreeing, over 32 ms windows",
            agreement=float(np.mean((pa >= THRESHOLD) == (pb >= THRESHOLD))) if len(pa) else 0.0,
            count=len(pa),
            details={
                "files": len(items),
                "speech_fraction_fp32": float(np.mean(pa >= THRESHOLD)) if len(pa) else 0.0,
                "speech_fraction_int8": float(np.mean(pb >= THRESHOLD)) if len(pb) else 0.0,
                "probability_max_abs_error": float(err.max()) if len(err) else 0.0,
                "probability_mean_abs_error": float(err.mean()) if len(err) else 0.0,
            },
        )


# ------------------------------------------------------------------------------ openWakeWord


@dataclass(frozen=True)
class _Head:
    name: str
    session: Any
    input: str
    frames: int


def _find_heads(directory: Path, exclude: set[str]) -> list[_Head]:
    """Wake-word heads beside the embedding model: ONNX files mapping [1, N, 96] to one score."""
    heads = []
    for path in sorted(directory.glob("*.onnx")):
        if path.name in exclude or ".int8." in path.name:
            continue
        session = create_session(path, SessionOptions(threads=1))
        inp, out = session.get_inputs()[0], session.get_outputs()[0]
        # Single-score heads only ([1, 1]); multi-class heads (timer) have no single decision.
        if len(inp.shape) == 3 and inp.shape[2] == 96 and isinstance(inp.shape[1], int) and list(out.shape) == [1, 1]:
            heads.append(_Head(path.stem, session, inp.name, int(inp.shape[1])))
    return heads


class OwwTask(ModelTask):
    kind = Kind.OWW_EMBEDDING
    LEAD_S, TAIL_S = 2.0, 0.5
    """Quiet noise around each clip, so even a short one fills a head's 16-embedding window."""

    def __init__(self, frontend: OwwFrontEnd, heads: Sequence[_Head]) -> None:
        self.frontend = frontend
        self.heads = list(heads)

    def feeds(self, session: ort.InferenceSession, items: Sequence[AudioItem], label: str) -> list[Feeds]:
        name = session.get_inputs()[0].name
        out: list[Feeds] = []
        with Progress(label, len(items), "files") as progress:
            for item in items:
                out += [{name: w[np.newaxis]} for w in self.frontend.windows(load_audio(item.path))]
                progress.step()
        return out

    def _embed(self, session: ort.InferenceSession, windows: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {session.get_inputs()[0].name: windows})[0], np.float32).reshape(len(windows), -1)

    def compare(self, fp32: ort.InferenceSession, int8: ort.InferenceSession, items: Sequence[AudioItem]) -> TaskResult:
        cosines, decisions, score_err = [], [], []
        scores: dict[str, dict[str, list[float]]] = {}
        lead, tail = oww_noise(self.LEAD_S, 1), oww_noise(self.TAIL_S, 2)
        with Progress("validate openWakeWord embeddings", len(items), "files") as progress:
            for item in items:
                windows = self.frontend.windows(np.concatenate([lead, load_audio(item.path), tail]))
                ea, eb = self._embed(fp32, windows), self._embed(int8, windows)
                cosines += [cosine(x, y) for x, y in zip(ea, eb)]
                for head in self.heads:
                    sa, sb = self._score(head, ea), self._score(head, eb)
                    decisions.append((sa >= THRESHOLD) == (sb >= THRESHOLD))
                    score_err.append(abs(sa - sb))
                    scores.setdefault(item.path.name, {})[head.name] = [round(sa, 4), round(sb, 4)]
                progress.step()
        details: dict[str, Any] = {
            "files": len(items),
            "embedding_windows": len(cosines),
            "embedding_cosine_mean": float(np.mean(cosines)) if cosines else 0.0,
            "embedding_cosine_min": float(np.min(cosines)) if cosines else 0.0,
        }
        if not self.heads:
            log.warning("no wake-word heads beside the embedding model: agreement is the mean embedding cosine")
            return TaskResult("mean embedding cosine similarity (no wake-word heads found)",
                              details["embedding_cosine_mean"], len(cosines), details)
        details.update(heads=[h.name for h in self.heads], head_score_max_abs_error=float(max(score_err)),
                       max_scores_fp32_int8=scores)
        return TaskResult(
            metric=f"wake-word decisions (max head score >= {THRESHOLD} per clip and head) agreeing",
            agreement=float(np.mean(decisions)),
            count=len(decisions),
            details=details,
        )

    @staticmethod
    def _score(head: _Head, embeddings: np.ndarray) -> float:
        n = head.frames
        if len(embeddings) < n:
            embeddings = np.concatenate([np.zeros((n - len(embeddings), embeddings.shape[1]), np.float32), embeddings])
        best = 0.0
        for s in range(len(embeddings) - n + 1):
            out = head.session.run(None, {head.input: embeddings[np.newaxis, s : s + n]})[0]
            best = max(best, float(np.asarray(out).reshape(-1)[0]))
        return best


# ------------------------------------------------------------------------------ spelling CNN


class SpellingTask(ModelTask):
    kind = Kind.SPELLING_CNN

    def __init__(self, frontend: SpellingFrontEnd) -> None:
        self.frontend = frontend

    def feeds(self, session: ort.InferenceSession, items: Sequence[AudioItem], label: str) -> list[Feeds]:
        name = session.get_inputs()[0].name
        out: list[Feeds] = []
        with Progress(label, len(items), "files") as progress:
            for item in items:
                out += [{name: self.frontend.log_mel(c)} for c in self.frontend.clips(load_audio(item.path))]
                progress.step()
        return out

    def compare(self, fp32: ort.InferenceSession, int8: ort.InferenceSession, items: Sequence[AudioItem]) -> TaskResult:
        name = fp32.get_inputs()[0].name
        classes = self.frontend.classes
        top_a, top_b, labels = [], [], []
        with Progress("validate spelling CNN", len(items), "files") as progress:
            for item in items:
                batch = self.frontend.batch(self.frontend.clips(load_audio(item.path)))
                top_a += np.asarray(fp32.run(None, {name: batch})[0]).argmax(axis=1).tolist()
                top_b += np.asarray(int8.run(None, {name: batch})[0]).argmax(axis=1).tolist()
                labels += [classes.index(item.label) if item.label in classes else -1] * len(batch)
                progress.step()
        a, b, y = np.array(top_a), np.array(top_b), np.array(labels)
        known = y >= 0
        result = TaskResult(metric="top-1 class agreeing", agreement=float(np.mean(a == b)) if len(a) else 0.0,
                            count=len(a), details={"files": len(items), "labelled_clips": int(known.sum())})
        if known.any():
            acc_a, acc_b = float(np.mean(a[known] == y[known])), float(np.mean(b[known] == y[known]))
            result.details.update(correct_fp32=int((a[known] == y[known]).sum()), correct_int8=int((b[known] == y[known]).sum()))
            return TaskResult(result.metric, result.agreement, result.count, result.details, acc_a, acc_b)
        return result


# ------------------------------------------------------------------------------ npz


class NpzTask(ModelTask):
    kind = Kind.NPZ

    def feeds(self, session: ort.InferenceSession, items: Sequence[Feeds], label: str) -> list[Feeds]:
        return list(items)

    def compare(self, fp32: ort.InferenceSession, int8: ort.InferenceSession, items: Sequence[Feeds]) -> TaskResult:
        outs_a = [np.asarray(fp32.run(None, dict(f))[0]) for f in items]
        outs_b = [np.asarray(int8.run(None, dict(f))[0]) for f in items]
        if outs_a and all(o.ndim == 2 and o.shape[1] > 1 for o in outs_a):
            a = np.concatenate([o.argmax(axis=1) for o in outs_a])
            b = np.concatenate([o.argmax(axis=1) for o in outs_b])
            return TaskResult("top-1 class agreeing (first output read as [batch, classes])", float(np.mean(a == b)),
                              len(a), {"samples": len(items)})
        cos = [cosine(x, y) for x, y in zip(outs_a, outs_b)]
        return TaskResult("mean cosine similarity of the first output (not a classifier)",
                          float(np.mean(cos)) if cos else 0.0, len(cos), {"samples": len(items)})

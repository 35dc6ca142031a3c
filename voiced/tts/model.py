"""The ONNX side of a Piper voice: one whole-sentence model, or Piper's streaming encoder/decoder pair.

Whole model (``piper_train.export_onnx``): inputs ``input`` [1, N] int64 phoneme ids,
``input_lengths`` [1] int64, ``scales`` [3] float32 (noise_scale, length_scale, noise_w)
and, for multi-speaker voices, ``sid`` [1] int64; output ``output`` [1, 1, samples].

Streaming pair (``piper_train.export_onnx_streaming``): ``encoder.onnx`` takes the same
inputs and returns ``z`` [1, C, frames] (the prior sample), ``y_mask`` [1, 1, frames] and,
multi-speaker, ``g`` [1, gin, 1]; ``decoder.onnx`` takes ``z``, ``y_mask`` (and ``g``) for
any run of frames and returns audio, a fixed number of samples per frame (the hop, 256 for
Piper's voices; measured here from the first call). Decoding a long sentence in chunks
gives its first audio after one chunk instead of after the whole sentence; each chunk is
decoded with ``padding`` frames of its neighbours on each side, and their audio is cut
off again, so the decoder sees context across the joins (Piper's
``infer_onnx_streaming.py`` scheme: 45-frame chunks, 10 frames of padding).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from voiced.errors import ModelError
from voiced.runtime.onnx import RunCancel, SessionOptions, arena_release, create_session
from voiced.tts.errors import SynthesisCancelled

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["Encoded", "ModelInputs", "Span", "SplitModel", "WholeModel", "chunk_plan"]

log = logging.getLogger(__name__)

_SYNTH_INPUTS = {"input": ("tensor(int64)", 2), "input_lengths": ("tensor(int64)", 1), "scales": ("tensor(float)", 1)}
_SID = ("tensor(int64)", 1)


@dataclass(frozen=True)
class ModelInputs:
    """One sentence as the model takes it."""

    ids: np.ndarray
    """[1, N] int64 phoneme ids."""
    scales: np.ndarray
    """[3] float32: noise_scale, length_scale, noise_w."""
    sid: np.ndarray | None
    """[1] int64 speaker id, only for multi-speaker voices."""

    @classmethod
    def build(cls, ids: list[int] | tuple[int, ...], noise_scale: float, length_scale: float, noise_w: float,
              sid: int | None) -> ModelInputs:
        return cls(ids=np.asarray(ids, dtype=np.int64).reshape(1, -1),
                   scales=np.array([noise_scale, length_scale, noise_w], dtype=np.float32),
                   sid=None if sid is None else np.array([sid], dtype=np.int64))

    def feed(self) -> dict[str, np.ndarray]:
        feed = {"input": self.ids, "input_lengths": np.array([self.ids.shape[1]], dtype=np.int64),
                "scales": self.scales}
        if self.sid is not None:
            feed["sid"] = self.sid
        return feed


def _check_io(session: ort.InferenceSession, path: Path, inputs: dict[str, tuple[str, int]],
              outputs: tuple[str, ...]) -> None:
    """``session`` has exactly ``inputs`` (type, rank) and at least ``outputs``; else ModelError naming ``path``."""
    got = {i.name: (i.type, len(i.shape)) for i in session.get_inputs()}
    if got != inputs:
        want = ", ".join(f"{n} ({t}, rank {r})" for n, (t, r) in inputs.items())
        have = ", ".join(f"{n} ({t}, rank {r})" for n, (t, r) in got.items())
        raise ModelError(f"{path}: not the Piper layout this voice config calls for: inputs must be {want}; "
                         f"the model has {have}")
    names = [o.name for o in session.get_outputs()]
    missing = [n for n in outputs if n not in names]
    if missing:
        raise ModelError(f"{path}: output(s) {', '.join(missing)} missing (the model has {', '.join(names)})")


def _synth_inputs(multi_speaker: bool) -> dict[str, tuple[str, int]]:
    return {**_SYNTH_INPUTS, "sid": _SID} if multi_speaker else dict(_SYNTH_INPUTS)


def _run(session: ort.InferenceSession, path: Path, outputs: list[str] | None, feed: dict[str, Any],
         run_options: ort.RunOptions | None = None, cancel: RunCancel | None = None) -> list[Any]:
    try:
        return session.run(outputs, feed, run_options)
    except Exception as exc:  # onnxruntime raises several unrelated types
        if cancel is not None and cancel.cancelled:
            raise SynthesisCancelled(f"{path}: cancelled") from exc
        raise ModelError(f"{path}: inference failed: {exc}") from exc


def _audio(out: np.ndarray, path: Path) -> np.ndarray:
    audio = np.asarray(out, dtype=np.float32)
    if audio.ndim > 1 and any(d != 1 for d in audio.shape[:-1]):
        raise ModelError(f"{path}: expected one channel of audio [1, 1, samples], got shape {audio.shape}")
    return audio.reshape(-1)


def _per_sentence(options: SessionOptions) -> SessionOptions:
    # every sentence is a new input length: ONNX Runtime's per-shape memory plans only pile up
    # (joe medium, 600 sentences of 1-35 words: 439 MB RSS with them, 358 MB without, same CPU)
    return replace(options, memory_pattern=False)


class WholeModel:
    """A Piper ``voice.onnx``: one call turns a sentence's ids into its audio."""

    def __init__(self, session: ort.InferenceSession, path: Path) -> None:
        self._session = session
        self.path = path
        self._output = session.get_outputs()[0].name
        self._running = 0  # sentences in the session now (two Wyoming workers may share it)
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path, multi_speaker: bool, options: SessionOptions) -> WholeModel:
        path = Path(path)
        session = create_session(path, _per_sentence(options))
        _check_io(session, path, _synth_inputs(multi_speaker), ())
        return cls(session, path)

    def run(self, inputs: ModelInputs, release: bool = False, release_if_shared: bool = False,
            cancel: RunCancel | None = None) -> np.ndarray:
        """Float audio of one sentence, 1-D. ``release``: give the memory this sentence made ONNX
        Runtime's arena grow by back afterwards (a sentence far longer than usual).
        ``release_if_shared``: the same when another sentence is running when this one starts: the
        arena would keep what the two needed together, which is more than either alone, and how
        much more depends on how they overlap. ``cancel``: SynthesisCancelled once it is cancelled."""
        with self._lock:
            self._running += 1
            release = release or (release_if_shared and self._running > 1)
        try:
            with arena_release(release, cancel) as run_options:
                out = _run(self._session, self.path, [self._output], inputs.feed(), run_options, cancel)[0]
        finally:
            with self._lock:
                self._running -= 1
        return _audio(out, self.path)


@dataclass(frozen=True)
class Encoded:
    """The encoder's output for one sentence: the decoder's input, frame by frame."""

    z: np.ndarray
    """[1, C, frames] float32."""
    y_mask: np.ndarray
    """[1, 1, frames] float32."""
    g: np.ndarray | None
    """[1, gin, 1] speaker embedding of multi-speaker voices."""

    @property
    def frames(self) -> int:
        return int(self.z.shape[2])


class SplitModel:
    """Piper's streaming export: ``encoder.onnx`` once per sentence, ``decoder.onnx`` chunk by chunk."""

    def __init__(self, encoder: ort.InferenceSession, decoder: ort.InferenceSession,
                 encoder_path: Path, decoder_path: Path, multi_speaker: bool) -> None:
        self._encoder, self._decoder = encoder, decoder
        self.encoder_path, self.decoder_path = encoder_path, decoder_path
        self._multi = multi_speaker
        self._dec_output = decoder.get_outputs()[0].name
        self._hop: int | None = None

    @classmethod
    def load(cls, encoder_path: str | Path, decoder_path: str | Path, multi_speaker: bool,
             options: SessionOptions) -> SplitModel:
        encoder_path, decoder_path = Path(encoder_path), Path(decoder_path)
        encoder = create_session(encoder_path, _per_sentence(options))
        decoder = create_session(decoder_path, _per_sentence(options))
        carried = ("z", "y_mask", "g") if multi_speaker else ("z", "y_mask")
        _check_io(encoder, encoder_path, _synth_inputs(multi_speaker), carried)
        ranks = {"z": 3, "y_mask": 3, "g": 3}
        _check_io(decoder, decoder_path, {n: ("tensor(float)", ranks[n]) for n in carried}, ())
        return cls(encoder, decoder, encoder_path, decoder_path, multi_speaker)

    @property
    def hop(self) -> int | None:
        """Audio samples per frame, known after the first decoder call."""
        return self._hop

    def encode(self, inputs: ModelInputs, cancel: RunCancel | None = None) -> Encoded:
        names = ["z", "y_mask", "g"] if self._multi else ["z", "y_mask"]
        out = _run(self._encoder, self.encoder_path, names, inputs.feed(), cancel and cancel.options(), cancel)
        z, y_mask = (np.asarray(a, dtype=np.float32) for a in out[:2])
        if z.ndim != 3 or y_mask.shape != (1, 1, z.shape[2]):
            raise ModelError(f"{self.encoder_path}: z {z.shape} and y_mask {y_mask.shape} are not [1, C, T], [1, 1, T]")
        return Encoded(z=z, y_mask=y_mask, g=np.asarray(out[2], dtype=np.float32) if self._multi else None)

    def decode(self, encoded: Encoded, start: int = 0, end: int | None = None,
               cancel: RunCancel | None = None) -> np.ndarray:
        """Float audio of frames ``start:end``, decoded on their own (no context beyond them)."""
        end = encoded.frames if end is None else end
        feed = {"z": np.ascontiguousarray(encoded.z[:, :, start:end]),
                "y_mask": np.ascontiguousarray(encoded.y_mask[:, :, start:end])}
        if encoded.g is not None:
            feed["g"] = encoded.g
        out = _run(self._decoder, self.decoder_path, [self._dec_output], feed, cancel and cancel.options(), cancel)
        audio = _audio(out[0], self.decoder_path)
        frames = end - start
        hop, extra = divmod(len(audio), frames) if frames else (0, 0)
        if extra or hop < 1:
            raise ModelError(f"{self.decoder_path}: {len(audio)} samples for {frames} frames is not a whole hop")
        if self._hop is None:
            self._hop = hop
        elif hop != self._hop:
            raise ModelError(f"{self.decoder_path}: hop changed from {self._hop} to {hop} samples per frame")
        return audio

    def decode_chunks(self, encoded: Encoded, chunk_frames: int, padding: int) -> Iterator[np.ndarray]:
        """Float audio of the whole sentence in pieces of ``chunk_frames`` frames, joined seamlessly."""
        for span in chunk_plan(encoded.frames, chunk_frames, padding):
            yield self.decode_span(encoded, span)

    def decode_span(self, encoded: Encoded, span: Span, cancel: RunCancel | None = None) -> np.ndarray:
        """Float audio of frames ``span.start:span.end``, decoded with the span's context frames."""
        audio = self.decode(encoded, span.lo, span.hi, cancel)
        hop = len(audio) // (span.hi - span.lo)
        return audio[(span.start - span.lo) * hop : len(audio) - (span.hi - span.end) * hop]


@dataclass(frozen=True)
class Span:
    """One decoder call of a chunked sentence: frames ``lo:hi`` decoded, ``start:end`` kept."""

    lo: int
    start: int
    end: int
    hi: int


def chunk_plan(frames: int, chunk_frames: int, padding: int) -> list[Span]:
    """How a sentence of ``frames`` frames is decoded: chunks of ``chunk_frames`` with ``padding`` each side.

    A sentence of at most ``chunk_frames + 2 * padding`` frames is decoded in one call.
    """
    if frames <= chunk_frames + 2 * padding:
        return [Span(0, 0, frames, frames)]
    return [Span(max(0, start - padding), start, min(start + chunk_frames, frames),
                 min(frames, start + chunk_frames + padding))
            for start in range(0, frames, chunk_frames)]

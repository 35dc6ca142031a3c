"""Running voiced's Recognizer with taps on a transducer's parts: recording their inputs, and
shadowing the FP32 decoding path with the INT8 parts to count agreeing joiner decisions.

- ``capture``: the encoder/decoder/joiner feeds of real utterances (calibration, output checks);
- ``compare_decoding``: FP32 vs INT8 decoding of whole utterances (identical token sequences,
  token agreement by edit distance, decision agreement without the cascade, time per utterance);
- ``fp16_reference``: the same against FP32 weights rounded to FP16, the model's own sensitivity.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from quantize.calibration import AudioItem, Feeds, subsample
from quantize.frontends import load_audio
from quantize.progress import Progress
from quantize.tasks import TaskResult
from quantize.validate import SpeedResult
from voiced.asr.model import ModelFiles, TransducerModel
from voiced.asr.recognizer import Recognizer, RecognizerConfig
from voiced.runtime.onnx import SessionOptions

__all__ = ["PARTS", "capture", "compare_decoding", "fp16_reference", "quiet_fp32_warning", "quiet_log"]

PARTS = ("encoder", "decoder", "joiner")


class _Sampler:
    """Keeps at most ~2x ``limit`` items spread over a stream of unknown length (stride doubling)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.stride, self.seen, self.items = limit, 1, 0, []

    def add(self, make: Callable[[], Feeds]) -> None:
        if self.seen % self.stride == 0:
            self.items.append(make())
            if len(self.items) > 2 * self.limit:
                self.items, self.stride = self.items[::2], self.stride * 2
        self.seen += 1

    def result(self) -> list[Feeds]:
        return subsample(self.items, self.limit)


class _Tap:
    """Hooks a TransducerModel instance: records the feeds of every part and, with a shadow
    (INT8) model, counts joiner decisions on which the shadow agrees along this model's path."""

    def __init__(self, model: TransducerModel, limit: int, shadow: TransducerModel | None = None) -> None:
        self.model, self.shadow = model, shadow
        self.samplers = {part: _Sampler(limit) for part in PARTS}
        self.agree = self.total = 0
        self._orig = (model.run_encoder, model.run_decoder, model.run_joiner)
        enc_in = [i.name for i in model.encoder.get_inputs()]
        self._enc_names = (enc_in[0], [s.name for s in model.states])
        self.start_utterance()

    def start_utterance(self) -> None:
        self._shadow_states = self.shadow.initial_states() if self.shadow else None
        self._enc: tuple[np.ndarray, np.ndarray | None] | None = None
        self._dec: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        m = self.model
        m.run_encoder, m.run_decoder, m.run_joiner = self._encoder, self._decoder, self._joiner  # type: ignore[method-assign]
        # One joiner call per frame, with the decoder's own output array: the shadow is compared row by
        # row (an INT8 joiner scores each frame alone) and finds its decoder output by that array's id.
        # The FP32 path is the same either way (greedy search batches only row-independent joiners).
        batched, m.joiner_rows_independent = m.joiner_rows_independent, False
        try:
            yield
        finally:
            m.run_encoder, m.run_decoder, m.run_joiner = self._orig  # type: ignore[method-assign]
            m.joiner_rows_independent = batched

    def _encoder(self, features: np.ndarray, states: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        x, names = self._enc_names
        self.samplers["encoder"].add(lambda: {x: features[np.newaxis], **dict(zip(names, states))})
        out, new_states = self._orig[0](features, states)
        q = None
        if self.shadow is not None:
            q, self._shadow_states = self.shadow.run_encoder(features, self._shadow_states)
        self._enc = (out, q)
        return out, new_states

    def _decoder(self, contexts: np.ndarray) -> np.ndarray:
        self.samplers["decoder"].add(lambda: {self.model.decoder_in_name: contexts})
        out = self._orig[1](contexts)
        # Keyed by id: the search hands the same array back to the joiner; keeping it alive keeps the id unique.
        self._dec[id(out)] = (out, self.shadow.run_decoder(contexts) if self.shadow else None)
        return out

    def _joiner(self, encoder_out: np.ndarray, decoder_out: np.ndarray) -> np.ndarray:
        enc_name, dec_name = self.model.joiner_in_names
        self.samplers["joiner"].add(lambda: {enc_name: encoder_out, dec_name: decoder_out})
        logits = self._orig[2](encoder_out, decoder_out)
        if self.shadow is not None and self._enc is not None and id(decoder_out) in self._dec:
            ref, q_enc = self._enc
            t = _row_of(encoder_out, ref)
            q_dec = self._dec[id(decoder_out)][1]
            if t is not None and q_enc is not None and q_dec is not None:
                q_logits = self.shadow.run_joiner(q_enc[t : t + 1], q_dec)
                self.total += len(logits)
                self.agree += int(np.sum(np.argmax(logits, axis=-1) == np.argmax(q_logits, axis=-1)))
        return logits


def _row_of(view: np.ndarray, frames: np.ndarray) -> int | None:
    """Which row of ``frames`` the one-row ``view`` is (greedy search passes ``encoder_out[t:t+1]``)."""
    if frames.ndim == 2 and frames.strides[0] and np.shares_memory(view, frames):
        offset = view.__array_interface__["data"][0] - frames.__array_interface__["data"][0]
        t = offset // frames.strides[0]
        if 0 <= t < len(frames):
            return int(t)
    hits = np.flatnonzero(np.all(frames == view.reshape(1, -1), axis=1)) if frames.ndim == 2 else []
    return int(hits[0]) if len(hits) else None


def _decode(recognizer: Recognizer, audio: np.ndarray) -> tuple[tuple[int, ...], float]:
    start = time.perf_counter()
    stream = recognizer.create_stream()
    stream.accept_waveform(audio)
    result = recognizer.finish(stream)
    return result.token_ids, time.perf_counter() - start


def capture(model: TransducerModel, items: Sequence[AudioItem], limit: int, label: str) -> dict[str, list[Feeds]]:
    tap = _Tap(model, limit)
    recognizer = Recognizer(model, RecognizerConfig(threads=1))
    with tap.attached(), Progress(label, len(items), "utterances") as progress:
        for item in items:
            tap.start_utterance()
            _decode(recognizer, load_audio(item.path))
            progress.step()
    return {part: s.result() for part, s in tap.samplers.items()}


def compare_decoding(fp32: TransducerModel, int8: TransducerModel, items: Sequence[AudioItem], limit: int
                      ) -> tuple[TaskResult, dict[str, list[Feeds]], SpeedResult]:
    rec_a, rec_b = Recognizer(fp32, RecognizerConfig(threads=1)), Recognizer(int8, RecognizerConfig(threads=1))
    tap = _Tap(fp32, limit, shadow=int8)
    same = edits = ref_tokens = int8_tokens = 0
    times = [0.0, 0.0]
    with Progress("decode FP32 vs INT8", len(items), "utterances") as progress:
        for item in items:
            audio = load_audio(item.path)
            ids_a, dt_a = _decode(rec_a, audio)
            ids_b, dt_b = _decode(rec_b, audio)
            times[0] += dt_a
            times[1] += dt_b
            with tap.attached():  # the FP32 path again, with the INT8 parts shadowing every call
                tap.start_utterance()
                _decode(rec_a, audio)
            same += ids_a == ids_b
            edits += _edit_distance(ids_a, ids_b)
            ref_tokens += len(ids_a)
            int8_tokens += len(ids_b)
            progress.step()
    n = len(items)
    task = TaskResult(
        metric="utterances decoded to identical token sequences (greedy search)",
        agreement=same / n if n else 0.0,
        count=n,
        details={
            "utterances": n,
            "tokens_fp32": ref_tokens,
            "tokens_int8": int8_tokens,
            "token_agreement": 1 - edits / ref_tokens if ref_tokens else 1.0,
            "decision_agreement": tap.agree / tap.total if tap.total else 1.0,
            "decisions": tap.total,
        },
    )
    speed = SpeedResult(n, 1000 * times[0] / max(n, 1), 1000 * times[1] / max(n, 1))
    return task, {part: s.result() for part, s in tap.samplers.items()}, speed


def fp16_reference(fp32: TransducerModel, files: ModelFiles, items: Sequence[AudioItem]) -> dict[str, float]:
    """Identical-utterance and token agreement of FP32 vs FP32 weights rounded to FP16."""
    with tempfile.TemporaryDirectory(prefix="voiced-quantize-fp16-") as tmp:
        paths = []
        for src in (files.encoder, files.decoder, files.joiner):
            model = onnx.load(str(src))
            for init in model.graph.initializer:
                if init.data_type == onnx.TensorProto.FLOAT:
                    arr = numpy_helper.to_array(init)
                    init.CopyFrom(numpy_helper.from_array(arr.astype(np.float16).astype(np.float32), init.name))
            paths.append(Path(tmp) / src.name)
            onnx.save(model, str(paths[-1]))
        with quiet_fp32_warning():
            rounded = TransducerModel(ModelFiles(*paths, files.tokens), SessionOptions(threads=1))
        rec_a, rec_b = Recognizer(fp32, RecognizerConfig(threads=1)), Recognizer(rounded, RecognizerConfig(threads=1))
        same = edits = total = 0
        with Progress("decode FP32 vs FP16-rounded weights", len(items), "utterances") as progress:
            for item in items:
                audio = load_audio(item.path)
                a, b = _decode(rec_a, audio)[0], _decode(rec_b, audio)[0]
                same += a == b
                edits += _edit_distance(a, b)
                total += len(a)
                progress.step()
    return {"identical": same / len(items), "token_agreement": 1 - edits / total if total else 1.0}


def _edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


@contextlib.contextmanager
def quiet_log(name: str) -> Iterator[None]:
    """Only errors from logger ``name`` meanwhile: files loaded on purpose make its warnings noise."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def quiet_manifest_check() -> contextlib.AbstractContextManager[None]:
    """The files are loaded on purpose without manifests here: the FP32 sources, and the INT8
    outputs before their manifests exist; voiced.models.manifest's warnings about that are noise."""
    return quiet_log("voiced.models.manifest")


def quiet_fp32_warning() -> contextlib.AbstractContextManager[None]:
    """The FP32 parts are loaded on purpose here; voiced.asr.model's 'loading FP32' warning is noise."""
    return quiet_log("voiced.asr.model")

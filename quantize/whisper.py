"""``voiced-quantize asr DIR`` on a sherpa-onnx Whisper directory: ``<name>-{encoder,decoder}.int8.onnx``.

The method follows sherpa-onnx's own Whisper INT8 files (``scripts/whisper/export-onnx.py``):
dynamic quantization of the MatMul weights to QInt8 in both parts; ``--method``/``--op-types``
/``--per-channel`` override it as for any model. The decoder's tied output projection is first
written as a MatMul with a constant weight (:mod:`quantize.whisper_logits`), so it is quantized
too: it was FP32 and ~40 % of an INT8 decoder call. LayerNormalization is then written out as
primitive operators (:mod:`quantize.layernorm`), so the INT8 tokens do not depend on the ONNX
Runtime version's LayerNorm kernel. With ``--method static`` the encoder is
calibrated on log-mel inputs made by voiced's Whisper front end from the calibration files;
the decoder (self-attention cache, one token per call) is always quantized dynamically.

Validation decodes the held-back utterances (or ``--validate-audio``) with voiced's Whisper
recognizer twice, FP32 and INT8 files, 1 thread each, and reports: utterances with identical
tokens, token agreement (1 − token edit distance / FP32 tokens, the task agreement judged
against ``--min-agreement``), WER of each against reference transcripts when the audio has them
(:mod:`quantize.transcripts`; normalizer :data:`voiced.asr.wer.NORMALIZER`; the INT8 WER may
exceed FP32's by ``--max-accuracy-drop`` points), and decoding time per utterance. The encoder's
outputs are also compared on the same inputs.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from quantize.calibration import Feeds, calibration_and_check, subsample
from quantize.decoding import _edit_distance, quiet_manifest_check
from quantize.frontends import load_audio
from quantize.graph import describe, load_onnx
from quantize.layernorm import lower_layer_norms
from quantize.manifest import partial, publish, removed_on_failure
from quantize.methods import choose_method, preprocess, quantize_file
from quantize.options import Method, QuantizeOptions
from quantize.progress import Progress, say
from quantize.tasks import TaskResult
from quantize.tool import QUANTIZED_OPS, check_output, copy_metadata, default_output
from quantize.transcripts import find_references
from quantize.validate import Report, SpeedResult, compare_outputs, judge, measure_speed
from quantize.whisper_logits import untie_logits
from voiced.asr.wer import NORMALIZER, word_errors
from voiced.asr.whisper import MAX_FRAMES, MAX_SPEECH_FRAMES, WhisperConfig, WhisperRecognizer, log_mel
from voiced.asr.whisper_model import WhisperFiles, WhisperModel
from voiced.errors import ModelError
from voiced.runtime.onnx import SessionOptions

__all__ = ["SHERPA_WHISPER_OPS", "WhisperReport", "quantize_whisper", "whisper_fp32_files"]

log = logging.getLogger(__name__)

SHERPA_WHISPER_OPS = ("MatMul",)
"""What sherpa-onnx's Whisper export quantizes (dynamic, QInt8 weights) in encoder and decoder."""
PARTS = ("encoder", "decoder")
ENCODER_SPEED_CALLS = 20  # an encoder call is tens of ms: 20 interleaved pairs give a stable mean


def whisper_fp32_files(directory: str | Path) -> WhisperFiles:
    """``<name>-encoder.onnx``, ``<name>-decoder.onnx``, ``<name>-tokens.txt`` (FP32, whatever INT8 files exist)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelError(f"ASR model {directory}: a file, not a model directory" if directory.exists()
                         else f"ASR model directory not found: {directory}")
    tokens = sorted(directory.glob("*-tokens.txt"))
    if len(tokens) != 1:
        raise ModelError(f"Whisper model {directory}: expected one NAME-tokens.txt, found {len(tokens)}")
    name = tokens[0].name[: -len("-tokens.txt")]
    parts = [directory / f"{name}-{part}.onnx" for part in PARTS]
    for path in parts:
        if not path.is_file():
            raise ModelError(f"Whisper model {directory}: the FP32 {path.name} is missing")
    return WhisperFiles(encoder=parts[0], decoder=parts[1], tokens=tokens[0])


@dataclass
class WhisperReport:
    """Per part: a Report (method, sizes, encoder output errors and call speed); for the whole: transcripts."""

    directory: Path
    parts: dict[str, Report]
    task: TaskResult | None = None
    speed: SpeedResult | None = None
    """Whole-utterance recognition time (front end + encoder + greedy decoder), 1 thread."""
    wer: dict[str, Any] | None = None
    """WER of FP32 and INT8 against the references, when the validation audio has them."""
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        speed = {**asdict(self.speed), "ratio": round(self.speed.ratio, 3), "threads": 1,
                 "unit": "ms per utterance"} if self.speed else None
        return {
            "directory": str(self.directory), "family": "whisper",
            "parts": {k: v.to_dict() for k, v in self.parts.items()},
            "task": asdict(self.task) if self.task else None, "wer": self.wer,
            "decode_speed": speed, "passed": self.passed, "failures": self.failures,
        }

    def summary(self) -> str:
        lines = [f"{self.directory}:"]
        for report in self.parts.values():
            lines += ["  " + line for line in report.summary().splitlines()
                      if "PASSED" not in line and "FAILED" not in line and "NOT VALIDATED" not in line]
        if self.task:
            d = self.task.details
            lines.append(f"  decoding  {100 * self.task.agreement:.2f}% {self.task.metric} ({self.task.count} tokens),"
                         f" {d['identical']}/{d['utterances']} utterances identical")
        if self.wer:
            lines.append(f"  WER       FP32 {self.wer['fp32']:.2f}%, INT8 {self.wer['int8']:.2f}% on {self.wer['utterances']}"
                         f" utterances ({self.wer['words']} words; {NORMALIZER})")
        if self.speed:
            lines.append(f"  speed     {self.speed.fp32_ms:.1f} ms -> {self.speed.int8_ms:.1f} ms per utterance, 1 thread"
                         f" (x{self.speed.ratio:.2f})")
        lines.append("  PASSED" if self.passed else "  FAILED: " + "; ".join(self.failures))
        return "\n".join(lines)


def _encoder_feeds(model: WhisperModel, items: Sequence[Any], limit: int, tail: int) -> list[Feeds]:
    """Encoder inputs as the recognizer builds them: Whisper log-mel + ``tail`` zero frames (≤ 30 s).
    ``tail`` = MAX_FRAMES pads every input to the full 30 s window (one shape, as calibration needs)."""
    feeds = []
    for item in items:
        mel = log_mel(load_audio(item.path), model.n_mels)
        n = min(len(mel), MAX_SPEECH_FRAMES)
        padded = np.zeros((min(n + tail, MAX_FRAMES), model.n_mels), np.float32)
        padded[:n] = mel[:n]
        feeds.append({"mel": np.ascontiguousarray(padded.T[np.newaxis])})
    return subsample(feeds, limit)


def _compare(fp32: WhisperRecognizer, int8: WhisperRecognizer, items: Sequence[Any],
             refs: dict[Path, str]) -> tuple[TaskResult, SpeedResult, dict[str, Any] | None]:
    same = edits = total = 0
    errors = {"fp32": 0, "int8": 0}
    words = scored = 0
    times = [0.0, 0.0]
    with Progress("decode FP32 and INT8", len(items), "utterances") as progress:
        for item in items:
            samples = load_audio(item.path)
            results = []
            for k, rec in enumerate((fp32, int8)):
                start = time.perf_counter()
                results.append(rec.recognize(samples))
                times[k] += time.perf_counter() - start
            a, b = results[0].token_ids, results[1].token_ids
            same += a == b
            edits += _edit_distance(a, b)
            total += len(a)
            ref = refs.get(item.path.resolve())
            if ref is not None:
                scored += 1
                for key, result in zip(("fp32", "int8"), results):
                    e, n = word_errors(ref, result.text)
                    errors[key] += e
                words += n
            progress.step()
    n = len(items)
    wer = None
    accuracy: tuple[float | None, float | None] = (None, None)
    if words:
        wer = {"fp32": round(100 * errors["fp32"] / words, 2), "int8": round(100 * errors["int8"] / words, 2),
               "utterances": scored, "words": words, "normalizer": NORMALIZER}
        # judge() reads accuracies: 1 - WER, so the "drop" it checks is the WER increase in points
        accuracy = (1 - errors["fp32"] / words, 1 - errors["int8"] / words)
    task = TaskResult(
        metric="token agreement (1 - token edit distance / FP32 tokens)",
        # more edits than FP32 tokens (INT8 babbling) is no agreement at all, not a negative one
        agreement=max(0.0, 1 - edits / total) if total else 1.0, count=total,
        details={"identical": same, "utterances": n, "token_edits": edits},
        accuracy_fp32=accuracy[0], accuracy_int8=accuracy[1],
    )
    return task, SpeedResult(n, 1000 * times[0] / max(n, 1), 1000 * times[1] / max(n, 1)), wer


def quantize_whisper(
    directory: str | Path,
    *,
    audio: Sequence[str | Path],
    validate_audio: Sequence[str | Path] = (),
    options: QuantizeOptions | None = None,
) -> WhisperReport:
    """Write ``<name>-encoder.int8.onnx`` and ``<name>-decoder.int8.onnx`` (+ manifests) and validate them."""
    options = options or QuantizeOptions()
    directory = Path(directory)
    files = whisper_fp32_files(directory)
    cal_items, check_items = calibration_and_check(audio, validate_audio, options.holdout, options.seed)
    session = SessionOptions(threads=1)
    with quiet_manifest_check():
        fp32_model = WhisperModel(files, session)
    config = WhisperConfig(threads=1)
    sources = {"encoder": files.encoder, "decoder": files.decoder}
    outputs = {part: default_output(path) for part, path in sources.items()}
    for out in outputs.values():
        check_output(out, options)
    reports: dict[str, Report] = {}
    written = {part: partial(out) for part, out in outputs.items()}  # validated there, then moved into place
    with removed_on_failure(written.values()):
        with tempfile.TemporaryDirectory(prefix="voiced-quantize-whisper-") as tmp:
            for part, src in sources.items():
                model = load_onnx(src)
                if QUANTIZED_OPS & set(describe(model, src).ops):
                    raise ModelError(f"{src} is already quantized; give the FP32 {part}")
                pre = Path(tmp) / f"{part}.onnx"
                skipped = preprocess(src, pre) if options.preprocess else None
                if not options.preprocess:
                    onnx.save(model, str(pre))
                untied = 0
                if part == "decoder":
                    # the tied output projection is the decoder's largest MatMul: quantized only untied
                    prepared = load_onnx(pre)
                    untied = untie_logits(prepared)
                    if untied:
                        onnx.save(prepared, str(pre))
                info = describe(load_onnx(pre), src)
                requested = options.method
                if part == "decoder" and requested is Method.STATIC:
                    # Its inputs are a growing token context and a 448-row cache: one calibration set
                    # cannot stand for them, and sherpa-onnx's own INT8 decoder is dynamic too.
                    say("decoder: --method static applies to the encoder; the decoder is quantized dynamically")
                    requested = Method.DYNAMIC
                choice = choose_method(info, requested, has_calibration=part == "encoder")
                say(f"{part}: method {choice.method.value}: {choice.reason}")
                part_options = options
                if choice.method is Method.DYNAMIC and not options.op_types:
                    part_options = replace(options, op_types=SHERPA_WHISPER_OPS)
                feeds: list[Feeds] = []
                if choice.method is Method.STATIC:
                    say(f"encoder: calibrating on {len(cal_items)} files through the Whisper front end")
                    # onnxruntime's calibrators stack each tensor over the inputs, so they must share a shape
                    feeds = _encoder_feeds(fp32_model, cal_items, options.max_calibration, MAX_FRAMES)
                say(f"{part}: quantizing ({choice.method.value}) -> {outputs[part]}")
                params = quantize_file(pre, written[part], info, choice.method, part_options, feeds)
                params["preprocess"] = "done" if not skipped else f"skipped: {skipped}"
                if part == "decoder":
                    params["logits_untied"] = untied
                # ONNX Runtime's LayerNorm kernel changes between versions and INT8 re-quantizes its output:
                # written out, the INT8 tokens are the same under sherpa-onnx's bundled 1.28 and voiced's 1.32
                quantized = onnx.load(str(written[part]))
                params["layer_norms_lowered"] = lower_layer_norms(quantized)
                onnx.save(quantized, str(written[part]))
                copy_metadata(model, written[part])
                reports[part] = Report(
                    source=src, output=written[part], kind="whisper", method=choice.method.value, reason=choice.reason,
                    parameters=params, min_agreement=options.min_agreement, max_accuracy_drop=options.max_accuracy_drop,
                    calibration={"calibration_files": len(cal_items) if choice.method is Method.STATIC else 0,
                                 "calibration_inputs": len(feeds), "validation_files": len(check_items)},
                )

        with quiet_manifest_check():  # the manifests are written below, with the validation results
            int8_model = WhisperModel(WhisperFiles(written["encoder"], written["decoder"], files.tokens), session)
        fp32, int8 = WhisperRecognizer(fp32_model, config), WhisperRecognizer(int8_model, config)
        refs = find_references([item.path for item in check_items])
        say(f"validating on {len(check_items)} {'--validate-audio files' if validate_audio else 'held-back files'}"
            f" ({len(refs)} with reference transcripts)")
        report = WhisperReport(directory, reports)
        report.task, report.speed, report.wer = _compare(fp32, int8, check_items, refs)
        enc_feeds = _encoder_feeds(fp32_model, check_items, min(options.max_calibration, 8), config.tail_padding_frames)
        enc = reports["encoder"]
        enc.numeric = compare_outputs(fp32_model.encoder, int8_model.encoder, enc_feeds, "compare encoder outputs")
        enc.speed = measure_speed(fp32_model.encoder, int8_model.encoder, enc_feeds, min(options.speed_runs, ENCODER_SPEED_CALLS))
        report.failures = judge(report.task, options.min_agreement, options.max_accuracy_drop)
        report.failures = [f.replace("top-1 accuracy dropped", "WER rose") for f in report.failures]
        whole = report.to_dict()
        shared = {"task": whole["task"], "wer": whole["wer"], "decode_speed": whole["decode_speed"],
                  "passed": report.passed, "failures": report.failures}
        for part, part_report in reports.items():
            own = part_report.to_dict()
            publish(
                written[part], outputs[part], sources[part],
                quantization={"method": part_report.method, "reason": part_report.reason, "kind": "whisper", "part": part,
                              "parameters": part_report.parameters, "calibration": part_report.calibration},
                validation={"sizes": own["sizes"], "outputs": own["outputs"], "speed": own["speed"],
                            "validated": True, **shared},
            )
    for part, part_report in reports.items():
        part_report.output = outputs[part]
    say(f"wrote {', '.join(p.name for p in outputs.values())} and their manifests in {directory}")
    return report

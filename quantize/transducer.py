"""``voiced-quantize asr DIR``: a sherpa-onnx streaming transducer, part by part.

Inputs come from voiced's own Recognizer decoding real audio with the FP32 files: the
encoder sees fbank chunks with the states the previous chunk returned, the decoder the
token contexts greedy search asks for, the joiner the frame/context pairs it combines.
Each part gets its method from its operator mix (MatMul-heavy parts: dynamic, with the
operator sets icefall uses for the published ``*.int8.onnx``: MatMul in encoder and
joiner, MatMul and Gather in the decoder). ``*.int8.onnx`` files are written beside the
FP32 ones, each with its manifest, where ``ModelFiles.find`` prefers them.

Validation decodes the held-back utterances with the FP32 and the INT8 directory:
- utterances decoded to identical token sequences (the task agreement),
- token agreement (1 - edit distance / FP32 tokens), and
- decision agreement: on the FP32 decoding path, the INT8 parts (carrying their own
  encoder states) pick the same joiner argmax, i.e. agreement without the cascade a single
  different token causes in everything after it;
and, with ``fp16_reference``, identical utterances and token agreement for FP32 weights rounded to FP16: the
model's own sensitivity, a floor no INT8 file can beat.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from quantize.calibration import Feeds, calibration_and_check
from quantize.decoding import PARTS, capture, compare_decoding, quiet_fp32_warning, quiet_manifest_check
from quantize.decoding import fp16_reference as decode_fp16_reference
from quantize.graph import describe, load_onnx
from quantize.manifest import partial, publish, removed_on_failure
from quantize.methods import choose_method, preprocess, quantize_file
from quantize.options import Kind, Method, QuantizeOptions
from quantize.progress import say
from quantize.tasks import TaskResult
from quantize.tool import QUANTIZED_OPS, check_output, copy_metadata, default_output
from quantize.validate import Report, SpeedResult, compare_outputs, judge, measure_speed
from voiced.asr.model import ModelFiles, TransducerModel
from voiced.errors import ModelError
from voiced.runtime.onnx import SessionOptions

__all__ = ["PARTS", "TransducerReport", "fp32_files", "quantize_transducer"]

log = logging.getLogger(__name__)

ICEFALL_OPS = {"encoder": ("MatMul",), "decoder": ("MatMul", "Gather"), "joiner": ("MatMul",)}
"""Operator types icefall's export scripts quantize dynamically in each part."""


def fp32_files(directory: str | Path) -> ModelFiles:
    """The FP32 files of a transducer directory (``ModelFiles.find`` would prefer INT8 ones)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelError(f"ASR model {directory}: a file, not a model directory" if directory.exists()
                         else f"ASR model directory not found: {directory}")
    tokens = directory / "tokens.txt"
    if not tokens.is_file():
        raise ModelError(f"ASR model {directory}: tokens.txt is missing")
    picked = []
    for part in PARTS:
        exact = directory / f"{part}.onnx"
        found = [exact] if exact.is_file() else sorted(p for p in directory.glob(f"{part}*.onnx") if ".int8." not in p.name)
        if len(found) != 1:
            what = "is missing" if not found else f"is ambiguous ({', '.join(p.name for p in found)})"
            raise ModelError(f"ASR model {directory}: the FP32 {part} ({part}.onnx) {what}")
        picked.append(found[0])
    return ModelFiles(*picked, tokens)


@dataclass
class TransducerReport:
    """Per part: a Report (method, sizes, output errors, per-call speed); for the whole: decoding."""

    directory: Path
    parts: dict[str, Report]
    task: TaskResult | None = None
    speed: SpeedResult | None = None
    """Whole-utterance decoding time (features + search + all parts), 1 thread."""
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        speed = {**asdict(self.speed), "ratio": round(self.speed.ratio, 3), "threads": 1, "unit": "ms per utterance"} if self.speed else None
        return {
            "directory": str(self.directory),
            "parts": {k: v.to_dict() for k, v in self.parts.items()},
            "task": asdict(self.task) if self.task else None,
            "decode_speed": speed,
            "passed": self.passed,
            "failures": self.failures,
        }

    def summary(self) -> str:
        lines = [f"{self.directory}:"]
        for report in self.parts.values():
            lines += ["  " + line for line in report.summary().splitlines() if "PASSED" not in line and "FAILED" not in line]
        if self.task:
            lines.append(f"  decoding  {100 * self.task.agreement:.2f}% {self.task.metric} ({self.task.count})")
            d = self.task.details
            lines.append(f"            token agreement {100 * d['token_agreement']:.2f}%, decision agreement"
                         f" {100 * d['decision_agreement']:.3f}% of {d['decisions']} joiner decisions")
            if "fp16_reference" in d:
                f = d["fp16_reference"]
                lines.append(f"            FP16-rounded weights (the model's own sensitivity): {100 * f['identical']:.2f}%"
                             f" identical, token agreement {100 * f['token_agreement']:.2f}%")
        if self.speed:
            lines.append(f"  speed     {self.speed.fp32_ms:.1f} ms -> {self.speed.int8_ms:.1f} ms per utterance, 1 thread"
                         f" (x{self.speed.ratio:.2f})")
        lines.append("  PASSED" if self.passed else "  FAILED: " + "; ".join(self.failures))
        return "\n".join(lines)


def quantize_transducer(
    directory: str | Path,
    *,
    audio: Sequence[str | Path],
    validate_audio: Sequence[str | Path] = (),
    options: QuantizeOptions | None = None,
    fp16_reference: bool = False,
) -> TransducerReport:
    """Write ``encoder/decoder/joiner.int8.onnx`` (+ manifests) beside the FP32 files and validate them."""
    options = options or QuantizeOptions()
    directory = Path(directory)
    files = fp32_files(directory)
    cal_items, check_items = calibration_and_check(audio, validate_audio, options.holdout, options.seed)
    with quiet_fp32_warning(), quiet_manifest_check():
        fp32 = TransducerModel(files, SessionOptions(threads=1))
    sources = {"encoder": files.encoder, "decoder": files.decoder, "joiner": files.joiner}
    outputs = {part: default_output(path) for part, path in sources.items()}
    for out in outputs.values():
        check_output(out, options)
    choices, reports = {}, {}
    calibration: dict[str, list[Feeds]] | None = None

    written = {part: partial(out) for part, out in outputs.items()}  # validated there, then moved into place
    with removed_on_failure(written.values()):
        with tempfile.TemporaryDirectory(prefix="voiced-quantize-asr-") as tmp:
            for part, src in sources.items():
                model = load_onnx(src)
                info0 = describe(model, src)
                if QUANTIZED_OPS & set(info0.ops):
                    raise ModelError(f"{src} is already quantized; give the FP32 {part}")
                pre = Path(tmp) / f"{part}.onnx"
                skipped = preprocess(src, pre) if options.preprocess else None
                if not options.preprocess:
                    onnx.save(model, str(pre))
                info = describe(load_onnx(pre), src)
                choice = choose_method(info, options.method, has_calibration=True)
                say(f"{part}: method {choice.method.value}: {choice.reason}")
                part_options = options
                if choice.method is Method.DYNAMIC and not options.op_types:
                    part_options = replace(options, op_types=ICEFALL_OPS[part])
                feeds: list[Feeds] = []
                if choice.method is Method.STATIC:
                    if calibration is None:
                        calibration = capture(fp32, cal_items, options.max_calibration, "calibration utterances")
                    feeds = calibration[part]
                params = quantize_file(pre, written[part], info, choice.method, part_options, feeds)
                params["preprocess"] = "done" if not skipped else f"skipped: {skipped}"
                copy_metadata(model, written[part])
                choices[part] = choice
                reports[part] = Report(
                    source=src, output=written[part], kind=Kind.TRANSDUCER.value, method=choice.method.value,
                    reason=choice.reason, parameters=params, min_agreement=options.min_agreement,
                    calibration={"calibration_files": len(cal_items) if choice.method is Method.STATIC else 0,
                                 "calibration_inputs": len(feeds), "validation_files": len(check_items)},
                )

        int8_files = ModelFiles(written["encoder"], written["decoder"], written["joiner"], files.tokens)
        with quiet_manifest_check():  # the manifests are written below, with the validation results
            int8 = TransducerModel(int8_files, SessionOptions(threads=1))
        report = TransducerReport(directory, reports)
        task, captured, speed = compare_decoding(fp32, int8, check_items, options.max_calibration)
        for part, part_report in reports.items():
            a, b = getattr(fp32, part), getattr(int8, part)
            part_report.numeric = compare_outputs(a, b, captured[part], f"compare {part} outputs")
            part_report.speed = measure_speed(a, b, captured[part], options.speed_runs)
        if fp16_reference:
            task.details["fp16_reference"] = decode_fp16_reference(fp32, files, check_items)
        report.task, report.speed = task, speed
        report.failures = judge(task, options.min_agreement, options.max_accuracy_drop)
        shared = {"task": report.to_dict()["task"], "decode_speed": report.to_dict()["decode_speed"],
                  "passed": report.passed, "failures": report.failures}
        for part, part_report in reports.items():
            own = part_report.to_dict()
            publish(
                written[part], outputs[part], sources[part],
                quantization={"method": choices[part].method.value, "reason": choices[part].reason, "kind": "transducer",
                              "part": part, "parameters": part_report.parameters, "calibration": part_report.calibration},
                validation={"sizes": own["sizes"], "outputs": own["outputs"], "speed": own["speed"],
                            "validated": own["validated"], **shared},
            )
    for part, part_report in reports.items():
        part_report.output = outputs[part]
    say(f"wrote {', '.join(p.name for p in outputs.values())} and their manifests in {directory}")
    return report



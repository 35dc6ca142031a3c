"""One model in, INT8 model + manifest + report out: the steps in order.

    report = quantize_model("silero_vad.onnx", kind=Kind.SILERO, audio=["speech/"])
    print(report.summary())

1. read the FP32 model (clear errors for non-ONNX files and unknown operators);
2. quant_pre_process (shape inference, constant folding) into a temporary file;
3. inputs from real audio through the model family's front end (or an .npz), split by file
   into calibration and held-back sets;
4. choose the method (auto: by operator mix) and say why;
5. quantize; restore the source's metadata (sherpa-onnx reads it);
6. validate on the held-back set; write ``MODEL.int8.onnx.json``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from quantize.calibration import find_audio, load_npz, split, subsample
from quantize.decoding import quiet_manifest_check
from quantize.graph import describe, load_onnx
from quantize.manifest import partial, publish, removed_on_failure
from quantize.methods import choose_method, preprocess, quantize_file
from quantize.options import Kind, Method, QuantizeOptions
from quantize.progress import say
from quantize.tasks import make_task
from quantize.validate import Report, compare_outputs, judge, measure_speed
from voiced.errors import ConfigError, ModelError
from voiced.models.manifest import manifest_path
from voiced.runtime.onnx import SessionOptions, create_session

__all__ = ["QUANTIZED_OPS", "check_output", "copy_metadata", "default_output", "quantize_model"]

log = logging.getLogger(__name__)

QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
    "QLinearConv", "QLinearMatMul", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
})


def default_output(source: Path) -> Path:
    """``model.onnx`` → ``model.int8.onnx`` beside it."""
    return source.with_name(source.name[: -len(".onnx")] + ".int8.onnx" if source.name.endswith(".onnx") else source.name + ".int8.onnx")


def writable_place(path: Path, option: str, *, folder: bool = False, makes_folders: bool = True) -> None:
    """Refuse, before any work is done, a ``path`` that cannot be written: a folder where a file goes
    (or, with ``folder``, a file where a folder goes), or no permission in the folder it goes in.
    ``makes_folders``: missing folders on the way are made, so the nearest existing one decides."""
    if folder and path.exists() and not path.is_dir():
        raise ConfigError(option, f"{path} is a file, not a folder")
    if not folder and path.is_dir():
        raise ConfigError(option, f"{path} is a folder; give a file name")
    place = path if folder and path.is_dir() else path.parent
    while makes_folders and not place.exists() and place != place.parent:
        place = place.parent
    if not place.is_dir():
        raise ConfigError(option, f"{place} is " + ("a file, not a folder" if place.exists() else "not a folder"))
    if not os.access(place, os.W_OK | os.X_OK):
        raise ConfigError(option, f"cannot write in {place} (permission denied)")


def check_output(output: Path, options: QuantizeOptions) -> None:
    """Refuse to replace a file voiced-quantize did not write, unless told to, or a place it cannot write."""
    writable_place(output, "--output")
    if output.exists() and not manifest_path(output).exists() and not options.overwrite:
        raise ConfigError("--output", f"{output} exists and was not written by voiced-quantize (no manifest beside it);"
                          " pass --force to replace it, or choose another --output")


def copy_metadata(source: onnx.ModelProto, output: Path) -> None:
    """Give ``output`` the source's metadata_props (model_type, T, vocab_size … for sherpa-onnx)."""
    if not source.metadata_props:
        return
    model = onnx.load(str(output))
    have = {p.key for p in model.metadata_props}
    missing = [p for p in source.metadata_props if p.key not in have]
    if missing:
        for prop in missing:
            model.metadata_props.add(key=prop.key, value=prop.value)
        onnx.save(model, str(output))


def quantize_model(
    source: str | Path,
    *,
    output: str | Path | None = None,
    kind: Kind = Kind.NONE,
    audio: Sequence[str | Path] = (),
    validate_audio: Sequence[str | Path] = (),
    npz: str | Path | None = None,
    melspectrogram: Path | None = None,
    meta: Path | None = None,
    options: QuantizeOptions | None = None,
) -> Report:
    """Quantize one ONNX file; returns the report (``report.passed`` says whether it met the thresholds)."""
    options = options or QuantizeOptions()
    source = Path(source)
    out = Path(output) if output else default_output(source)
    if kind is Kind.TRANSDUCER:
        raise ConfigError("--kind", "transducers are quantized per directory: voiced-quantize asr DIR")
    model = load_onnx(source)
    info0 = describe(model, source)
    already = sorted(QUANTIZED_OPS & set(info0.ops))
    if already:
        raise ModelError(f"{source} is already quantized (it has {', '.join(already)}); give the FP32 model")
    if out.resolve() == source.resolve():
        raise ConfigError("--output", f"would overwrite the source model {source}")
    check_output(out, options)
    with quiet_manifest_check():  # the FP32 source is loaded on purpose
        fp32 = create_session(source, SessionOptions(threads=1))  # proves onnxruntime can run it at all

    task = make_task(kind, source, melspectrogram=melspectrogram, meta=meta)
    if kind is Kind.NPZ:
        if npz is None:
            raise ConfigError("--npz", "--kind npz needs --npz FILE")
        if validate_audio:
            raise ConfigError("--validate-audio", "--kind npz validates on a held-back share of the .npz samples, not on audio")
        items: list[Any] = load_npz(npz, fp32)
    elif task is not None:
        if not audio:
            raise ConfigError("--audio", f"--kind {kind.value} needs --audio (WAV files or directories) for calibration")
        items = find_audio(audio)
    else:
        items = []
    validate_items: list[Any] = find_audio(validate_audio, "--validate-audio") if validate_audio else []

    written = partial(out)  # validated there, then moved into place: never a half-made model at ``out``
    with removed_on_failure([written]):
        with tempfile.TemporaryDirectory(prefix="voiced-quantize-") as tmp:
            pre = Path(tmp) / "preprocessed.onnx"
            if options.preprocess:
                say(f"{source.name}: pre-processing (shape inference, constant folding)")
                skipped = preprocess(source, pre)
                if skipped:
                    say(f"{source.name}: pre-processing failed, quantizing the model as it is ({skipped})")
            else:
                onnx.save(model, str(pre))
                skipped = "disabled (--no-preprocess)"
            info = describe(load_onnx(pre), source)
            choice = choose_method(info, options.method, has_calibration=bool(items))
            say(f"{source.name}: method {choice.method.value}: {choice.reason}")

            # A separate validation set frees every calibration file for calibration.
            cal_items, held_items = (items, []) if validate_items else split(items, options.holdout, options.seed)
            if choice.method is Method.DYNAMIC:
                # Dynamic quantization reads no calibration data, so nothing needs holding back.
                check_items = validate_items or items
                cal_feeds = []
                if items and not validate_items:
                    say(f"dynamic quantization uses no calibration data: validating on all {len(items)} inputs")
            else:
                check_items = validate_items or held_items
                cal_feeds = subsample(task.feeds(fp32, cal_items, "calibration inputs") if task else [], options.max_calibration)
                if not cal_feeds:
                    raise ConfigError("--audio", f"empty calibration set: {len(cal_items)} files gave no model inputs")
                say(f"calibrating on {len(cal_feeds)} inputs from {len(cal_items)} files; validating on {len(check_items)}"
                    f" {'files given with --validate-audio' if validate_items else 'held-back inputs'}")
            if task is not None and not check_items:  # it used to say PASSED with nothing compared
                raise ConfigError("--holdout", f"no inputs left to validate on ({len(items)} file(s), --holdout "
                                  f"{options.holdout}): give more --audio files, a larger --holdout or --validate-audio")
            say(f"{source.name}: quantizing ({choice.method.value}) -> {out}")
            out.parent.mkdir(parents=True, exist_ok=True)
            params = quantize_file(pre, written, info, choice.method, options, cal_feeds)
        copy_metadata(model, written)
        params["preprocess"] = "done" if not skipped else f"skipped: {skipped}"

        report = Report(
            source=source, output=written, kind=kind.value, method=choice.method.value, reason=choice.reason,
            parameters=params, min_agreement=options.min_agreement, max_accuracy_drop=options.max_accuracy_drop,
            calibration={
                "calibration_files": len(cal_items) if choice.method is Method.STATIC else 0,
                "calibration_inputs": len(cal_feeds),
                "validation_files": len(check_items),
                "validation_set": "--validate-audio" if validate_items else ("held-back split" if choice.method is Method.STATIC else "all inputs"),
                "holdout": options.holdout,
                "seed": options.seed,
            },
        )
        with quiet_manifest_check():  # its manifest is written below, with the validation results
            int8 = create_session(written, SessionOptions(threads=1))
        if task is not None and check_items:
            numeric_feeds = subsample(task.feeds(fp32, check_items, "validation inputs"), options.max_calibration)
            report.numeric = compare_outputs(fp32, int8, numeric_feeds)
            report.task = task.compare(fp32, int8, check_items)
            report.speed = measure_speed(fp32, int8, numeric_feeds, options.speed_runs)
            report.failures = judge(report.task, options.min_agreement, options.max_accuracy_drop)
        else:
            say("no validation data (--kind none): the INT8 model was not compared with FP32")
        manifest = publish(
            written, out, source,
            quantization={"method": choice.method.value, "reason": choice.reason, "kind": kind.value, "parameters": params,
                          "calibration": report.calibration},
            validation={k: v for k, v in report.to_dict().items()
                        if k in ("sizes", "outputs", "task", "speed", "thresholds", "validated", "passed", "failures")},
        )
    report.output = out
    say(f"wrote {out} and {manifest.name}")
    return report

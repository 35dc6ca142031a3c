"""voiced-quantize: offline INT8 quantization with calibration on real audio and a verified manifest.

    from quantize import Kind, QuantizeOptions, quantize_model, quantize_transducer

    report = quantize_model("silero_vad.onnx", kind=Kind.SILERO, audio=["speech/"])
    report.passed, report.summary()
    quantize_transducer("models/asr", audio=["utterances/"])   # *.int8.onnx beside the FP32 parts

Modules: ``graph`` (reading, operator mix), ``methods`` (dynamic/static/auto), ``frontends``
(audio → model inputs), ``calibration`` (files, split, .npz), ``tasks`` (per-family agreement),
``validate`` (errors, speed, report), ``manifest`` (MODEL.int8.onnx.json), ``tool`` (one model),
``transducer`` (an ASR directory), ``cli``. The manifest format and its verification live in
:mod:`voiced.models.manifest`, which the daemon uses at load. Needs ``onnx`` besides voiced's
own dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quantize.options import CalibrateMethod, Kind, Method, PerChannel, QuantizeOptions

if TYPE_CHECKING:
    from quantize.tool import quantize_model
    from quantize.transducer import TransducerReport, quantize_transducer
    from quantize.validate import Report

__all__ = [
    "CalibrateMethod",
    "Kind",
    "Method",
    "PerChannel",
    "QuantizeOptions",
    "Report",
    "TransducerReport",
    "quantize_model",
    "quantize_transducer",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package (e.g. for the enums) must not load onnx and onnxruntime.
    if name == "quantize_model":
        from quantize.tool import quantize_model

        return quantize_model
    if name in ("quantize_transducer", "TransducerReport"):
        from quantize import transducer

        return getattr(transducer, name)
    if name == "Report":
        from quantize.validate import Report

        return Report
    raise AttributeError(name)

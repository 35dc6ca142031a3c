"""Which ONNX Runtime sherpa-onnx runs, and the onnxruntime of that version installed beside the venv.

sherpa-onnx's wheel bundles its own ``libonnxruntime.so`` (1.28.2 in sherpa-onnx 2.0.1), while voiced
runs the onnxruntime package (1.32 here: onnxruntime-genai needs >= 1.31). Their float kernels differ
in the last bits (LayerNormalization's output differs in 87% of values between 1.28 and 1.32 on the
same input), and INT8 Whisper quantizes activations on the fly, so a last-bit difference can change
a token. To check that voiced *decodes* as sherpa-onnx does, voiced runs in a child process on the
onnxruntime of sherpa-onnx's version, installed in a side directory:

    pip install --target .ort-sherpa --no-deps onnxruntime==1.28.0   # or set VOICED_SHERPA_ORT=DIR

(1.28.2 is not on PyPI; 1.28.0's kernels give sherpa-onnx's tokens on all 118 real files.)
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

__all__ = ["REPO", "bundled_version", "side_install", "side_version"]

REPO = Path(__file__).resolve().parents[1]


class _OrtApiBase(ctypes.Structure):
    # onnxruntime_c_api.h: struct OrtApiBase { GetApi; GetVersionString; } - stable across versions
    _fields_ = [("GetApi", ctypes.c_void_p), ("GetVersionString", ctypes.CFUNCTYPE(ctypes.c_char_p))]


def bundled_version() -> str | None:
    """The version of the libonnxruntime that sherpa-onnx's wheel bundles (as that library reports it),
    None when sherpa-onnx is absent or links an onnxruntime from elsewhere."""
    try:
        import sherpa_onnx
    except ImportError:
        return None
    found = sorted(Path(sherpa_onnx.__file__).parent.glob("lib/libonnxruntime.so*"))
    if not found:
        return None
    lib = ctypes.CDLL(str(found[0]))
    lib.OrtGetApiBase.restype = ctypes.POINTER(_OrtApiBase)
    return lib.OrtGetApiBase().contents.GetVersionString().decode()


def side_install() -> Path | None:
    """The directory holding the side onnxruntime ($VOICED_SHERPA_ORT, else .ort-sherpa in the checkout),
    None when it holds none."""
    env = os.environ.get("VOICED_SHERPA_ORT")
    root = Path(env) if env else REPO / ".ort-sherpa"
    return root if (root / "onnxruntime" / "__init__.py").is_file() else None


def side_version(root: Path) -> str | None:
    """The version pip recorded for the onnxruntime in ``root`` (read without importing it)."""
    found = sorted(root.glob("onnxruntime-*.dist-info"))
    return found[0].name.removeprefix("onnxruntime-").removesuffix(".dist-info") if found else None

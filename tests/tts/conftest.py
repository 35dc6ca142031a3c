"""Voices for the TTS tests, generated once per session in the real Piper layouts.

Configs: the real ``en_US-lessac-medium`` / ``-low`` ``.onnx.json`` from ../shared (tests
using them skip without it) and a self-made espeak config (always available), so the
core of the suite runs on a plain checkout too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.tts.voicegen import espeak_config, make_voice, multi_speaker, read_config

pytest.importorskip("piper", reason="piper-tts (voiced[tts]: espeak-ng) is not installed: pip install -e '.[test]'")
pytest.importorskip("onnx", reason="onnx is needed to generate test voices")

LESSAC = "piper_config_en_US-lessac-medium"


@pytest.fixture(scope="session")
def self_config() -> dict[str, Any]:
    return espeak_config(sample_rate=16000)


@pytest.fixture(scope="session")
def lessac_medium(models: Path) -> dict[str, Any]:
    return read_config(models / LESSAC / "en_US-lessac-medium.onnx.json")


@pytest.fixture(scope="session")
def lessac_low(models: Path) -> dict[str, Any]:
    return read_config(models / LESSAC / "en_US-lessac-low.onnx.json")


@pytest.fixture(scope="session")
def voices(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="session")
def id_voice(voices: Path, self_config: dict[str, Any]) -> Path:
    """Whole model encoding its inputs; self-made config, 16 kHz."""
    return make_voice(voices / "ids", self_config, "ids")


@pytest.fixture(scope="session")
def lessac_id_voice(voices: Path, lessac_medium: dict[str, Any]) -> Path:
    """Whole model encoding its inputs, with the real lessac-medium config (22050 Hz)."""
    return make_voice(voices / "lessac-ids", lessac_medium, "ids")


@pytest.fixture(scope="session")
def lessac_multi_id_voice(voices: Path, lessac_medium: dict[str, Any]) -> Path:
    """The real lessac config turned into a 4-speaker voice; the model encodes its sid too."""
    return make_voice(voices / "lessac-multi-ids", multi_speaker(lessac_medium, 4), "ids")


@pytest.fixture(scope="session")
def split_id_voice(voices: Path, self_config: dict[str, Any]) -> Path:
    """Streaming encoder/decoder pair whose frames carry the ids (3 frames per id, hop 4)."""
    return make_voice(voices / "split-ids", self_config, "split-ids")


@pytest.fixture(scope="session")
def tiny_split_voice(voices: Path, self_config: dict[str, Any]) -> Path:
    """VITS-like streaming pair whose decoder sees at most 8 frames either side (< 10 padding)."""
    return make_voice(voices / "tiny-split", self_config, "vits", size="tiny", split=True)


@pytest.fixture(scope="session")
def wide_split_voice(voices: Path, self_config: dict[str, Any]) -> Path:
    """VITS-like streaming pair whose decoder sees ±15 frames: wider than the 10-frame padding."""
    return make_voice(voices / "wide-split", self_config, "vits", size="wide", split=True)

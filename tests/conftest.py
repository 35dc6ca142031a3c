"""Fixtures shared by every test: where ../shared is, and skipping cleanly without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_root() -> Path | None:
    """../shared beside the checkout (or $VOICED_SHARED); None on a user's plain checkout."""
    env = os.environ.get("VOICED_SHARED")
    root = Path(env) if env else REPO.parent / "shared"
    return root if (root / "models").is_dir() and (root / "speech").is_dir() else None


SHARED = shared_root()
needs_shared = pytest.mark.skipif(
    SHARED is None, reason="../shared (real models and speech) is absent: set VOICED_SHARED or run in CI"
)


@pytest.fixture(scope="session")
def shared() -> Path:
    if SHARED is None:
        pytest.skip("../shared (real models and speech) is absent: set VOICED_SHARED or run in CI")
    return SHARED


@pytest.fixture(scope="session")
def speech(shared: Path) -> Path:
    return shared / "speech"


@pytest.fixture(scope="session")
def models(shared: Path) -> Path:
    return shared / "models"


# Session fixtures with the real Whisper weights (whisper_model_dir …), shared by the ASR and quantize tests.
from tests.whisper_fixtures import ct2_whisper, whisper_int8_dir, whisper_model_dir  # noqa: E402,F401
# small_disk: a tmpfs to fill or remount read-only (the outbox, the daemon and doctor tests).
from tests.disk_fixtures import small_disk  # noqa: E402,F401


LONGEST_FILES = (
    "tests/test_whisper_templates.py",  # 276 s, the Whisper import and quantization included
    "tests/mqtt/test_chaos.py",  # 160 s, one test in real time
    "tests/test_whisper.py",  # 124 s
    "tests/quantize/test_real_models.py",  # 92 s
    "tests/tts/test_voice_memory.py",  # 91 s
    "tests/quantize/test_whisper_import.py",  # 82 s
    "tests/test_early_end.py",  # 57 s
    "tests/tts/test_real_voice.py",  # 57 s
    "tests/wyoming/test_satellite.py",  # 55 s
    "tests/mqtt/test_soak.py",  # 46 s
    "tests/test_understand.py",  # 46 s
)
"""The test files that take longest (``--durations=0`` under ``-n 2``, 2026-11-29), run first.

The README's command hands whole files to two workers in collection order
(``--dist loadfile --no-loadscope-reorder``); by default xdist orders files by their number of
tests, which left the one-test chaos file (160 s) for the end, run alone while the other
worker idled. Longest first, the two workers end within seconds of each other."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest as collected

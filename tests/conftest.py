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

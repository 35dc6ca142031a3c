"""Session fixtures built once per test run, not once per pytest-xdist worker.

Each xdist worker is its own pytest session, so a session fixture runs in every worker: the
Whisper import and quantization (~40 s) were paid twice under ``-n 2``. ``built_once`` puts the
result in the run's temporary root, which all workers of the run share, behind a file lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["built_once"]


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The directory ``name``, filled by ``build(directory)`` once per test run: the first worker
    to ask builds it while the others wait on the lock, then every worker reads it (none may write
    into it). A build that raised is tried again by the next worker that asks."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when build raises
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # what a failed build left
            out.mkdir()
            build(out)
            done.touch()
    return out

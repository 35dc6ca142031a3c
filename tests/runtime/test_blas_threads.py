"""numpy's OpenBLAS pool stays single-threaded in a voiced process (its idle threads spin CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CHILD = "import voiced, numpy, os; print(len(os.listdir('/proc/self/task')))"


def _threads(env: dict[str, str]) -> int:
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc on a machine with 2+ cores (OpenBLAS makes none on one)")
def test_importing_voiced_then_numpy_starts_no_blas_threads() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    assert _threads(env) == 1
    # the user's own setting wins: the pool is OpenBLAS's, voiced only chooses its default
    assert _threads({**env, "OPENBLAS_NUM_THREADS": "2"}) == 2

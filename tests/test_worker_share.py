"""``built_once``: concurrent workers of one run build a shared fixture once and all read it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

_WORKER = r"""
import sys, time
from pathlib import Path
from tests.worker_share import built_once

class Factory:  # what built_once asks of pytest's TempPathFactory: this worker's base temp
    def getbasetemp(self):
        return Path(sys.argv[1])

def build(out):
    with open(out.parent / "builds.log", "a") as log:
        log.write(sys.argv[1] + "\n")
    time.sleep(1.0)  # long enough that the other worker asks while this one builds
    (out / "model.onnx").write_text("weights")

print(built_once(Factory(), "model", build))
"""


def test_two_workers_share_one_build(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = []
    for name in ("popen-gw0", "popen-gw1"):
        (tmp_path / name).mkdir()
        workers.append(subprocess.Popen([sys.executable, "-c", _WORKER, str(tmp_path / name)],
                                        env={**env, "PYTEST_XDIST_WORKER": name[6:]},
                                        stdout=subprocess.PIPE, text=True))
    outs = [Path(w.communicate(timeout=60)[0].strip()) for w in workers]
    assert all(w.returncode == 0 for w in workers)
    assert outs[0] == outs[1] == tmp_path / "model"
    assert (tmp_path / "model" / "model.onnx").read_text() == "weights"
    assert len((tmp_path / "builds.log").read_text().splitlines()) == 1


def test_a_failed_build_is_tried_again(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from tests.worker_share import built_once

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # one pytest process: its own base temp

    class Factory:
        def getbasetemp(self) -> Path:
            return tmp_path

    def broken(out: Path) -> None:
        (out / "half.onnx").write_text("half")
        raise RuntimeError("builder died")

    with pytest.raises(RuntimeError):
        built_once(Factory(), "model", broken)  # type: ignore[arg-type]
    out = built_once(Factory(), "model", lambda out: (out / "whole.onnx").write_text("whole"))  # type: ignore[arg-type]
    assert sorted(p.name for p in out.iterdir()) == ["whole.onnx"]

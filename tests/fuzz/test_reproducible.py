"""A seed's cases depend on the code alone, not on what the process had loaded before.

Hypothesis also draws values from the constants of the project's modules loaded when it generates
(and looks again whenever a module is loaded), so the same seed sent other cases after another
test in the same pytest worker had imported more of voiced, and a file fuzz resumed after a crash
(its skipped cases load nothing) regenerated other cases than the run that crashed.
``voiced.bench.fuzz_cases.settle_constant_pool`` loads every module first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import importlib, json, sys
from pathlib import Path
for name in sys.argv[2:]:
    importlib.import_module(name)  # what earlier work in this process had loaded
from voiced.bench.fuzz_cases import fuzz_files
cases = []
fuzz_files("tokens", 40, Path(sys.argv[1]), run_seed=5, on_case=lambda i, phase, detail, case: phase != "start"
           and cases.append(case))
print(json.dumps(cases))
"""


def _cases(workdir: Path, *preloaded: str) -> list[str]:
    workdir.mkdir()
    run = subprocess.run([sys.executable, "-c", _CHILD, str(workdir), *preloaded], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_a_seed_sends_the_same_cases_whatever_was_loaded_before(tmp_path: Path) -> None:
    fresh = _cases(tmp_path / "fresh")
    after_more = _cases(tmp_path / "after", "voiced.wyoming.server", "voiced.mqtt.outbox", "voiced.bench.chaos")
    assert len(fresh) == 40 and fresh == after_more

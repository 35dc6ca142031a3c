"""A voiced-quantize run that is stopped, or has nothing to validate on, leaves the models as they were.

It wrote each INT8 file where the model finders look, then validated it: stopped in between (Ctrl-C,
systemd's SIGTERM) it left INT8 files without manifests, which the daemon loaded, and which the next
run refused to replace. Real parts: a generated LSTM transducer in the exact export layout, real
hifitts speech, the real command line in a child process, stopped by a real signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quantize.cli import main as quantize_main
from quantize.progress import set_quiet
from quantize.transducer import quantize_transducer
from tests.modelgen.transducer import make_transducer
from tests.quantize.graphs import mlp
from voiced.models.manifest import sha256_file
from voiced.runtime.onnx import create_session

REPO = Path(__file__).resolve().parents[2]
PARTS = ("encoder", "decoder", "joiner")


def _int8_state(directory: Path) -> dict[str, str]:
    """Every INT8 file and manifest in ``directory`` (hidden partial files too), by name, hashed."""
    return {p.name: sha256_file(p) for p in sorted(directory.iterdir()) if ".int8." in p.name or p.name.startswith(".")}


@pytest.mark.shared
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_asr_run_leaves_the_models_as_they_were(tmp_path: Path, speech: Path, stop: signal.Signals) -> None:
    audio = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:4]
    fresh = make_transducer(tmp_path / "fresh", "lstm", seed=5)
    again = make_transducer(tmp_path / "again", "lstm", seed=5)
    set_quiet(True)
    try:
        quantize_transducer(again, audio=audio)  # an earlier run's files and manifests
    finally:
        set_quiet(False)
    before = _int8_state(again)
    assert len(before) == 6
    for directory, expected in ((fresh, {}), (again, before)):
        # SIGINT as at a terminal: a job started in the background (CI) inherits it ignored
        child = subprocess.Popen([sys.executable, "-m", "quantize", "asr", str(directory),
                                  *(a for f in audio for a in ("--audio", str(f)))],
                                 cwd=REPO, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert child.stderr is not None
        for line in child.stderr:
            if "joiner: method" in line:  # the encoder and decoder are written, nothing is validated yet
                child.send_signal(stop)
                break
        else:
            pytest.fail("the run ended before it could be stopped")
        rest = child.stderr.read()
        assert child.wait(timeout=60) == 130, rest
        assert "interrupted" in rest and "Traceback" not in rest, rest
        assert _int8_state(directory) == expected
    # and the next run is not refused ("exists and was not written by voiced-quantize")
    set_quiet(True)
    try:
        quantize_transducer(fresh, audio=audio)
    finally:
        set_quiet(False)
    assert sorted(_int8_state(fresh)) == sorted(before)


def test_a_run_with_nothing_held_back_to_validate_on_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--holdout 0 with a static method left no validation inputs: it printed PASSED, comparing nothing."""
    model = mlp(tmp_path / "mlp.onnx")
    npz = tmp_path / "x.npz"
    name = create_session(model).get_inputs()[0]
    np.savez(npz, **{name.name: np.random.default_rng(0).standard_normal((8, *name.shape[1:])).astype(np.float32)})
    code = quantize_main(["model", str(model), "--kind", "npz", "--npz", str(npz), "--method", "static",
                          "--holdout", "0", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--holdout" in err and "no inputs left to validate on" in err, err
    assert not list(tmp_path.glob("*.int8.onnx*")) and not list(tmp_path.glob(".*"))


@pytest.mark.shared
def test_an_asr_run_that_holds_nothing_back_says_which_option(tmp_path: Path, speech: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    directory = make_transducer(tmp_path / "asr", "lstm", seed=5)
    audio = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:4]
    code = quantize_main(["asr", str(directory), *(a for f in audio for a in ("--audio", str(f))), "--holdout", "0", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--holdout: 0.0 holds none of the 4 utterances back" in err, err  # was "need two utterances"

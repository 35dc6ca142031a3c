"""A model that failed validation when it was quantized is kept for inspection, not loaded in place
of the FP32 model it was made from; one made from an FP32 model replaced since is named by doctor;
and a hand-edited manifest is read, not a crash.

Real parts: a generated LSTM transducer in the exact export layout, quantized by voiced-quantize
on real hifitts speech (random weights: its INT8 copy fails the token check, as a badly
calibrated real model would), and the doctor's own model check.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import onnx
import onnx.numpy_helper
import pytest

from quantize.options import QuantizeOptions
from quantize.progress import set_quiet
from quantize.transducer import quantize_transducer
from tests.modelgen.transducer import make_transducer
from voiced.asr.model import ModelFiles
from voiced.config import Config
from voiced.doctor.report import CheckStatus, DoctorOptions
from voiced.doctor.setup import check_models
from voiced.errors import ModelError
from voiced.models.manifest import failed_validation, manifest_path, verify_model_file

PARTS = ("encoder", "decoder", "joiner")


@pytest.fixture(scope="module")
def failed_dir(tmp_path_factory, speech: Path) -> Path:
    directory = make_transducer(tmp_path_factory.mktemp("failed") / "asr", "lstm", seed=5)
    audio = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:4]
    set_quiet(True)
    try:
        report = quantize_transducer(directory, audio=audio)
    finally:
        set_quiet(False)
    assert not report.passed  # the premise: voiced-quantize said FAILED and exited 1
    return directory


@pytest.mark.shared
def test_the_fp32_files_are_loaded_instead_of_int8_ones_that_failed(failed_dir: Path, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    assert "task agreement" in (failed_validation(failed_dir / "encoder.int8.onnx") or "")
    with caplog.at_level(logging.WARNING, logger="voiced.models.manifest"):
        files = ModelFiles.find(failed_dir)
    assert [files.encoder.name, files.decoder.name, files.joiner.name] == [f"{p}.onnx" for p in PARTS]
    assert "encoder.int8.onnx failed validation when it was quantized (task agreement" in caplog.text
    # without the FP32 files beside them they are all there is: loaded, with the warning
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ["tokens.txt"] + [f"{p}.int8.onnx{ext}" for p in PARTS for ext in ("", ".json")]:
        shutil.copy(failed_dir / name, alone / name)
    assert ModelFiles.find(alone).encoder.name == "encoder.int8.onnx"
    # the doctor warns about the FP32 files loaded instead (it called them ok: the check went to
    # the files loaded, and those passed)
    (tmp_path / "voiced.toml").write_text(f'[asr]\nmodel = "{failed_dir}"\n')
    checks = check_models(Config.from_file(tmp_path / "voiced.toml"), DoctorOptions(load_models=False))
    assert {c.status for c in checks} == {CheckStatus.WARN}, checks
    assert all("loaded instead of" in c.message and "failed validation (task agreement" in c.message
               for c in checks)
    # and about the INT8 ones themselves when they are all there is
    (tmp_path / "voiced.toml").write_text(f'[asr]\nmodel = "{alone}"\n')
    checks = check_models(Config.from_file(tmp_path / "voiced.toml"), DoctorOptions(load_models=False))
    assert {c.status for c in checks} == {CheckStatus.WARN}, checks
    assert all("failed validation (task agreement" in c.message for c in checks)


@pytest.mark.shared
def test_a_hand_edited_manifest_is_read_or_refused_never_a_crash(failed_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "joiner.int8.onnx"
    shutil.copy(failed_dir / "joiner.int8.onnx", model)
    record = json.loads(manifest_path(failed_dir / "joiner.int8.onnx").read_text())
    # failures as a number, not a list (a doctor run crashed with "'int' object is not iterable")
    record["validation"] = {"passed": False, "failures": 5}
    manifest_path(model).write_text(json.dumps(record))
    assert verify_model_file(model, use_cache=False).ok and failed_validation(model) == "5"
    # the format tag deleted: still a manifest of this file (it was taken for a sidecar and the
    # flipped file loaded unverified); refused, naming the manifest
    del record["format"]
    manifest_path(model).write_text(json.dumps(record))
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"joiner\.int8\.onnx\.json: unknown manifest format"):
        verify_model_file(model, use_cache=False)


@pytest.mark.shared
def test_doctor_names_an_int8_model_made_from_an_fp32_one_replaced_since(tmp_path: Path, speech: Path) -> None:
    directory = make_transducer(tmp_path / "asr", "lstm", seed=5)
    audio = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:4]
    set_quiet(True)
    try:
        assert quantize_transducer(directory, audio=audio, options=QuantizeOptions(min_agreement=0.0)).passed
    finally:
        set_quiet(False)
    (tmp_path / "voiced.toml").write_text(f'[asr]\nmodel = "{directory}"\n')
    config = Config.from_file(tmp_path / "voiced.toml")
    assert {c.status for c in check_models(config, DoctorOptions(load_models=False))} == {CheckStatus.OK}
    joiner = onnx.load(str(directory / "joiner.onnx"))  # a retrained joiner, exported again
    weight = next(t for t in joiner.graph.initializer if len(t.dims) == 2)
    values = onnx.numpy_helper.to_array(weight).copy()
    values.flat[0] += 0.5
    weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
    onnx.save(joiner, str(directory / "joiner.onnx"))
    checks = check_models(config, DoctorOptions(load_models=False))
    [warned] = [c for c in checks if c.status is CheckStatus.WARN]
    assert "joiner.int8.onnx" in warned.message and "made from a joiner.onnx with sha256" in warned.message

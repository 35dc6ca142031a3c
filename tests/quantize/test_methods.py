"""voiced-quantize on small generated graphs: the method choice, each method, the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize.calibration import split
from quantize.cli import EXIT_BELOW_THRESHOLD, EXIT_ERROR, EXIT_OK, main
from quantize.graph import describe, load_onnx
from quantize.cpu import CpuInfo
from quantize.methods import choose_method, choose_weight_format, unfuse_gemm
from quantize.options import Kind, Method, PerChannel, QuantizeOptions, WeightFormat
from quantize.progress import set_quiet
from quantize.tool import quantize_model
from tests.support import int8_kernels_saturate
from tests.quantize.graphs import (
    conv_net,
    custom_op_net,
    inputs_npz,
    lstm_net,
    mlp,
    no_weights_net,
    saturating_matmul,
)
from voiced.errors import ConfigError, ModelError
from voiced.models.manifest import Manifest, Trust, manifest_path, verify_model_file


@pytest.fixture(autouse=True, scope="module")
def quiet():
    set_quiet(True)
    yield
    set_quiet(False)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("graphs")
    return {
        "mlp": mlp(d / "mlp.onnx"),
        "conv": conv_net(d / "conv.onnx"),
        "lstm": lstm_net(d / "lstm.onnx"),
        "mlp_npz": inputs_npz(d / "mlp.npz", (1, 64)),
        "conv_npz": inputs_npz(d / "conv.npz", (1, 1, 32, 32), count=40),
    }


def ops_of(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


# ------------------------------------------------------------------------------ method choice


@pytest.mark.parametrize(("graph", "has_data", "expected", "words"), [
    ("mlp", False, Method.DYNAMIC, "MatMul"),
    ("conv", True, Method.STATIC, "convolutional"),
    ("lstm", True, Method.DYNAMIC, "LSTM"),
])
def test_auto_picks_by_operator_mix_and_says_why(graphs, graph, has_data, expected, words) -> None:
    info = describe(load_onnx(graphs[graph]), graphs[graph])
    choice = choose_method(info, Method.AUTO, has_calibration=has_data)
    assert choice.method is expected
    assert words in choice.reason


def test_auto_on_a_conv_graph_without_data_asks_for_calibration(graphs) -> None:
    info = describe(load_onnx(graphs["conv"]), graphs["conv"])
    with pytest.raises(ConfigError, match="calibration data"):
        choose_method(info, Method.AUTO, has_calibration=False)


# ------------------------------------------------------------------------------ each method


def test_dynamic_mlp_end_to_end(graphs, tmp_path) -> None:
    out = tmp_path / "mlp.int8.onnx"
    # The default weight format (auto) keeps this within bounds on AVX2 without VNNI too, where
    # s8 weights saturate (measured on an AMD EPYC with AVX2 only: cosine 0.9977 with s8)
    report = quantize_model(graphs["mlp"], output=out, kind=Kind.NPZ, npz=graphs["mlp_npz"],
                            options=QuantizeOptions(speed_runs=20))
    assert report.method == "dynamic" and report.passed, report.summary()
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops_of(out)
    assert report.task.metric.startswith("top-1") and report.task.agreement >= 0.95
    assert report.numeric.first["cosine"] > 0.999
    assert report.sizes["int8_bytes"] < 0.4 * report.sizes["fp32_bytes"]
    assert report.speed is not None and report.speed.calls == 20
    # metadata survives; the manifest vouches for the file
    assert {p.key: p.value for p in onnx.load(str(out)).metadata_props}["made_by"] == "tests.quantize.graphs"
    manifest = Manifest.load(manifest_path(out))
    assert manifest.quantization["method"] == "dynamic" and manifest.validation["passed"] is True
    assert set(manifest.versions) >= {"onnxruntime", "onnx"}
    status = verify_model_file(out)
    assert status.trust is Trust.VERIFIED and status.sha256 == manifest.sha256


def test_static_conv_end_to_end_with_held_back_split(graphs, tmp_path) -> None:
    out = tmp_path / "conv.int8.onnx"
    report = quantize_model(graphs["conv"], output=out, kind=Kind.NPZ, npz=graphs["conv_npz"],
                            options=QuantizeOptions(speed_runs=10, holdout=0.25))
    assert report.method == "static", report.summary()
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops_of(out)
    assert report.calibration["calibration_inputs"] == 30 and report.calibration["validation_files"] == 10
    assert report.numeric.first["cosine"] > 0.99
    assert report.parameters["per_channel"] is True and report.parameters["format"] == "QDQ"


# ------------------------------------------------------------------------------ weight format

EPYC = CpuInfo("x86_64", "AMD EPYC", frozenset({"avx2"}), flags_known=True)
CASCADE_LAKE = CpuInfo("x86_64", "Intel Xeon", frozenset({"avx2", "avx512bw", "avx512_vnni"}), flags_known=True)
PI5 = CpuInfo("aarch64", "", frozenset(), flags_known=True)


@pytest.mark.parametrize(("cpu", "expected", "words"), [
    (EPYC, WeightFormat.U8, "VPMADDUBSW"),
    (CpuInfo("x86_64", "Intel Xeon", frozenset({"avx2", "avx512bw"}), flags_known=True), WeightFormat.U8, "saturates"),
    (CpuInfo("x86_64", "", frozenset(), flags_known=False), WeightFormat.U8, "features unknown"),
    (CASCADE_LAKE, WeightFormat.S8, "avx512_vnni"),
    (CpuInfo("x86_64", "Intel Core", frozenset({"avx2", "avx_vnni"}), flags_known=True), WeightFormat.S8, "32 bits"),
    (PI5, WeightFormat.S8, "aarch64"),
])
def test_auto_weight_format_by_cpu(cpu, expected, words) -> None:
    choice = choose_weight_format(WeightFormat.AUTO, cpu)
    assert choice.format is expected and words in choice.reason
    assert choose_weight_format(WeightFormat.S8_REDUCED, EPYC).format is WeightFormat.S8_REDUCED  # asked for: kept


def test_each_weight_format_writes_its_integer_type(graphs, tmp_path) -> None:
    for fmt, dtype in ((WeightFormat.S8, np.int8), (WeightFormat.S8_REDUCED, np.int8), (WeightFormat.U8, np.uint8)):
        out = tmp_path / f"mlp.{fmt.value}.int8.onnx"
        report = quantize_model(graphs["mlp"], output=out, options=QuantizeOptions(weight_format=fmt))
        weights = [numpy_helper.to_array(i) for i in onnx.load(str(out)).graph.initializer if i.name.endswith("_quantized")]
        assert weights and all(w.dtype == dtype for w in weights), fmt
        if fmt is WeightFormat.S8_REDUCED:  # 7 bits: |w| <= 64, so 255·64·2 fits in int16
            assert max(int(np.abs(w.astype(np.int32)).max()) for w in weights) <= 64
        params = Manifest.load(manifest_path(out)).quantization["parameters"]
        assert params["weight_format"] == fmt.value == report.parameters["weight_format"]
        assert params["reduce_range"] is (fmt is WeightFormat.S8_REDUCED)
    conv = tmp_path / "conv.u8.int8.onnx"
    quantize_model(graphs["conv"], output=conv, kind=Kind.NPZ, npz=graphs["conv_npz"],
                   options=QuantizeOptions(weight_format=WeightFormat.U8, speed_runs=0))
    types = {i.data_type for i in onnx.load(str(conv)).graph.initializer if i.name.endswith("_quantized")}
    assert types - {TensorProto.INT32} == {TensorProto.UINT8}  # static QDQ: u8 weights (biases are int32)


def test_auto_weight_format_keeps_a_saturation_prone_matmul_exact_and_says_so(tmp_path) -> None:
    """u8 activations near 255 times weights near the largest: where the CPU's u8×s8 kernels add
    pairs in int16 (AVX2 without VNNI), s8 weights are off by ~60x auto's error (measured on an
    AMD EPYC: mean abs error 1.36 vs 0.023); auto must stay exact on any CPU, and say what it chose."""
    src = saturating_matmul(tmp_path / "sat.onnx")
    npz = tmp_path / "sat.npz"
    np.savez(npz, x=np.random.default_rng(1).uniform(0, 1, (40, 256)).astype(np.float32))
    errors = {}
    for fmt in (WeightFormat.AUTO, WeightFormat.S8):
        report = quantize_model(src, output=tmp_path / f"sat.{fmt.value}.int8.onnx", kind=Kind.NPZ, npz=npz,
                                options=QuantizeOptions(weight_format=fmt, speed_runs=0, holdout=0.5))
        errors[fmt] = report.numeric.first["mean_abs_error"]
        if fmt is WeightFormat.AUTO:
            chosen = WeightFormat.U8 if int8_kernels_saturate() else WeightFormat.S8
            assert report.parameters["weight_format"] == chosen.value, report.summary()
            assert f"weights   {chosen.value} (auto: " in report.summary()
            assert report.numeric.first["cosine"] > 0.9999 and report.passed, report.summary()
    if int8_kernels_saturate():
        assert errors[WeightFormat.S8] > 10 * errors[WeightFormat.AUTO], errors  # the test can tell saturation


def test_lstm_is_quantized_dynamically(graphs, tmp_path) -> None:
    npz = tmp_path / "lstm.npz"
    np.savez(npz, x=np.random.default_rng(0).standard_normal((8, 20, 1, 16)).astype(np.float32))
    out = tmp_path / "lstm.int8.onnx"
    report = quantize_model(graphs["lstm"], output=out, kind=Kind.NPZ, npz=npz, options=QuantizeOptions(speed_runs=0))
    assert report.method == "dynamic" and "DynamicQuantizeLSTM" in ops_of(out)
    assert report.numeric.first["cosine"] > 0.99


def test_exclude_op_types_and_nodes(graphs, tmp_path) -> None:
    out = tmp_path / "mlp.int8.onnx"
    quantize_model(graphs["mlp"], output=out, options=QuantizeOptions(exclude_nodes=("fc2",)))
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("MatMulInteger") == 1 and ops.count("MatMul") == 1
    out2 = tmp_path / "conv.int8.onnx"
    report = quantize_model(graphs["conv"], output=out2, kind=Kind.NPZ, npz=graphs["conv_npz"],
                            options=QuantizeOptions(exclude_op_types=("Gemm",), speed_runs=0))
    assert "Gemm" in ops_of(out2) and "Gemm" not in report.parameters["op_types"]


def test_unfuse_gemm_keeps_the_function(tmp_path) -> None:
    # quant_pre_process fuses MatMul+Add into Gemm; dynamic quantization needs the MatMul back.
    src = conv_net(tmp_path / "c.onnx")
    model = onnx.load(str(src))
    assert unfuse_gemm(model) and "Gemm" not in {n.op_type for n in model.graph.node}
    onnx.save(model, str(tmp_path / "u.onnx"))
    x = np.random.default_rng(0).standard_normal((2, 1, 32, 32)).astype(np.float32)
    a = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    b = ort.InferenceSession(str(tmp_path / "u.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_split_is_by_item_seeded_and_keeps_one_of_each() -> None:
    items = list(range(10))
    cal, held = split(items, 0.2, seed=3)
    assert len(held) == 2 and sorted(cal + held) == items and split(items, 0.2, seed=3) == (cal, held)
    assert split([1, 2], 0.01) == ([2], [1]) or len(split([1, 2], 0.01)[1]) == 1


# ------------------------------------------------------------------------------ errors


def test_non_onnx_input_names_the_file(tmp_path) -> None:
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is a text file, not a model\n")
    with pytest.raises(ModelError, match=f"{bad} is not an ONNX model"):
        quantize_model(bad)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="is not an ONNX model"):
        quantize_model(empty)


def test_unsupported_operators_are_named(tmp_path) -> None:
    src = custom_op_net(tmp_path / "custom.onnx")
    with pytest.raises(ModelError, match=r"unsupported operators FancyActivation \(domain 'com.example.custom'\)"):
        quantize_model(src)


def test_nothing_to_quantize(tmp_path) -> None:
    with pytest.raises(ModelError, match="no float weights"):
        quantize_model(no_weights_net(tmp_path / "plain.onnx"))
    # weights only in an operator the dynamic quantizer does not rewrite
    w = numpy_helper.from_array(np.ones((1, 4, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up")], "deconv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 10])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "deconv.onnx"))
    with pytest.raises(ModelError, match="unsupported operators for dynamic quantization: the weights sit in ConvTranspose"):
        quantize_model(tmp_path / "deconv.onnx", options=QuantizeOptions(method=Method.DYNAMIC))


def test_empty_calibration_sets_name_the_source(graphs, tmp_path) -> None:
    empty_dir = tmp_path / "no_audio"
    empty_dir.mkdir()
    with pytest.raises(ConfigError, match=f"no .wav files in directory {empty_dir}"):
        quantize_model(graphs["conv"], kind=Kind.SILERO, audio=[empty_dir], output=tmp_path / "o.onnx")
    npz = tmp_path / "empty.npz"
    np.savez(npz, x=np.zeros((0, 1, 32, 32), np.float32))
    with pytest.raises(ConfigError, match=f"empty calibration set: {npz} holds no samples"):
        quantize_model(graphs["conv"], kind=Kind.NPZ, npz=npz, output=tmp_path / "o.onnx")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, y=np.zeros((3, 1, 32, 32), np.float32))
    with pytest.raises(ConfigError, match="lacks arrays for model inputs x"):
        quantize_model(graphs["conv"], kind=Kind.NPZ, npz=wrong, output=tmp_path / "o.onnx")


def test_already_quantized_and_static_without_data(graphs, tmp_path) -> None:
    out = tmp_path / "mlp.int8.onnx"
    quantize_model(graphs["mlp"], output=out)
    with pytest.raises(ModelError, match="already quantized"):
        quantize_model(out, output=tmp_path / "again.onnx")
    with pytest.raises(ConfigError, match="needs calibration data"):
        quantize_model(graphs["mlp"], output=tmp_path / "s.onnx", options=QuantizeOptions(method=Method.STATIC))


# ------------------------------------------------------------------------------ CLI


def test_cli_exit_status_and_report(graphs, tmp_path, capsys) -> None:
    out, report = tmp_path / "cli.int8.onnx", tmp_path / "report.json"
    args = [str(graphs["mlp"]), "-o", str(out), "--npz", str(graphs["mlp_npz"]), "--report", str(report), "-q",
            "--speed-runs", "5"]
    assert main(args) == EXIT_OK
    printed = capsys.readouterr().out
    assert "dynamic" in printed and "PASSED" in printed and report.is_file()
    # a classifier whose classes nearly tie: INT8 rounding flips its argmax, the run fails with status 1
    ties = mlp(tmp_path / "ties.onnx", ties=True)
    assert main([str(ties), "--npz", str(graphs["mlp_npz"]), "-q", "--speed-runs", "0", "--json"]) == EXIT_BELOW_THRESHOLD
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False and "below 95.00%" in data["failures"][0]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage")
    assert main([str(bad), "-q"]) == EXIT_ERROR
    assert "is not an ONNX model" in capsys.readouterr().err


def test_places_it_cannot_write_are_one_line_before_any_work(graphs, tmp_path, capsys) -> None:
    """They were tracebacks (IsADirectoryError, FileExistsError, and a --report that failed after
    the model and its manifest were written)."""
    folder, afile = tmp_path / "odir", tmp_path / "afile"
    folder.mkdir()
    afile.write_text("x")
    for args, message in (
        (["-o", str(folder), "--force"], f"--output: {folder} is a folder; give a file name"),
        (["-o", str(afile / "x.int8.onnx")], f"--output: {afile} is a file, not a folder"),
        (["--report", str(tmp_path / "nodir" / "r.json")], "--report: "),
        (["--report", str(folder)], f"--report: {folder} is a folder"),
    ):
        assert main([str(graphs["mlp"]), *args, "-q"]) == EXIT_ERROR, args
        err = capsys.readouterr().err
        assert err.startswith(f"voiced-quantize: error: {message}") and "Traceback" not in err, err
    assert not list(tmp_path.glob("*.int8.onnx*")) and not list(graphs["mlp"].parent.glob(".*.partial"))
    # what a thing is, not that it is missing: a folder given as the model, a file given as the folder
    assert main(["model", str(folder), "-q"]) == EXIT_ERROR
    assert f"{folder} is a folder, not an .onnx file" in capsys.readouterr().err
    assert main(["asr", str(afile), "--audio", str(afile), "-q"]) == EXIT_ERROR
    assert f"ASR model {afile}: a file, not a model directory" in capsys.readouterr().err
    for option, value in (("--holdout", "1.5"), ("--min-agreement", "2"), ("--speed-runs", "-1")):
        assert main([str(graphs["mlp"]), option, value, "-q"]) == EXIT_ERROR
        assert capsys.readouterr().err.startswith(f"voiced-quantize: error: {option}: must be")  # as typed


def test_cli_weight_format(graphs, tmp_path, capsys) -> None:
    out = tmp_path / "w.int8.onnx"
    assert main([str(graphs["mlp"]), "-o", str(out), "-q", "--weight-format", "u8"]) == EXIT_OK
    assert Manifest.load(manifest_path(out)).quantization["parameters"]["weight_format"] == "u8"
    assert main([str(graphs["mlp"]), "-o", str(out), "-q", "--reduce-range"]) == EXIT_OK  # the older spelling
    assert Manifest.load(manifest_path(out)).quantization["parameters"]["weight_format"] == "s8-reduced"
    capsys.readouterr()
    assert main([str(graphs["mlp"]), "-o", str(out), "-q", "--reduce-range", "--weight-format", "u8"]) == EXIT_ERROR
    assert "--reduce-range: contradicts --weight-format u8" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["model", "--help"])
    assert "--weight-format {auto,s8,s8-reduced,u8}" in capsys.readouterr().out


def test_a_file_not_written_by_us_is_not_replaced_without_force(graphs, tmp_path) -> None:
    published = tmp_path / "mlp.int8.onnx"
    published.write_bytes(b"someone else's int8 export")
    with pytest.raises(ConfigError, match="not written by voiced-quantize.*--force"):
        quantize_model(graphs["mlp"], output=published)
    report = quantize_model(graphs["mlp"], output=published, options=QuantizeOptions(overwrite=True))
    assert "NOT VALIDATED" in report.summary() and report.to_dict()["validated"] is False
    quantize_model(graphs["mlp"], output=published)  # ours now (manifest beside it): replaced freely


def test_quantizing_again_with_other_options_replaces_file_and_manifest(graphs, tmp_path) -> None:
    """The old manifest must not make the new output unloadable while it is being validated."""
    out = tmp_path / "mlp.int8.onnx"
    first = quantize_model(graphs["mlp"], output=out, kind=Kind.NPZ, npz=graphs["mlp_npz"])
    first_sha = Manifest.load(manifest_path(out)).sha256
    again = quantize_model(graphs["mlp"], output=out, kind=Kind.NPZ, npz=graphs["mlp_npz"],
                           options=QuantizeOptions(per_channel=PerChannel.OFF))
    assert first.passed and again.passed
    manifest = Manifest.load(manifest_path(out))
    assert manifest.sha256 != first_sha and verify_model_file(out).trust is Trust.VERIFIED
    assert manifest.quantization["parameters"]["per_channel"] is False

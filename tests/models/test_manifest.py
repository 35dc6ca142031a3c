"""verify_model_file: what the daemon calls before loading a model."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from quantize.progress import set_quiet
from quantize.tool import quantize_model
from tests.quantize.graphs import mlp
from voiced.errors import ModelError
from voiced.models.manifest import (
    INSTALL_RECORD,
    Manifest,
    Trust,
    manifest_path,
    sha256_file,
    verify_model_file,
)


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory) -> Path:
    set_quiet(True)
    d = tmp_path_factory.mktemp("int8")
    out = d / "mlp.int8.onnx"
    quantize_model(mlp(d / "mlp.onnx"), output=out)
    set_quiet(False)
    return out


def copy_with_manifest(model: Path, dest: Path) -> Path:
    shutil.copy(model, dest / model.name)
    shutil.copy(manifest_path(model), manifest_path(dest / model.name))
    return dest / model.name


def test_sha256_is_streamed_and_matches_hashlib(tmp_path) -> None:
    path = tmp_path / "blob"
    data = os.urandom(3 * 1024 * 1024 + 17)  # not a whole number of blocks
    path.write_bytes(data)
    assert sha256_file(path, block=1 << 20) == hashlib.sha256(data).hexdigest()
    assert sha256_file(path, block=4096) == hashlib.sha256(data).hexdigest()


def test_manifest_records_both_checksums(int8_model) -> None:
    m = Manifest.load(manifest_path(int8_model))
    assert m.model == int8_model.name and m.sha256 == sha256_file(int8_model)
    assert m.source["file"] == "mlp.onnx" and m.source["sha256"] == sha256_file(int8_model.with_name("mlp.onnx"))
    assert m.quantization["method"] == "dynamic" and "onnxruntime" in m.versions


def test_verified(int8_model, tmp_path) -> None:
    model = copy_with_manifest(int8_model, tmp_path)
    status = verify_model_file(model)
    assert status.trust is Trust.VERIFIED and status.ok and status.record == manifest_path(model)


def test_one_flipped_byte_is_refused_with_file_and_both_checksums(int8_model, tmp_path) -> None:
    model = copy_with_manifest(int8_model, tmp_path)
    expected = Manifest.load(manifest_path(model)).sha256
    data = bytearray(model.read_bytes())
    data[-100] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(ModelError) as err:
        verify_model_file(model)
    msg = str(err.value)
    assert str(model) in msg and expected in msg and sha256_file(model) in msg


def test_the_hash_cache_is_keyed_by_inode_size_and_mtime(int8_model, tmp_path) -> None:
    model = copy_with_manifest(int8_model, tmp_path)
    st = model.stat()
    verify_model_file(model)  # hashed and cached
    data = bytearray(model.read_bytes())
    data[-100] ^= 0xFF
    model.write_bytes(bytes(data))
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # as any write would move it
    with pytest.raises(ModelError, match="does not match"):
        verify_model_file(model)


def test_fp32_and_unvouched_int8_load_with_a_warning(int8_model, tmp_path, caplog) -> None:
    fp32 = tmp_path / "model.onnx"
    shutil.copy(int8_model.with_name("mlp.onnx"), fp32)
    lone = tmp_path / "lone.int8.onnx"
    shutil.copy(int8_model, lone)
    with caplog.at_level(logging.WARNING, logger="voiced.models.manifest"):
        assert verify_model_file(fp32).trust is Trust.FP32
        assert verify_model_file(lone).trust is Trust.UNVERIFIED
    assert "FP32 model without a manifest" in caplog.text and "unverified" in caplog.text


def test_install_record_vouches_for_files_without_a_manifest(tmp_path) -> None:
    model_dir = tmp_path / "asr"
    model_dir.mkdir()
    enc = model_dir / "encoder.onnx"
    enc.write_bytes(b"pretend model bytes")
    record = {"files": {"encoder.onnx": {"sha256": sha256_file(enc), "size": enc.stat().st_size}}}
    (model_dir / INSTALL_RECORD).write_text(json.dumps(record))
    assert verify_model_file(enc).trust is Trust.VERIFIED
    enc.write_bytes(b"pretend model bytez")
    with pytest.raises(ModelError, match=f"{enc}: sha256 .* recorded in {model_dir / INSTALL_RECORD}"):
        verify_model_file(enc)


def test_missing_file_and_broken_manifest(int8_model, tmp_path) -> None:
    with pytest.raises(ModelError, match="model file not found"):
        verify_model_file(tmp_path / "nope.int8.onnx")
    model = copy_with_manifest(int8_model, tmp_path)
    manifest_path(model).write_text("{not json")
    with pytest.raises(ModelError, match=f"{manifest_path(model)}: not valid JSON"):
        verify_model_file(model)


def test_a_piper_config_beside_a_voice_is_not_taken_for_a_manifest(int8_model, tmp_path, caplog) -> None:
    """voice.onnx.json is Piper's config, not ours: the voice loads as an FP32 model, unverified."""
    voice = tmp_path / "voice.onnx"
    voice.write_bytes(int8_model.read_bytes())
    (tmp_path / "voice.onnx.json").write_text('{"audio": {"sample_rate": 22050}, "phoneme_id_map": {}}')
    assert verify_model_file(voice).trust is Trust.FP32

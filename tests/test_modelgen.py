"""The generated transducers have the real sherpa-onnx layout and behave like trained models.

Also pins the sherpa-onnx facts documented in tests/reference.py (greedy rules, text rules, CLI
padding), so a sherpa upgrade that changes them fails here first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.modelgen.transducer import make_tokens, make_transducer
from tests.reference import (
    model_files,
    read_wav,
    sherpa_cli,
    sherpa_greedy,
    sherpa_modified_beam,
    sherpa_text,
)

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

KINDS = ["zipformer2", "lstm"]
SPEECH_FILES = [
    "jfk/jfk.wav",
    "misc_en/beckett.wav",
    "misc_en/vosk_digits_test.wav",
    "hifitts_6097_5min/audio/astralplane_03_leadbeater_0639.wav",
]


@pytest.fixture(scope="module", params=KINDS)
def model_dir(request, tmp_path_factory) -> Path:
    return make_transducer(tmp_path_factory.mktemp(request.param), request.param, seed=0, int8=True)


@pytest.fixture(scope="module")
def speech_files(speech: Path) -> list[Path]:
    pytest.importorskip("sherpa_onnx")  # the reference these tests compare against
    return [speech / name for name in SPEECH_FILES]


def _session(path: str):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


def _shape(value_info) -> list:
    return [d if isinstance(d, str) else int(d) for d in value_info.shape]


def _fbank(samples: np.ndarray, tail_s: float = 0.8) -> np.ndarray:
    """sherpa-onnx's features: kaldi fbank, 80 bins, dither 0, snip_edges false, samples in [-1, 1]."""
    knf = pytest.importorskip("kaldi_native_fbank")
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0
    opts.frame_opts.snip_edges = False
    opts.frame_opts.samp_freq = 16000
    opts.mel_opts.num_bins = 80
    opts.mel_opts.low_freq = 20
    opts.mel_opts.high_freq = -400
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(16000, np.concatenate([samples, np.zeros(int(16000 * tail_s), np.float32)]).tolist())
    fbank.input_finished()
    return np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)], dtype=np.float32)


class _Encoder:
    """Runs the generated encoder chunk by chunk, as sherpa-onnx does."""

    def __init__(self, model_dir: Path, int8: bool = False) -> None:
        self.sess = _session(model_files(model_dir, int8)["encoder"])
        meta = self.sess.get_modelmeta().custom_metadata_map
        self.T, self.shift = int(meta["T"]), int(meta["decode_chunk_len"])
        self.state_names = [i.name for i in self.sess.get_inputs()[1:]]

    def init_states(self) -> dict[str, np.ndarray]:
        return {
            i.name: np.zeros([1 if d == "N" else d for d in i.shape], np.int64 if "int64" in i.type else np.float32)
            for i in self.sess.get_inputs()[1:]
        }

    def chunks(self, feats: np.ndarray):
        start = 0
        while start + self.T < len(feats):
            yield feats[start : start + self.T][None]
            start += self.shift

    def run(self, x: np.ndarray, states: dict) -> tuple[np.ndarray, dict]:
        out = self.sess.run(None, {"x": x, **states})
        return out[0], dict(zip(self.state_names, out[1:], strict=True))

    def encode(self, feats: np.ndarray) -> np.ndarray:
        states, frames = self.init_states(), []
        for x in self.chunks(feats):
            enc, states = self.run(x, states)
            frames.append(enc[0])
        return np.concatenate(frames)


def _greedy(model_dir: Path, enc: np.ndarray, context=(-1, 0), unk_is_blank: bool = True, int8: bool = False):
    files = model_files(model_dir, int8)
    decoder, joiner = _session(files["decoder"]), _session(files["joiner"])
    ys, timestamps, unk_wins = list(context), [], 0
    dec = decoder.run(None, {"y": np.array([ys[-2:]], np.int64)})[0]
    for t, frame in enumerate(enc):
        y = int(np.argmax(joiner.run(None, {"encoder_out": frame[None], "decoder_out": dec})[0][0]))
        unk_wins += y == 2
        if y != 0 and not (unk_is_blank and y == 2):
            ys.append(y)
            timestamps.append(t)
            dec = decoder.run(None, {"y": np.array([ys[-2:]], np.int64)})[0]
    return ys[len(context) :], timestamps, unk_wins


# ---------------------------------------------------------------------------- layout (no ../shared needed)


def test_tokens_look_like_icefall_bpe(tmp_path: Path) -> None:
    tokens = make_tokens()
    assert len(tokens) == len(set(tokens)) == 500
    assert tokens[:3] == ["<blk>", "<sos/eos>", "<unk>"]
    assert {"\u2581THE", "\u2581", "'", "S", "ING", "\u2581A"} <= set(tokens)
    assert all(t and not any(c.isspace() for c in t) for t in tokens)
    make_transducer(tmp_path, "lstm")
    lines = (tmp_path / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "<blk> 0" and lines[4] == "\u2581THE 4" and len(lines) == 500


@pytest.mark.parametrize("kind", KINDS)
def test_generation_is_deterministic(kind: str, tmp_path: Path) -> None:
    a, b, c = (make_transducer(tmp_path / n, kind, seed=s) for n, s in (("a", 3), ("b", 3), ("c", 4)))
    for part in ("encoder.onnx", "decoder.onnx", "joiner.onnx", "tokens.txt"):
        assert (a / part).read_bytes() == (b / part).read_bytes()
    assert (a / "encoder.onnx").read_bytes() != (c / "encoder.onnx").read_bytes()


def test_zipformer2_layout_matches_sherpa_init_states(tmp_path: Path) -> None:
    d = make_transducer(tmp_path, "zipformer2", int8=True)
    for suffix in ("", ".int8"):
        enc = _session(str(d / f"encoder{suffix}.onnx"))
        meta = enc.get_modelmeta().custom_metadata_map
        assert meta["model_type"] == "zipformer2" and meta["T"] == "45" and meta["decode_chunk_len"] == "32"
        assert {"version", "model_author", "comment"} <= meta.keys()
        lists = {
            k: [int(v) for v in meta[k].split(",")]
            for k in (
                "encoder_dims",
                "query_head_dims",
                "value_head_dims",
                "num_heads",
                "num_encoder_layers",
                "cnn_module_kernels",
                "left_context_len",
            )
        }
        # What sherpa-onnx's OnlineZipformer2TransducerModel::GetEncoderInitStates builds, batch -> "N".
        expected = [("x", ["N", 45, 80], "tensor(float)")]
        layer = 0
        for s, n in enumerate(lists["num_encoder_layers"]):
            lc, dim, k = lists["left_context_len"][s], lists["encoder_dims"][s], lists["cnn_module_kernels"][s]
            key = lists["query_head_dims"][s] * lists["num_heads"][s]
            val = lists["value_head_dims"][s] * lists["num_heads"][s]
            for _ in range(n):
                expected += [
                    (f"cached_key_{layer}", [lc, "N", key], "tensor(float)"),
                    (f"cached_nonlin_attn_{layer}", [1, "N", lc, 3 * dim // 4], "tensor(float)"),
                    (f"cached_val1_{layer}", [lc, "N", val], "tensor(float)"),
                    (f"cached_val2_{layer}", [lc, "N", val], "tensor(float)"),
                    (f"cached_conv1_{layer}", ["N", dim, k // 2], "tensor(float)"),
                    (f"cached_conv2_{layer}", ["N", dim, k // 2], "tensor(float)"),
                ]
                layer += 1
        expected += [("embed_states", ["N", 128, 3, 19], "tensor(float)"), ("processed_lens", ["N"], "tensor(int64)")]
        assert [(i.name, _shape(i), i.type) for i in enc.get_inputs()] == expected
        outputs = [(o.name, _shape(o), o.type) for o in enc.get_outputs()]
        assert outputs[0] == ("encoder_out", ["N", 8, 32], "tensor(float)")
        assert outputs[1:] == [(f"new_{n}", s, t) for n, s, t in expected[1:]]


def test_lstm_layout_matches_icefall(tmp_path: Path) -> None:
    d = make_transducer(tmp_path, "lstm", int8=True)
    for suffix in ("", ".int8"):
        enc = _session(str(d / f"encoder{suffix}.onnx"))
        meta = enc.get_modelmeta().custom_metadata_map
        assert {
            k: meta[k]
            for k in ("model_type", "T", "decode_chunk_len", "num_encoder_layers", "d_model", "rnn_hidden_size")
        } == {
            "model_type": "lstm",
            "T": "21",
            "decode_chunk_len": "16",
            "num_encoder_layers": "2",
            "d_model": "16",
            "rnn_hidden_size": "24",
        }
        assert [(i.name, _shape(i)) for i in enc.get_inputs()] == [
            ("x", ["N", 21, 80]),
            ("state0", [2, "N", 16]),
            ("state1", [2, "N", 24]),
        ]
        assert [(o.name, _shape(o)) for o in enc.get_outputs()] == [
            ("encoder_out", ["N", 4, 32]),
            ("new_state0", [2, "N", 16]),
            ("new_state1", [2, "N", 24]),
        ]


@pytest.mark.parametrize("kind", KINDS)
def test_decoder_and_joiner_layout(kind: str, tmp_path: Path) -> None:
    d = make_transducer(tmp_path, kind, int8=True)
    for suffix in ("", ".int8"):
        dec, join = _session(str(d / f"decoder{suffix}.onnx")), _session(str(d / f"joiner{suffix}.onnx"))
        # quantize_dynamic adds this key, as it did to the real int8 exports.
        extra = {"onnx.infer": "onnxruntime.quant"} if suffix else {}
        assert dec.get_modelmeta().custom_metadata_map == {"context_size": "2", "vocab_size": "500", **extra}
        assert join.get_modelmeta().custom_metadata_map == {"joiner_dim": "32", **extra}
        assert [(i.name, _shape(i), i.type) for i in dec.get_inputs()] == [("y", ["N", 2], "tensor(int64)")]
        assert [(o.name, _shape(o)) for o in dec.get_outputs()] == [("decoder_out", ["N", 32])]
        assert [(i.name, _shape(i)) for i in join.get_inputs()] == [
            ("encoder_out", ["N", 32]),
            ("decoder_out", ["N", 32]),
        ]
        assert [(o.name, _shape(o)) for o in join.get_outputs()] == [("logit", ["N", 500])]
        # icefall's decoder ignores negative ids: [-1, t] equals [x, t] with x's embedding zeroed.
        out = dec.run(None, {"y": np.array([[-1, 0], [-5, 0], [0, 0], [7, 9]], np.int64)})[0]
        assert np.allclose(out[0], out[1]) and not np.allclose(out[0], out[2])
        assert not np.allclose(out[2], out[3])
    weights = {i.name for i in __import__("onnx").load(str(d / "decoder.int8.onnx")).graph.initializer}
    assert any(name.endswith("_quantized") for name in weights)


@pytest.mark.parametrize("kind", KINDS)
def test_encoder_depends_on_every_state_and_the_whole_window(kind: str, tmp_path: Path) -> None:
    """Zeroing any one state mid-stream, or changing any frame of the chunk, changes encoder_out."""
    encoder = _Encoder(make_transducer(tmp_path, kind))
    rng = np.random.default_rng(1)
    feats = (rng.standard_normal((encoder.T + 8 * encoder.shift, 80)) * 3 - 7).astype(np.float32)
    states = encoder.init_states()
    chunks = list(encoder.chunks(feats))
    for x in chunks[:6]:
        before = states
        enc, states = encoder.run(x, states)
        for name in encoder.state_names:  # recurrent: every new state differs from the old one
            assert not np.array_equal(states[name], before[name]), name
    if "processed_lens" in states:
        assert states["processed_lens"].tolist() == [6 * encoder.shift // 2]
    x = chunks[6]
    reference, ref_states = encoder.run(x, states)
    for name in encoder.state_names:
        changed = dict(states, **{name: np.zeros_like(states[name])})
        enc, new_states = encoder.run(x, changed)
        assert np.abs(enc - reference).max() > 1e-3, f"encoder_out ignores {name}"
        if name != "processed_lens":
            assert not np.allclose(new_states[name], ref_states[name]), f"new_{name} ignores {name}"
    for frame in (0, encoder.shift, encoder.T - 1):  # the first, the next chunk's first, the last frame
        moved = x.copy()
        moved[0, frame] += 2.0
        assert np.abs(encoder.run(moved, states)[0] - reference).max() > 1e-3, f"frame {frame} ignored"


# ---------------------------------------------------------------------------- against sherpa-onnx on real speech


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_sherpa_decodes_real_speech(model_dir: Path, speech_files: list[Path], int8: bool) -> None:
    results = [sherpa_greedy(model_dir, read_wav(f), prefer_int8=int8) for f in speech_files]
    frames_per_chunk = {"zipformer2": 8, "lstm": 4}[
        _session(model_files(model_dir)["encoder"]).get_modelmeta().custom_metadata_map["model_type"]
    ]
    sequences = [tuple(r["tokens"]) for r in results]
    assert all(sequences) and len(set(sequences)) == len(sequences), "every file must give its own tokens"
    emitted = sum(len(s) for s in sequences)
    frames = sum(r["chunks"] * frames_per_chunk for r in results)
    assert 0.15 <= emitted / frames <= 0.40, f"emission rate {emitted / frames:.3f}"
    for r in results:
        assert 0.05 <= len(r["tokens"]) / (r["chunks"] * frames_per_chunk) <= 0.6
        assert len(set(r["tokens"])) >= 10
        assert "<unk>" not in r["tokens"] and "<sos/eos>" not in r["tokens"]
        assert r["text"] == sherpa_text(r["tokens"])
        assert len(r["timestamps"]) == len(r["tokens"]) and r["timestamps"] == sorted(r["timestamps"])


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_cli_agrees_with_python_api(model_dir: Path, speech_files: list[Path], int8: bool) -> None:
    try:
        cli = sherpa_cli(model_dir, speech_files[:3], prefer_int8=int8)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    for f, c in zip(speech_files[:3], cli, strict=True):
        py = sherpa_greedy(model_dir, read_wav(f), prefer_int8=int8)
        assert (c["tokens"], c["text"], c["timestamps"]) == (py["tokens"], py["text"], py["timestamps"])
    # The CLI's own default adds 0.5 s of zeros in front, which changes the result.
    padded = sherpa_cli(model_dir, speech_files[:1], prefer_int8=int8, left_padding_ms=500)[0]
    assert padded["tokens"] != cli[0]["tokens"]


def test_sherpa_greedy_rules(model_dir: Path, speech_files: list[Path]) -> None:
    """sherpa's greedy search = argmax per frame, context [-1, 0], <unk> as blank, t * 0.04 s."""
    symbols = [line.rsplit(" ", 1)[0] for line in (model_dir / "tokens.txt").read_text("utf-8").splitlines()]
    encoder = _Encoder(model_dir)
    context_matters = unk_matters = unk_wins_total = 0
    for f in speech_files:
        samples = read_wav(f)
        sherpa = sherpa_greedy(model_dir, samples)
        enc = encoder.encode(_fbank(samples))
        ids, frames, unk_wins = _greedy(model_dir, enc)
        assert [symbols[i].replace("\u2581", " ") for i in ids] == sherpa["tokens"]
        assert [round(t * 0.04, 2) for t in frames] == [round(t, 2) for t in sherpa["timestamps"]]
        context_matters += _greedy(model_dir, enc, context=(0, 0))[0] != ids
        unk_matters += _greedy(model_dir, enc, unk_is_blank=False)[0] != ids
        unk_wins_total += unk_wins
    assert context_matters and unk_matters and unk_wins_total > 0


def test_modified_beam_search_and_hotwords(model_dir: Path, speech_files: list[Path]) -> None:
    samples = read_wav(speech_files[0])
    plain = sherpa_modified_beam(model_dir, samples)
    assert plain["tokens"] and plain["text"] == sherpa_text(plain["tokens"])
    t = plain["tokens"]
    # Two whole words the model says anyway; sherpa spells hotwords with bpe.vocab (fewest pieces).
    first, second = next((t[i], t[i + 1]) for i in range(len(t) - 2) if all(x.startswith(" ") for x in t[i : i + 3]))
    hotword = f"{first.strip()} {second.strip()}"
    biased = sherpa_modified_beam(model_dir, samples, hotwords=[hotword], hotwords_score=3.0)
    assert any(biased["context_scores"]) and not any(plain["context_scores"])


# ---------------------------------------------------------------------------- confident style


def test_confident_style_is_a_real_layout_that_sherpa_decodes_as_voiced_does(
        speech_files: list[Path], tmp_path: Path) -> None:
    """The confident head (tests/modelgen/confident.py) keeps the export layout: sherpa-onnx loads
    it and decodes token for token as voiced does; a class just emitted is not emitted again."""
    from voiced.asr.recognizer import Recognizer

    directory = make_transducer(tmp_path, "zipformer2", seed=3, style="confident",
                                fit_audio=[speech_files[0]])
    recognizer = Recognizer.load(directory)
    emitted = 0
    for f in speech_files:
        samples = read_wav(f)
        stream = recognizer.create_stream()
        stream.accept_waveform(samples)
        ours = recognizer.finish(stream)
        ref = sherpa_greedy(directory, samples, tail_padding_ms=800)
        assert list(ours.tokens) == ref["tokens"]
        assert all(a != b for a, b in zip(ours.tokens, ours.tokens[1:]))
        emitted += len(ours.tokens)
    assert emitted > 3 * len(speech_files)


def test_confident_style_is_for_zipformer2(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="style"):
        make_transducer(tmp_path, "lstm", style="confident")
    with pytest.raises(ValueError, match="style"):
        make_transducer(tmp_path, "zipformer2", style="peaked")

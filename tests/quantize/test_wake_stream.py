"""``voiced-quantize wake-stream``: openWakeWord's front end as one streaming graph, exactly.

On the real models and real speech: the graph's embeddings equal the published models' (a mel call
and a 76-frame window per frame; the rewrite computes the same numbers, so no tolerance is needed
beyond float noise), fed one, two or many frames per call, from the very first frame; a detector
on either front end gives the same scores; the manifest vouches for the file and names both
sources; a graph made from other models, or models the rewrite would not be exact for, are refused
by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx (voiced-quantize's graph editor) is not installed: see the test extra")
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402

from quantize.cli import main as quantize_main  # noqa: E402
from quantize.frontends import load_audio  # noqa: E402
from quantize.progress import set_quiet  # noqa: E402
from quantize.wake_stream import stream_embedding_model, stream_frontend_model, write_stream  # noqa: E402
from voiced.config import Config  # noqa: E402
from voiced.doctor.report import CheckStatus, DoctorOptions  # noqa: E402
from voiced.doctor.setup import check_models  # noqa: E402
from voiced.errors import ModelError  # noqa: E402
from voiced.models.manifest import Trust, manifest_path, verify_model_file  # noqa: E402
from voiced.runtime.onnx import create_session  # noqa: E402
from voiced.wake import WakeDetector, WakeModel  # noqa: E402
from voiced.wake.frontend import FRAME_SAMPLES, FRONTEND_STREAM, MEL_CONTEXT, StreamingFrontEnd, WindowFrontEnd  # noqa: E402

pytestmark = pytest.mark.shared
HEADS = ["alexa_v0.1", "hey_mycroft_v0.1", "timer_v0.1"]


@pytest.fixture(scope="module")
def folder(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real openWakeWord models linked into a writable folder, the streaming graph written by the CLI."""
    set_quiet(True)
    out = tmp_path_factory.mktemp("oww")
    for f in (models / "openwakeword").glob("*.onnx"):
        (out / f.name).symlink_to(f)
    assert quantize_main(["wake-stream", str(out), "-q", "--audio", str(models.parent / "speech" / "openwakeword_clips")]) == 0
    return out


@pytest.fixture(scope="module")
def samples(speech: Path) -> np.ndarray:
    """Real speech as int16 values: jfk, then a wake word between silences (digital zeros test the mel floor)."""
    silence = np.zeros(16_000, np.float32)
    audio = np.concatenate([load_audio(speech / "jfk" / "jfk.wav"), silence,
                            load_audio(speech / "openwakeword_clips" / "alexa_test.wav"), silence])
    return np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.float32)


def _front_ends(folder: Path) -> tuple[WindowFrontEnd, StreamingFrontEnd]:
    published = WindowFrontEnd(create_session(folder / "melspectrogram.onnx"), create_session(folder / "embedding_model.onnx"))
    return published, StreamingFrontEnd(create_session(folder / FRONTEND_STREAM), folder / FRONTEND_STREAM)


# 1 and 2 frames per call (what 100 ms windows give) came out bit-identical here; with 7, the convolutions'
# longer inputs are blocked differently and float rounding shows (2e-5 on embeddings of magnitude 30).
@pytest.mark.parametrize(("per_call", "atol"), [(1, 1e-5), (2, 1e-5), (7, 1e-4)])
def test_streaming_embeddings_equal_the_published_models(folder: Path, samples: np.ndarray, per_call: int,
                                                         atol: float) -> None:
    published, stream = _front_ends(folder)
    ps, ss = published.initial_state(), stream.initial_state()
    step = per_call * FRAME_SAMPLES
    compared = 0
    for i in range(0, len(samples) - MEL_CONTEXT - step + 1, step):
        chunk = samples[i:i + MEL_CONTEXT + step]
        a, ps = published.advance(ps, chunk)
        b, ss = stream.advance(ss, chunk)
        assert a.shape == b.shape == (per_call, 96)
        np.testing.assert_allclose(b, a, rtol=0, atol=atol, err_msg=f"frame {i // FRAME_SAMPLES}")
        compared += per_call
    assert compared > 150


def test_a_detector_scores_alike_on_either_front_end_from_the_first_frame(folder: Path, samples: np.ndarray) -> None:
    traces = []
    for stream in (True, False):
        detector = WakeDetector(WakeModel.load(folder, HEADS, stream=stream))
        wake = detector.create_stream()
        trace = []
        for i in range(0, len(samples), 1600):
            list(wake.accept_waveform(samples[i:i + 1600] / 32768.0))
            trace += [list(s.values()) for s in wake.last_scores]
        traces.append(np.array(trace))
    assert traces[0].shape == traces[1].shape and len(traces[0]) > 150
    np.testing.assert_allclose(traces[0], traces[1], rtol=0, atol=1e-5)
    assert traces[0][:, 0].max() > 0.5  # alexa fired: the comparison covers a real detection


def test_manifest_vouches_for_the_graph_and_names_both_sources(folder: Path) -> None:
    path = folder / FRONTEND_STREAM
    assert verify_model_file(path, use_cache=False).trust is Trust.VERIFIED
    data = json.loads(manifest_path(path).read_text())
    assert data["source"]["file"] == "embedding_model.onnx"
    assert [s["file"] for s in data["quantization"]["sources"]] == ["melspectrogram.onnx"]
    assert data["quantization"]["method"] == "stream-rewrite" and len(data["quantization"]["caches"]) == 11
    assert data["validation"]["passed"] and data["validation"]["max_abs_diff"] <= 1e-5
    assert isinstance(WakeModel.load(folder, ["alexa_v0.1"]).frontend, StreamingFrontEnd)
    assert isinstance(WakeModel.load(folder, ["alexa_v0.1"], stream=False).frontend, WindowFrontEnd)


@pytest.mark.parametrize("replaced", ["embedding_model.onnx", "melspectrogram.onnx"])
def test_a_graph_made_from_other_models_is_refused(folder: Path, tmp_path: Path, replaced: str) -> None:
    for f in folder.iterdir():
        (tmp_path / f.name).symlink_to(f.resolve()) if f.is_symlink() else (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / replaced).unlink()
    (tmp_path / replaced).write_bytes((folder / replaced).read_bytes() + b"\0")
    with pytest.raises(ModelError, match=rf"frontend.stream.onnx was made from a {replaced} .*wake-stream"):
        WakeModel.load(tmp_path, ["alexa_v0.1"])


def test_after_a_source_model_changes_the_graph_is_made_again(folder: Path, tmp_path: Path) -> None:
    """The loader says "run voiced-quantize wake-stream DIR again": that run used to check its new
    graph against the old manifest, fail, delete the graph, and fail the same way every time."""
    for f in folder.iterdir():
        (tmp_path / f.name).symlink_to(f.resolve()) if f.is_symlink() else (tmp_path / f.name).write_bytes(f.read_bytes())
    embedding = onnx.load(str(folder / "embedding_model.onnx"))
    weight = next(t for t in embedding.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 4)
    values = onnx.numpy_helper.to_array(weight).copy()
    values.flat[0] += 0.01  # a retrained embedding, as far as the manifest can tell
    weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
    (tmp_path / "embedding_model.onnx").unlink()
    onnx.save(embedding, str(tmp_path / "embedding_model.onnx"))
    with pytest.raises(ModelError, match="frontend.stream.onnx was made from a embedding_model.onnx"):
        WakeModel.load(tmp_path, ["alexa_v0.1"])
    # the doctor fails what the daemon refuses (it called this set-up ok), a head that is not there too
    for heads, message in ((["alexa_v0.1"], "frontend.stream.onnx was made from a embedding_model.onnx"),
                           (["alexa_v0.1", "hey_nobody"], f"wake word model not found: {tmp_path / 'hey_nobody.onnx'}")):
        (tmp_path / "voiced.toml").write_text(f'[wake]\ndirectory = "{tmp_path}"\nmodels = {json.dumps(heads)}\n')
        checks = check_models(Config.from_file(tmp_path / "voiced.toml"), DoctorOptions(load_models=False))
        [failed] = [c for c in checks if c.status is CheckStatus.FAIL]
        assert failed.name == "wake.models" and message in failed.message, checks
    assert write_stream(tmp_path, max_seconds=2.0).passed
    assert isinstance(WakeModel.load(tmp_path, ["alexa_v0.1"]).frontend, StreamingFrontEnd)
    assert not list(tmp_path.glob(".*.partial"))


def test_models_the_rewrite_would_not_be_exact_for_are_refused(folder: Path) -> None:
    published = onnx.load(str(folder / "embedding_model.onnx"))
    melspec = onnx.load(str(folder / "melspectrogram.onnx"))
    padded = onnx.ModelProto()
    padded.CopyFrom(published)
    conv = next(n for n in padded.graph.node if n.op_type == "Conv")
    next(a for a in conv.attribute if a.name == "pads").ints[:] = [1, 1, 1, 1]  # "same" padding along time
    with pytest.raises(ModelError, match="padded"):
        stream_embedding_model(padded)
    mixed = onnx.ModelProto()
    mixed.CopyFrom(published)
    maxes = [n for n in mixed.graph.node if n.op_type == "Max"]
    maxes[1].input[1] = maxes[0].output[0]  # a Max of two activations: frames of other times meet
    with pytest.raises(ModelError, match="not known to act frame by frame"):
        stream_embedding_model(mixed)
    with pytest.raises(ModelError, match="not openWakeWord's embedding model"):
        stream_embedding_model(onnx.load(str(folder / "alexa_v0.1.onnx")))
    with pytest.raises(ModelError, match="not openWakeWord's melspectrogram model"):
        stream_frontend_model(published, published)
    with pytest.raises(Exception, match="not a folder"):
        write_stream(folder / "melspectrogram.onnx")
    assert stream_frontend_model(melspec, published)[1]  # the real pair is fine

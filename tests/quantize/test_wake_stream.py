"""``voiced-quantize wake-stream``: openWakeWord's embedding model rewritten to stream, exactly.

On the real model and real speech: the streaming form's embeddings equal the published model's (the
rewrite computes the same numbers, so no tolerance is needed beyond float noise), fed one, two or
many frames per call; the manifest vouches for the file and names its source; a streaming form made
from another embedding model, or a graph the rewrite would not be exact for, is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="onnx (voiced-quantize's graph editor) is not installed: see the test extra")
import onnx  # noqa: E402

from quantize.cli import main as quantize_main  # noqa: E402
from quantize.frontends import OwwFrontEnd, load_audio  # noqa: E402
from quantize.progress import set_quiet  # noqa: E402
from quantize.wake_stream import stream_embedding_model, write_stream  # noqa: E402
from voiced.errors import ModelError  # noqa: E402
from voiced.models.manifest import Trust, manifest_path, verify_model_file  # noqa: E402
from voiced.runtime.onnx import create_session  # noqa: E402
from voiced.wake import WakeModel  # noqa: E402
from voiced.wake.embedding import MEL_PER_FRAME, StreamingEmbedding, WindowEmbedding, stream_path  # noqa: E402

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def folder(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real openWakeWord models linked into a writable folder, streaming form written by the CLI."""
    set_quiet(True)
    out = tmp_path_factory.mktemp("oww")
    for f in (models / "openwakeword").glob("*.onnx"):
        (out / f.name).symlink_to(f)
    assert quantize_main(["wake-stream", str(out), "-q", "--audio", str(models.parent / "speech" / "openwakeword_clips")]) == 0
    return out


@pytest.fixture(scope="module")
def mel(folder: Path, speech: Path) -> np.ndarray:
    """Mel frames of real speech: jfk and a wake word clip, whole 80 ms frames."""
    audio = np.concatenate([load_audio(speech / "jfk" / "jfk.wav"), load_audio(speech / "openwakeword_clips" / "alexa_test.wav")])
    frames = OwwFrontEnd(folder / "melspectrogram.onnx").mel(audio)
    return frames[: len(frames) - len(frames) % MEL_PER_FRAME]


@pytest.mark.parametrize("per_call", [1, 2, 7])
def test_streaming_embeddings_equal_the_published_models(folder: Path, mel: np.ndarray, per_call: int) -> None:
    window = WindowEmbedding(create_session(folder / "embedding_model.onnx"))
    stream = StreamingEmbedding(create_session(stream_path(folder / "embedding_model.onnx")), folder)
    ws, ss = window.initial_state(), stream.initial_state()
    step = per_call * MEL_PER_FRAME
    compared = 0
    for i in range(0, len(mel) - step + 1, step):
        a, ws = window.advance(ws, mel[i:i + step])
        b, ss = stream.advance(ss, mel[i:i + step])
        assert a.shape == b.shape == (per_call, 96)
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-5, err_msg=f"frame {i // MEL_PER_FRAME}")
        compared += per_call
    assert compared > 100


def test_manifest_vouches_for_the_streaming_form_and_names_its_source(folder: Path) -> None:
    path = stream_path(folder / "embedding_model.onnx")
    status = verify_model_file(path, use_cache=False)
    assert status.trust is Trust.VERIFIED
    data = json.loads(manifest_path(path).read_text())
    assert data["source"]["file"] == "embedding_model.onnx"
    assert data["quantization"]["method"] == "stream-rewrite" and len(data["quantization"]["caches"]) == 11
    assert data["validation"]["passed"] and data["validation"]["max_abs_diff"] <= 1e-5
    assert isinstance(WakeModel.load(folder, ["alexa_v0.1"]).embedder, StreamingEmbedding)
    assert isinstance(WakeModel.load(folder, ["alexa_v0.1"], stream=False).embedder, WindowEmbedding)


def test_a_streaming_form_of_another_embedding_model_is_refused(folder: Path, tmp_path: Path) -> None:
    for f in folder.iterdir():
        (tmp_path / f.name).symlink_to(f.resolve()) if f.is_symlink() else (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "embedding_model.onnx").unlink()
    (tmp_path / "embedding_model.onnx").write_bytes((folder / "embedding_model.onnx").read_bytes() + b"\0")
    with pytest.raises(ModelError, match=r"embedding_model.stream.onnx was made from .*wake-stream"):
        WakeModel.load(tmp_path, ["alexa_v0.1"])


def test_graphs_the_rewrite_would_not_be_exact_for_are_refused(folder: Path, tmp_path: Path) -> None:
    published = onnx.load(str(folder / "embedding_model.onnx"))
    padded = onnx.ModelProto()
    padded.CopyFrom(published)
    conv = next(n for n in padded.graph.node if n.op_type == "Conv")
    next(a for a in conv.attribute if a.name == "pads").ints[:] = [1, 1, 1, 1]  # "same" padding along time
    with pytest.raises(ModelError, match="padded"):
        stream_embedding_model(padded)
    with pytest.raises(ModelError, match="not openWakeWord's embedding model"):
        stream_embedding_model(onnx.load(str(folder / "alexa_v0.1.onnx")))
    with pytest.raises(ModelError, match="not openWakeWord's embedding model"):
        write_stream(folder / "melspectrogram.onnx", output=tmp_path / "x.onnx")

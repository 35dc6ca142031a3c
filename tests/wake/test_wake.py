"""openWakeWord in voiced: scores equal the ``openwakeword`` package's, frame for frame, on real audio.

The reference runs its own streaming path (80 ms chunks) on the same ONNX files from ../shared;
voiced is fed the 100 ms windows the daemon captures, through both its front ends: the published
models (a mel call and a 76-frame window per frame) and the streaming graph ``voiced-quantize
wake-stream`` makes of them (the one the daemon prefers). openWakeWord seeds its embedding history with
embeddings of random noise, so frames are compared once every head (timer: 34 frames) sees only
embeddings of the audio itself; before that the reference is not even repeatable.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.audio.wav import read_wav
from voiced.errors import ModelError
from voiced.wake import Detection, WakeConfig, WakeDetector, WakeModel
from voiced.wake.frontend import StreamingFrontEnd, WindowFrontEnd

pytest.importorskip("openwakeword", reason="openwakeword (the reference) is not installed: see the README's install line")
from openwakeword.model import Model as Reference  # noqa: E402

HEADS = ["alexa_v0.1", "hey_jarvis_v0.1", "hey_mycroft_v0.1", "hey_rhasspy_v0.1", "timer_v0.1", "weather_v0.1"]
WINDOW = 1600  # the daemon's 100 ms window
FIRST_COMPARED = 34  # frames before this still see the reference's random start-up history


@pytest.fixture(scope="module")
def oww(models: Path) -> Path:
    return models / "openwakeword"


@pytest.fixture(scope="module")
def streamed(oww: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared models (linked) plus frontend.stream.onnx written by voiced-quantize wake-stream."""
    pytest.importorskip("onnx", reason="onnx (voiced-quantize's graph editor) is not installed: see the test extra")
    from quantize.wake_stream import write_stream

    folder = tmp_path_factory.mktemp("oww_stream")
    for f in oww.glob("*.onnx"):
        (folder / f.name).symlink_to(f)
    assert write_stream(folder).passed
    return folder


@pytest.fixture(scope="module", params=["stream", "window"])
def detector(request: pytest.FixtureRequest, oww: Path) -> WakeDetector:
    if request.param == "window":
        model = WakeModel.load(oww, HEADS)
        assert isinstance(model.frontend, WindowFrontEnd)
    else:
        model = WakeModel.load(request.getfixturevalue("streamed"), HEADS)
        assert isinstance(model.frontend, StreamingFrontEnd)
    return WakeDetector(model)


_REFERENCE: dict[Path, list[dict[str, float]]] = {}
"""The reference's scores per clip, computed once for both forms."""


def _padded(path: Path) -> np.ndarray:
    """The clip between silences, as openWakeWord's own clip test pads it (1 s after, 2 s before)."""
    audio = read_wav(path)[0][:, 0]
    return np.concatenate([np.zeros(32000, np.float32), audio, np.zeros(16000, np.float32)])


def _ours(detector: WakeDetector, audio: np.ndarray, config: WakeConfig | None = None):
    stream = (WakeDetector(detector.model, config) if config else detector).create_stream()
    scores, detections = [], []
    for i in range(0, len(audio), WINDOW):
        detections += list(stream.accept_waveform(audio[i:i + WINDOW]))
        scores += stream.last_scores
    return scores, detections


def _reference(oww: Path, audio: np.ndarray) -> list[dict[str, float]]:
    ref = Reference(wakeword_models=[str(oww / f"{h}.onnx") for h in HEADS], inference_framework="onnx",
                    melspec_model_path=str(oww / "melspectrogram.onnx"),
                    embedding_model_path=str(oww / "embedding_model.onnx"))
    pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype(np.int16)
    # the reference names the timer head's classes by column number; voiced by the names in the model
    timer = {str(c): label for c, label in zip(detector_columns(oww), detector_labels(oww))}
    out = []
    for i in range(0, len(pcm) - 1279, 1280):
        scores = ref.predict(pcm[i:i + 1280])
        out.append({timer.get(k, k): float(v) for k, v in scores.items() if k != "0"})
    return out


def detector_columns(oww: Path) -> tuple[int, ...]:
    return WakeModel.load(oww, ["timer_v0.1"]).heads[0].columns


def detector_labels(oww: Path) -> tuple[str, ...]:
    return WakeModel.load(oww, ["timer_v0.1"]).heads[0].labels


def _clips(speech: Path) -> list[Path]:
    hifi = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[:3]
    return [*sorted((speech / "openwakeword_clips").glob("*.wav")), speech / "jfk" / "jfk.wav", *hifi]


@pytest.mark.shared
def test_scores_equal_openwakeword_frame_for_frame_for_every_head(detector, oww, speech) -> None:
    compared = 0
    for clip in _clips(speech):
        audio = _padded(clip)
        ours, _ = _ours(detector, audio)
        if clip not in _REFERENCE:
            _REFERENCE[clip] = _reference(oww, audio)
        ref = _REFERENCE[clip]
        assert abs(len(ours) - len(ref)) <= 1, clip.name
        for k in range(FIRST_COMPARED, min(len(ours), len(ref))):
            assert set(ours[k]) == set(ref[k]) == set(detector.labels)
            for label, score in ours[k].items():
                assert abs(score - ref[k][label]) <= 1e-4, (clip.name, k, label, score, ref[k][label])
                compared += 1
    assert compared > 5_000


@pytest.mark.shared
def test_alexa_and_hey_mycroft_fire_on_their_clips_and_nothing_fires_on_speech(detector, speech) -> None:
    _, alexa = _ours(detector, _padded(speech / "openwakeword_clips" / "alexa_test.wav"))
    assert [d.label for d in alexa] == ["alexa_v0.1"] and alexa[0].score >= 0.5
    _, mycroft = _ours(detector, _padded(speech / "openwakeword_clips" / "hey_mycroft_test.wav"))
    assert [d.label for d in mycroft] == ["hey_mycroft_v0.1"]
    for clip in [speech / "jfk" / "jfk.wav", speech / "misc_en" / "beckett.wav"]:
        _, none = _ours(detector, _padded(clip))
        assert none == [], clip.name


@pytest.mark.shared
def test_refractory_and_patience(detector, speech) -> None:
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    gap = np.zeros(16000, np.float32)
    twice = np.concatenate([gap, gap, alexa, gap, alexa, gap])  # the second "alexa" 1.6 s after the first
    only_alexa = {label: (0.5 if label == "alexa_v0.1" else 1.0) for label in detector.labels}
    rules = WakeConfig(thresholds=only_alexa, refractory_s=5.0)
    _, long_quiet = _ours(detector, twice, rules)
    assert [d.label for d in long_quiet if d.label == "alexa_v0.1"] == ["alexa_v0.1"]
    _, short_quiet = _ours(detector, twice, WakeConfig(thresholds=only_alexa, refractory_s=1.2))
    assert len([d for d in short_quiet if d.label == "alexa_v0.1"]) == 2
    _, patient = _ours(detector, twice, WakeConfig(thresholds=only_alexa, refractory_s=1.2, patience=50))
    assert not [d for d in patient if d.label == "alexa_v0.1"]  # never 50 frames (4 s) in a row
    assert all(isinstance(d, Detection) and d.time > 2.0 for d in short_quiet)


def test_missing_and_wrong_models_are_named(tmp_path: Path, oww: Path) -> None:
    with pytest.raises(ModelError, match="nope.onnx"):
        WakeModel.load(oww, ["nope"])
    with pytest.raises(ModelError, match=r"melspectrogram.onnx.*not an openWakeWord head"):
        WakeModel.load(oww, [oww / "melspectrogram.onnx"])
    with pytest.raises(Exception, match="wake.threshold"):
        WakeConfig(threshold=0.0)


def test_the_config_sets_a_threshold_per_wake_word_and_names_what_it_cannot_use(tmp_path: Path, oww: Path) -> None:
    """README: Home Assistant's sensitivity moves ``[wake] threshold`` "(and ``thresholds``)", but
    the config refused the key; a directory naming a head file loaded the head as the front end and
    failed inside ONNX Runtime (and doctor said ok)."""
    from voiced.config import Config
    from voiced.core.models import Models
    from voiced.errors import ConfigError
    from voiced.runtime.hardware import select_profile
    from voiced.stages import Counters

    def load(wake: str) -> Models:
        (tmp_path / "voiced.toml").write_text(f'[audio]\nsource = "none"\n[wake]\ndirectory = "{oww}"\n{wake}\n')
        config = Config.from_file(tmp_path / "voiced.toml")
        return Models.load(config, select_profile(config.hardware.profile).fitted(), Counters())

    heads = 'models = ["alexa_v0.1", "hey_jarvis_v0.1"]'
    loaded = load(f'{heads}\nthreshold = 0.4\nthresholds = {{ "hey_jarvis_v0.1" = 0.8 }}')
    assert loaded.wake is not None
    rules = loaded.wake.config
    assert (rules.threshold_for("alexa_v0.1"), rules.threshold_for("hey_jarvis_v0.1")) == (0.4, 0.8)
    with pytest.raises(ConfigError, match=r"^wake\.thresholds\.hey_jarvis in .*voiced\.toml: no such wake word "
                                          r"\(the models give: alexa_v0\.1, hey_jarvis_v0\.1\)"):
        load(f'{heads}\nthresholds = {{ "hey_jarvis" = 0.8 }}')
    with pytest.raises(ConfigError, match=r"^wake\.thresholds\.alexa_v0\.1 in .*: must be within \(0, 1\], got 1\.5"):
        Config.from_dict({"wake": {"thresholds": {"alexa_v0.1": 1.5}}}, tmp_path / "voiced.toml")
    with pytest.raises(ConfigError, match=r"^wake\.thresholds in .*: must be a table"):
        Config.from_dict({"wake": {"thresholds": 0.5}}, tmp_path / "voiced.toml")
    head = oww / "alexa_v0.1.onnx"
    with pytest.raises(ConfigError, match=r"^wake\.directory in .*: .*alexa_v0\.1\.onnx is a file: name the folder"):
        Config.from_dict({"wake": {"directory": str(head), "models": ["alexa_v0.1"]}}, tmp_path / "voiced.toml")


def test_a_streaming_front_end_without_its_manifest_is_not_used(streamed: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """``cp *.onnx`` leaves the manifest behind, and with it the check that the graph was made from
    these models (a replaced embedding model gave other scores, with only the FP32-without-manifest
    hint said): the published front end runs instead, and the warning says how to make it again."""
    for f in streamed.glob("*.onnx"):
        (tmp_path / f.name).symlink_to(f.resolve())
    assert (streamed / "frontend.stream.onnx.json").is_file() and not (tmp_path / "frontend.stream.onnx.json").exists()
    with caplog.at_level("WARNING", logger="voiced.wake"):
        model = WakeModel.load(tmp_path, ["alexa_v0.1"])
    assert isinstance(model.frontend, WindowFrontEnd)
    assert any("has no manifest" in r.getMessage() and f"wake-stream {tmp_path}" in r.getMessage()
               for r in caplog.records)
    assert isinstance(WakeModel.load(streamed, ["alexa_v0.1"]).frontend, StreamingFrontEnd)

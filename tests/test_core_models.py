"""``Models.load``: every model the daemon loads keeps its optimized graph between starts, with the
same outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.modelgen.transducer import make_transducer
from tests.tts.joe import joe_voice_path
from voiced.audio.wav import read_wav
from voiced.config import Config
from voiced.errors import ModelError
from voiced.core.models import Models
from voiced.runtime.graph_cache import SUFFIX
from voiced.runtime.hardware import OnnxRole, select_profile
from voiced.stages import Counters
from voiced.tts import PiperVoice
from voiced.tts.config import SynthesisOptions, VoiceSettings
from voiced.vad import SileroVad
from voiced.wake import WakeDetector, WakeModel

pytest.importorskip("piper", reason="espeak-ng comes with piper-tts (the voiced[tts] extra)")

SENTENCE = "Turn on the kitchen lights. It is seven o'clock."
WAKE_HEAD = "alexa_v0.1"


@pytest.fixture(scope="module")
def transducer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_transducer(tmp_path_factory.mktemp("z2"), "zipformer2", int8=True)


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "voiced" / "onnx"


def _config(models: Path, transducer: Path, state: Path, voice: Path) -> Config:
    return Config.from_dict({
        "vad": {"kind": "silero", "model": str(models / "silero_vad_v5" / "silero_vad.onnx")},
        "asr": {"model": str(transducer)},
        "wake": {"directory": str(models / "openwakeword"), "models": [WAKE_HEAD]},
        "tts": {"voice": str(voice)},
        "daemon": {"state_dir": str(state)},
    })


def _load(config: Config) -> Models:
    return Models.load(config, select_profile(config.hardware.profile), Counters())


def _outputs(silero: SileroVad, wake: WakeDetector, voice: PiperVoice, speech: np.ndarray):
    state, probabilities = silero.initial_state(), []
    for start in range(0, len(speech) - 512, 512):
        p, state = silero.run(speech[start:start + 512], state)
        probabilities.append(p)
    stream = wake.create_stream()
    detections = [d for start in range(0, len(speech), 1600) for d in stream.accept_waveform(speech[start:start + 1600])]
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    audio = np.concatenate([c.samples for c in voice.synthesize(SENTENCE, quiet)])
    return np.array(probabilities), detections, audio


@pytest.mark.shared
def test_every_model_keeps_its_optimized_graph_with_the_same_outputs(models: Path, speech: Path, transducer: Path,
                                                                     cache: Path, tmp_path: Path) -> None:
    """It was the recognizer's alone: the joe voice was optimized at every start (0.75 s of the
    daemon's ~1.5 s to READY=1 here), Silero and openWakeWord too."""
    voice_path = joe_voice_path()
    config = _config(models, transducer, tmp_path / "state", voice_path)
    samples = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    samples = np.concatenate([samples, read_wav(speech / "jfk" / "jfk.wav")[0][:16000 * 4, 0]])

    first = _load(config)
    kept = sorted(p.name.split("-")[0] for p in cache.glob(f"*{SUFFIX}"))
    assert kept == sorted(["alexa_v0.1", "decoder.int8", "embedding_model", "en_US", "encoder.int8", "joiner.int8",
                           "melspectrogram", "silero_vad"]), kept
    mtimes = {p: p.stat().st_mtime_ns for p in cache.glob(f"*{SUFFIX}")}

    second = _load(config)
    assert {p: p.stat().st_mtime_ns for p in cache.glob(f"*{SUFFIX}")}.keys() == mtimes.keys(), "no new entry"
    assert first.wake is not None and second.wake is not None and first.voice and second.voice
    assert first.silero is not None and second.silero is not None
    # the same models loaded as before the cache: optimized at load, with the profile's threads
    profile = select_profile(config.hardware.profile)
    plain = (SileroVad.load(models / "silero_vad_v5" / "silero_vad.onnx", profile.session_options(OnnxRole.VAD)),
             WakeDetector(WakeModel.load(models / "openwakeword", [WAKE_HEAD],
                                         options=profile.session_options(OnnxRole.VAD)), first.wake.config),
             PiperVoice.load(voice_path, settings=VoiceSettings(session=profile.session_options(OnnxRole.TTS))))
    want = _outputs(*plain, samples)
    assert want[0].max() > 0.9 and want[1], "speech and the wake word are there to be found"
    for loaded in (first, second):
        got = _outputs(loaded.silero, loaded.wake, loaded.voice, samples)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]
        np.testing.assert_array_equal(got[2], want[2])
    first.close()
    second.close()


@pytest.mark.parametrize(("key", "section"), [
    ("asr.model", {"asr": {"model": "no-such-dir"}}),
    ("vad.model", {"vad": {"kind": "silero", "model": "no-such.onnx"}}),
    ("tts.voice", {"tts": {"voice": "no-such-voice.onnx"}}),
    ("llm.model", {"llm": {"model": "no-such-llm"}}),  # loaded lazily: it was said at the first unmatched command
])
def test_a_model_that_does_not_load_names_its_key_and_the_config_file(tmp_path: Path, key: str,
                                                                      section: dict) -> None:
    """The model's own error named only its path: which key of which file to fix was the user's guess."""
    config = Config.from_dict({"vad": {"kind": "energy"}, **section, "daemon": {"state_dir": str(tmp_path / "s")}},
                              tmp_path / "voiced.toml")
    with pytest.raises(ModelError, match=rf"^{key} in {tmp_path / 'voiced.toml'}: .*no-such"):
        _load(config)

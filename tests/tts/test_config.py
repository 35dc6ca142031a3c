"""Voice configs, options and loading: real lessac configs, and errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from tests.tts.voicegen import id_model, make_voice, multi_speaker
from voiced.errors import ConfigError, ModelError
from voiced.tts.config import PhonemeType, SynthesisOptions, VoiceConfig, VoiceSettings
from voiced.tts.voice import PiperVoice


def test_real_lessac_configs(lessac_medium: dict[str, Any], lessac_low: dict[str, Any]) -> None:
    medium, low = VoiceConfig.from_dict(lessac_medium), VoiceConfig.from_dict(lessac_low)
    assert (medium.sample_rate, low.sample_rate) == (22050, 16000)
    assert medium.espeak_voice == "en-us" and medium.phoneme_type is PhonemeType.ESPEAK
    assert (medium.noise_scale, medium.length_scale, medium.noise_w) == (0.667, 1.2, 0.8)
    assert low.length_scale == 1 and medium.num_symbols == 256 and medium.num_speakers == 1
    assert medium.phoneme_id_map["^"] == (1,) and medium.phoneme_id_map["_"] == (0,) and len(medium.phoneme_id_map) == 154
    assert medium.language == "en_US" and medium.speaker_id(3) is None  # single speaker: sid ignored, as in Piper


def test_piper_defaults_for_optional_keys() -> None:
    config = VoiceConfig.from_dict({"audio": {"sample_rate": 22050}, "phoneme_id_map": {"^": [1], "_": [0], "$": [2]}})
    assert (config.noise_scale, config.length_scale, config.noise_w) == (0.667, 1.0, 0.8)
    assert config.espeak_voice == "en-us" and config.num_speakers == 1


def test_speakers(lessac_medium: dict[str, Any]) -> None:
    config = VoiceConfig.from_dict(multi_speaker(lessac_medium, 4))
    assert config.speaker_id(None) == 0 and config.speaker_id(3) == 3 and config.speaker_id("speaker_2") == 2
    assert config.speaker_id("1") == 1
    with pytest.raises(ConfigError, match="speaker: must be within 0..3, got 4"):
        config.speaker_id(4)
    with pytest.raises(ConfigError, match="'bob' is not a speaker of this voice"):
        config.speaker_id("bob")


@pytest.mark.parametrize(("change", "key"), [
    (lambda c: c.pop("audio"), "audio.sample_rate"),
    (lambda c: c["audio"].update(sample_rate="22050"), "audio.sample_rate"),
    (lambda c: c.pop("phoneme_id_map"), "phoneme_id_map"),
    (lambda c: c["phoneme_id_map"].pop("^"), "phoneme_id_map"),
    (lambda c: c["phoneme_id_map"].update(a=[300]), "phoneme_id_map"),
    (lambda c: c["phoneme_id_map"].update(a=["x"]), "phoneme_id_map"),
    (lambda c: c.update(phoneme_type="openjtalk"), "phoneme_type"),
    (lambda c: c.update(num_speakers=0), "num_speakers"),
    (lambda c: c.update(num_speakers=2, speaker_id_map={"a": 5}), "speaker_id_map"),
    (lambda c: c["inference"].update(length_scale=0), "inference.length_scale"),
    (lambda c: c["inference"].update(noise_w=-1), "inference.noise_w"),
    (lambda c: c.update(espeak=[]), "espeak"),
])
def test_bad_configs_name_file_and_key(self_config: dict[str, Any], tmp_path: Path, change: Any, key: str) -> None:
    config = json.loads(json.dumps(self_config))
    change(config)
    path = tmp_path / "bad.onnx.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ModelError) as err:
        VoiceConfig.from_file(path)
    assert str(path) in str(err.value) and key in str(err.value)


def test_unreadable_configs(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="voice config not found: .*missing.onnx.json"):
        VoiceConfig.from_file(tmp_path / "missing.onnx.json")
    (tmp_path / "broken.onnx.json").write_text('{"audio": ')
    with pytest.raises(ModelError, match="broken.onnx.json is not valid JSON"):
        VoiceConfig.from_file(tmp_path / "broken.onnx.json")
    (tmp_path / "list.onnx.json").write_text("[]")
    with pytest.raises(ModelError, match="list.onnx.json must hold a JSON object"):
        VoiceConfig.from_file(tmp_path / "list.onnx.json")


def test_loading_errors_name_the_file(self_config: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="voice model not found: .*nope.onnx"):
        PiperVoice.load(tmp_path / "nope.onnx")
    model = make_voice(tmp_path / "v", self_config, "ids")
    model.with_name("voice.onnx.json").unlink()
    with pytest.raises(ModelError, match="voice config not found: .*voice.onnx.json"):
        PiperVoice.load(model)
    (tmp_path / "corrupt.onnx").write_bytes(b"\x08\x07 not a protobuf")
    (tmp_path / "corrupt.onnx.json").write_text(json.dumps(self_config))
    with pytest.raises(ModelError, match="corrupt.onnx"):
        PiperVoice.load(tmp_path / "corrupt.onnx")


def test_model_and_config_must_agree_on_speakers(self_config: dict[str, Any], tmp_path: Path) -> None:
    # a single-speaker model under a 3-speaker config: no sid input
    path = tmp_path / "voice.onnx"
    onnx.save(id_model(multi=False), str(path))
    (tmp_path / "voice.onnx.json").write_text(json.dumps(multi_speaker(self_config, 3)))
    with pytest.raises(ModelError, match=r"voice.onnx: not the Piper layout .* sid"):
        PiperVoice.load(path)


def test_split_voice_directories(self_config: dict[str, Any], tmp_path: Path) -> None:
    folder = make_voice(tmp_path / "split", self_config, "split-ids")
    assert PiperVoice.load(folder).streaming
    (folder / "decoder.onnx").unlink()
    with pytest.raises(ModelError, match="split voice .*split: decoder.onnx is missing"):
        PiperVoice.load(folder)
    whole = make_voice(tmp_path / "whole", self_config, "ids")
    assert not PiperVoice.load(whole.parent).streaming  # a folder with one voice.onnx
    (whole.parent / "other.onnx").write_bytes(b"")
    with pytest.raises(ModelError, match="need one"):
        PiperVoice.load(whole.parent)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"speaker": -1}, "speaker"), ({"speaker": ""}, "speaker"), ({"length_scale": 0}, "length_scale"),
    ({"noise_scale": -0.1}, "noise_scale"), ({"noise_w": float("nan")}, "noise_w"), ({"volume": 5}, "volume"),
    ({"sentence_silence": -1}, "sentence_silence"),
])
def test_synthesis_options_validation(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        SynthesisOptions(**kwargs)
    assert err.value.key == key


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"chunk_frames": 0}, "chunk_frames"), ({"chunk_padding": -1}, "chunk_padding"),
    ({"max_text_chars": 0}, "max_text_chars"), ({"max_sentence_phonemes": 2}, "max_sentence_phonemes"),
    ({"release_after_phonemes": -1}, "release_after_phonemes"),
    ({"session": 1}, "session"),
])
def test_voice_settings_validation(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        VoiceSettings(**kwargs)
    assert err.value.key == key

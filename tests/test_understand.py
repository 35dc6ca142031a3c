"""``voiced understand``: recordings through a config's models, endpointing and intents, as the daemon hears them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.audio.test_alsa import _alsa_conf, file_pcm, needs_alsa
from tests.test_cli_listen import REPO
from tests.test_whisper_templates import OFFICE_CLIP
from voiced.audio.wav import read_wav
from voiced.cli import main
from voiced.config import Config
from voiced.errors import ConfigError
from voiced.intents import Intent, Slot, SlotKind
from voiced.understand import Understanding, Understood


def _config(path: Path, model: Path | None, silero: Path) -> Path:
    asr = f'[asr]\nmodel = "{model}"\n' if model is not None else ""
    path.write_text(f"""{asr}
[vad]
kind = "silero"
model = "{silero}"

[intents]
builtin = "home-assistant"

[intents.lists]
name = ["desk lamp", "ceiling fan"]
area = ["office", "kitchen", "living room"]
""", encoding="utf-8")
    return path


@pytest.mark.shared
def test_a_real_command_among_talk_gets_the_intent_the_daemon_would_publish(
        whisper_int8_dir: Path, speech: Path, models: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Real human speech, Whisper tiny.en INT8 with the config's Home Assistant sentences and areas:
    the talk about bulbs keeps its free transcripts and no intent, the command is HassTurnOn."""
    config = _config(tmp_path / "voiced.toml", whisper_int8_dir, models / "silero_vad_v5" / "silero_vad.onnx")
    clip, jfk = speech.joinpath(*OFFICE_CLIP), speech / "jfk" / "jfk.wav"
    missing = tmp_path / "missing.wav"

    code = main(["understand", "--config", str(config), "--json", str(clip), str(missing), str(jfk)])

    out, err = capsys.readouterr()
    assert code == 1 and str(missing) in err  # the missing file is named, the others still understood
    lines = [json.loads(line) for line in out.splitlines()]
    office = [u for u in lines if u["file"] == str(clip)]
    assert len(office) == 4, [u["text"] for u in office]
    assert [u["intent"] for u in office] == [None, None, None, "HassTurnOn"]
    assert office[-1]["slots"] == {"area": "office", "domain": "light"}
    assert office[-1]["source"] == "template" and office[-1]["start"] > 30
    assert [u["from_templates"] for u in office] == [False, False, False, True]
    speech_of_jfk = [u for u in lines if u["file"] == str(jfk)]
    assert speech_of_jfk and all(u["intent"] is None for u in speech_of_jfk)
    assert "country" in " ".join(u["text"] for u in speech_of_jfk).lower()


@pytest.mark.shared
def test_a_recording_is_heard_from_the_channel_the_config_picks(
        whisper_int8_dir: Path, speech: Path, models: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A 2-mic HAT's recording checked with its config (channel = 1): understand mixed the channels
    down while the daemon hears channel 1 only, so it found commands the daemon never would."""
    audio, rate = read_wav(speech.joinpath(*OFFICE_CLIP))
    command = audio[int(30.5 * rate):, 0]  # "turn on the office lights"
    stereo = np.zeros((len(command), 2), np.float32)
    stereo[:, 1] = command  # channel 0 is silent
    from voiced.audio.wav import write_wav

    write_wav(tmp_path / "hat.wav", stereo, rate)
    (tmp_path / "lights.yaml").write_text("language: en\nintents:\n  HassTurnOn:\n    data:\n"
                                          "      - sentences: ['turn on the office lights']\n")
    config = tmp_path / "voiced.toml"
    base = (f'[asr]\nmodel = "{whisper_int8_dir}"\n[vad]\nkind = "silero"\n'
            f'model = "{models / "silero_vad_v5" / "silero_vad.onnx"}"\n'
            f'[intents]\ntemplates = ["{tmp_path / "lights.yaml"}"]\n')

    def intents(channel: int) -> list[str | None]:
        config.write_text(f'[audio]\nchannels = 2\nchannel = {channel}\n\n{base}')
        assert main(["understand", "--config", str(config), "--json", str(tmp_path / "hat.wav")]) == 0
        return [json.loads(line)["intent"] for line in capsys.readouterr().out.splitlines()]

    assert intents(1) == ["HassTurnOn"]
    assert intents(0) == []  # the daemon hears nothing there either
    write_wav(tmp_path / "hat.wav", command, rate)  # a mono recording: all there is, whatever the channel
    assert intents(1) == ["HassTurnOn"]


def test_a_config_without_a_model_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path / "voiced.toml", None, tmp_path / "silero.onnx")
    with pytest.raises(ConfigError, match="asr.model") as err:
        Understanding(Config.from_file(path))
    assert str(path) in str(err.value)


def test_an_utterance_reads_as_text_and_json() -> None:
    slot = Slot("area", "area", "office", "office", SlotKind.LIST, 12, 18)
    intent = Intent("HassTurnOn", "turn on the office lights", (slot,), 1.0)
    said = Understood("a.wav", 1.0, 2.5, "turn on the office lights", True, intent)
    assert str(said) == "a.wav: [1.00-2.50] turn on the office lights (template sentence) -> HassTurnOn {area: office}"
    assert said.to_dict() == {"file": "a.wav", "start": 1.0, "end": 2.5, "text": "turn on the office lights",
                              "from_templates": True, "intent": "HassTurnOn", "slots": {"area": "office"},
                              "source": "template"}
    talk = Understood("a.wav", 3.0, 4.0, "hello there", False, None)
    assert str(talk) == "a.wav: [3.00-4.00] hello there -> no intent"
    assert talk.to_dict()["intent"] is None and talk.to_dict()["slots"] == {}


@needs_alsa
@pytest.mark.shared
def test_with_no_files_it_listens_to_the_configs_microphone(whisper_int8_dir: Path, speech: Path, models: Path,
                                                             tmp_path: Path) -> None:
    """Through real libasound (the ALSA file plugin's infile is the microphone): the spoken command
    comes out as its intent while the process listens, and SIGTERM ends it cleanly."""
    audio, rate = read_wav(speech.joinpath(*OFFICE_CLIP))
    command = audio[int(30.5 * rate):, 0]  # "turn on the office lights", after the talk
    pcm = (np.clip(command, -1, 1) * 32767).astype(np.int16)
    # the file plugin keeps returning stale data after its infile ends: pad with real silence
    infile = tmp_path / "mic.raw"
    infile.write_bytes(np.concatenate([np.zeros(8000, np.int16), pcm, np.zeros(rate * 20, np.int16)]).tobytes())
    asound = tmp_path / "asoundrc"
    asound.write_text(file_pcm("mic", infile))
    config = _config(tmp_path / "voiced.toml", whisper_int8_dir, models / "silero_vad_v5" / "silero_vad.onnx")
    config.write_text(f'[audio]\nsource = "alsa:mic"\n\n{config.read_text()}')
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{asound}", HOME=str(tmp_path), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "voiced.cli", "understand", "--config", str(config), "--json"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = threading.Timer(180, proc.terminate)  # heard nothing: end it, readline then sees EOF
    deadline.start()
    try:
        heard = json.loads(proc.stdout.readline() or "null")  # type: ignore[union-attr]
    finally:
        deadline.cancel()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert heard is not None, err
    assert (heard["intent"], heard["slots"]) == ("HassTurnOn", {"area": "office", "domain": "light"}), heard
    assert heard["file"].startswith("alsa:mic") and "listening on alsa:mic" in err
    assert proc.returncode == 0, err


def test_with_no_files_and_no_source_it_says_what_to_give(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before any model is loaded: the config's [audio] source is none (its default)."""
    config = _config(tmp_path / "voiced.toml", tmp_path / "no-model-here", tmp_path / "silero.onnx")
    assert main(["understand", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "audio.source" in err and str(config) in err and "give WAV files" in err

"""voiced transcribe with a VAD, and voiced listen on real libasound (ALSA file plugin)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.audio.test_alsa import _alsa_conf, file_pcm, needs_alsa
from tests.modelgen.transducer import make_transducer
from voiced.cli import main

REPO = Path(__file__).resolve().parents[1]
COMMAND = "hifitts_6097_5min/audio/swag_06_tompkins_0883.wav"  # "no mistake can well be made", 1.9 s


@pytest.fixture(scope="module")
def asr_model(tmp_path_factory) -> Path:
    return make_transducer(tmp_path_factory.mktemp("asr"), "lstm", seed=5)


def read(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


def padded_command(speech: Path, tmp_path: Path) -> Path:
    silence = np.zeros(16000, np.int16)
    path = tmp_path / "command.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.concatenate([silence, read(speech / COMMAND), silence, silence]).tobytes())
    return path


def test_silero_turns_one_command_into_one_utterance(speech, models, asr_model, tmp_path, capsys) -> None:
    wav = padded_command(speech, tmp_path)
    vad = models / "silero_vad_v5" / "silero_vad.onnx"
    assert main(["transcribe", "--json", "--vad", "silero", "--vad-model", str(vad),
                 "--asr-model", str(asr_model), str(wav)]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [e["type"] for e in events]
    assert types.count("speech_start") == 1 and types.count("final") == 1 and types.count("speech_end") == 1
    start = next(e for e in events if e["type"] == "speech_start")
    final = next(e for e in events if e["type"] == "final")
    assert 0.8 <= start["start"] <= 1.3, "speech begins after 1 s of silence"
    assert 2.6 <= final["end"] <= 3.2, "and ends 1.9 s later"
    assert final["text"]


def test_a_vad_model_alone_means_silero_and_silero_without_one_names_the_option(speech, models, asr_model, tmp_path,
                                                                                 capsys) -> None:
    """``--vad-model`` without ``--vad`` was ignored (transcribe's default is none: one utterance from
    0 s); as in a config, a model given means the Silero VAD. Silero without a model named an
    internal key ("vad_model"), not the option to give."""
    wav = padded_command(speech, tmp_path)
    vad = models / "silero_vad_v5" / "silero_vad.onnx"
    assert main(["transcribe", "--json", "--vad-model", str(vad), "--asr-model", str(asr_model), str(wav)]) == 0
    start = next(json.loads(x) for x in capsys.readouterr().out.splitlines() if '"speech_start"' in x)
    assert 0.8 <= start["start"] <= 1.3, "the speech, found by Silero, not the whole file"
    assert main(["transcribe", "--vad", "silero", "--asr-model", str(asr_model), str(wav)]) == 1
    assert "voiced: --vad-model: " in capsys.readouterr().err


def test_a_model_directory_that_is_not_one_says_why(asr_model, tmp_path, capsys) -> None:
    whisper_like = tmp_path / "whisper"
    whisper_like.mkdir()
    (whisper_like / "tiny.en-encoder.int8.onnx").write_bytes(b"")
    wav = tmp_path / "x.wav"
    wav.write_bytes(b"")
    for model, said in ((whisper_like, "tiny.en-tokens.txt is missing"), (wav, "a file, not a model directory")):
        assert main(["transcribe", "--asr-model", str(model), str(wav)]) == 1
        assert said in capsys.readouterr().err


def test_transcribe_energy_vad_on_resampled_stereo(speech, asr_model, tmp_path, capsys) -> None:
    """A 44.1 kHz stereo 24-bit file goes through the same path (resample, downmix)."""
    import soxr

    mono = read(speech / COMMAND).astype(np.float32) / 32768
    hi = soxr.resample(mono, 16000, 44100)
    stereo = np.stack([hi, hi], axis=1)
    pcm24 = np.clip(stereo * 2**23, -2**23, 2**23 - 1).astype("<i4")
    raw = np.frombuffer(pcm24.tobytes(), np.uint8).reshape(-1, 4)[:, :3].tobytes()
    path = tmp_path / "stereo24.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(3)
        w.setframerate(44100)
        w.writeframes(raw)
    assert main(["transcribe", "--json", "--vad", "energy", "--asr-model", str(asr_model), str(path)]) == 0
    finals = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"final"' in x]
    assert len(finals) == 1 and finals[0]["text"]


@needs_alsa
def test_listen_on_alsa_device_prints_events(speech, models, asr_model, tmp_path, capsys) -> None:
    """voiced listen through real libasound: the file plugin's infile is a two-channel microphone with
    the command on its second channel (--channel 1 was refused: the device was opened with one)."""
    pcm = np.concatenate([np.zeros(8000, np.int16), read(speech / COMMAND), np.zeros(32000, np.int16)])
    # the file plugin keeps returning stale data after its infile ends: pad with real silence
    mono = np.concatenate([pcm, np.zeros(16000 * 20, np.int16)])
    infile = tmp_path / "mic.raw"
    infile.write_bytes(np.stack([np.zeros_like(mono), mono], axis=1).tobytes())  # channel 0 silent
    conf = tmp_path / "asoundrc"
    conf.write_text(file_pcm("mic", infile))
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{conf}", HOME=str(tmp_path), PYTHONPATH=str(REPO))
    vad = models / "silero_vad_v5" / "silero_vad.onnx"
    proc = subprocess.Popen(
        [sys.executable, "-m", "voiced.cli", "listen", "--device", "mic", "--channel", "1", "--json", "--vad",
         "silero", "--vad-model", str(vad), "--asr-model", str(asr_model)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    events = []
    try:
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["type"] == "final":
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert [e["type"] for e in events if e["type"] != "partial"] == ["speech_start", "speech_end", "final"], err
    assert events[-1]["device"] == "mic" and events[-1]["text"]
    assert proc.returncode == 0, err
    # a channel the device is not opened with is named as the option was typed
    assert main(["listen", "--device", "mic", "--channels", "2", "--channel", "2", "--vad", "energy"]) == 1
    assert "voiced: --channel: must be unset or within 0..1 (channels = 2), got 2" in capsys.readouterr().err


@needs_alsa
def test_listen_on_a_device_that_does_not_open_is_one_line_not_a_wait(asr_model, tmp_path) -> None:
    """At a terminal a mistyped device is an error (the daemon, unattended, waits for its device)."""
    env = dict(os.environ, ALSA_CONFIG_PATH=str(_alsa_conf()), HOME=str(tmp_path), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "voiced.cli", "listen", "--device", "nosuchmic", "--vad", "energy",
                           "--asr-model", str(asr_model)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("voiced: --device nosuchmic: cannot open it (") and "arecord -L" in last, done.stderr


def test_options_the_model_cannot_use_are_said_to_be_ignored(speech, asr_model, tmp_path, capsys, caplog) -> None:
    """--hotword with greedy search, --language and --dereverb with a transducer did nothing, silently."""
    import logging

    wav = padded_command(speech, tmp_path)
    with caplog.at_level(logging.WARNING, logger="voiced"):
        assert main(["transcribe", "--hotword", "kitchen light", "--language", "de", "--dereverb",
                     "--asr-model", str(asr_model), str(wav)]) == 0
    said = [r.getMessage() for r in caplog.records if "does nothing here" in r.getMessage()]
    assert [m.split()[0] for m in said] == ["--hotword", "--language", "--dereverb"], said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="voiced"):
        assert main(["transcribe", "--method", "modified_beam_search", "--hotword", "kitchen light",
                     "--asr-model", str(asr_model), str(wav)]) == 0
    assert not [r for r in caplog.records if "does nothing here" in r.getMessage()]

"""``voiced say``: the WAV it writes carries, sentence by sentence, exactly the ids piper-phonemize gives."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from tests.audio.test_alsa import _alsa_conf, needs_alsa
from tests.tts.test_phonemes import reference_ids
from tests.tts.test_playback import REPO, playback_pcm
from tests.tts.voicegen import decode_id_audio
from voiced.audio.wav import read_wav

TEXT = ("Good morning! It's 7:45 and 12 degrees outside. Dr. Jones called twice; "
        "call back at 555-0100, please. Shall I read the news?")


def say_main() -> Callable[[Sequence[str]], int]:
    """``voiced``'s own main once ``say`` is hooked into voiced/cli.py, else the module's."""
    from voiced import cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices or {}
    if "say" in commands:
        return cli.main
    from voiced.tts.cli import main

    return main


def run_say(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = say_main()(["say", *args])
    out, err = capsys.readouterr()
    return code, out, err


def wav_int16(path: Path) -> tuple[np.ndarray, int]:
    samples, rate = read_wav(path)
    return np.round(samples[:, 0] * 32768).astype(np.int16), rate


@pytest.mark.parametrize("fixture", ["lessac_id_voice", "id_voice"])
def test_say_output_carries_exactly_the_reference_ids(fixture: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    voice = request.getfixturevalue(fixture)
    out = tmp_path / "out.wav"
    code, stdout, err = run_say(["--voice", str(voice), "--output", str(out), "--json", TEXT], capsys)
    assert code == 0, err
    pcm, rate = wav_int16(out)
    assert rate == (22050 if fixture == "lessac_id_voice" else 16000)
    sentences = decode_id_audio(pcm)
    assert [s.ids for s in sentences] == reference_ids(TEXT)
    assert len(sentences) >= 4
    figures = json.loads(stdout)
    assert figures["sentences"] == figures["chunks"] == len(sentences) and figures["output"] == str(out)
    assert figures["audio_s"] == pytest.approx(len(pcm) / rate, abs=1e-3)
    for key in ("first_audio_s", "synth_s", "rtf", "load_s"):  # figures are there; their values are not tested
        assert isinstance(figures[key], float)


def test_say_passes_speaker_and_scales(lessac_multi_id_voice: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.wav"
    code, _, err = run_say(["--voice", str(lessac_multi_id_voice), "--speaker", "3", "--length-scale", "0.8",
                            "--noise-scale", "0.5", "--noise-w", "0.6", "--output", str(out), "Yes."], capsys)
    assert code == 0, err
    (decoded,) = decode_id_audio(wav_int16(out)[0])
    assert decoded.sid == 3
    assert (decoded.noise_scale, decoded.length_scale, decoded.noise_w) == pytest.approx((0.5, 0.8, 0.6), abs=2e-4)


def test_say_reads_stdin(id_voice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("From a pipe. Two sentences."))
    out = tmp_path / "p.wav"
    code, _, err = run_say(["--voice", str(id_voice), "--output", str(out), "-"], capsys)
    assert code == 0, err
    assert [s.ids for s in decode_id_audio(wav_int16(out)[0])] == reference_ids("From a pipe. Two sentences.")


@pytest.mark.parametrize(("args", "message"), [
    (["   "], "text is empty"),
    (["..."], "nothing to speak"),
    (["--speaker", "bob", "Hi."], None),  # single-speaker voice: ignored, as in Piper (and said: below)
    (["--volume", "7", "Hi."], "voiced: --volume: must be within"),  # the option, as typed
    (["--length-scale", "0", "Hi."], "voiced: --length-scale: must be within"),
])
def test_say_errors_are_messages_not_tracebacks(id_voice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                args: list[str], message: str | None) -> None:
    code, _, err = run_say(["--voice", str(id_voice), "--output", str(tmp_path / "e.wav"), *args], capsys)
    if message is None:
        assert code == 0, err
    else:
        assert code == 1 and err.startswith("voiced: ") and message in err and "Traceback" not in err


def test_a_speaker_asked_of_a_single_speaker_voice_is_said_to_do_nothing(
        id_voice: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="voiced.tts.cli"):
        code, _, err = run_say(["--voice", str(id_voice), "--speaker", "3", "--output", str(tmp_path / "s.wav"),
                                "Hi."], capsys)
    assert code == 0, err
    assert [r.getMessage() for r in caplog.records if r.name == "voiced.tts.cli"] == [
        "--speaker 3 does nothing: this voice has one speaker"]


@pytest.mark.parametrize("where", ["a directory", "no such directory"])
def test_say_into_an_output_it_cannot_write_is_one_line(id_voice: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str], where: str) -> None:
    output = tmp_path if where == "a directory" else tmp_path / "no" / "such.wav"
    code, _, err = run_say(["--voice", str(id_voice), "--output", str(output), "Hi."], capsys)
    assert code == 1 and err.startswith("voiced: --output") and "Traceback" not in err, err
    assert ("is a directory" if where == "a directory" else "no directory") in err


def test_say_without_a_voice_names_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    code, _, err = run_say(["--output", str(tmp_path / "x.wav"), "Hi."], capsys)
    assert code == 1 and "piper-en_US-lessac-medium is not installed" in err
    code, _, err = run_say(["--voice", str(tmp_path / "none.onnx"), "--output", str(tmp_path / "x.wav"), "Hi."],
                           capsys)
    assert code == 1 and "voice model not found" in err and "none.onnx" in err


def test_say_drops_markdown_and_emoji_unless_told_to_keep_them(id_voice: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    marked = "**Kitchen** light is on 🙂\n- Hall: off"
    for extra, spoken in (([], "Kitchen light is on\nHall: off."), (["--keep-markup"], marked)):
        out = tmp_path / "out.wav"
        code, _, err = run_say(["--voice", str(id_voice), "--output", str(out), *extra, marked], capsys)
        assert code == 0, err
        assert [s.ids for s in decode_id_audio(wav_int16(out)[0])] == reference_ids(spoken), extra


def test_the_command_line_loads_no_speech_machinery_until_a_command_needs_it() -> None:
    """Every ``voiced`` command builds the parser, ``say`` included: ``voiced --help``, ``models`` or
    ``doctor`` must not pay for numpy, ONNX Runtime and the TTS modules (it did: ~0.1 s here, more
    on a Pi). A fresh interpreter: this one has them all loaded."""
    import subprocess
    import sys

    code = ("import sys, voiced.cli; voiced.cli.build_parser(); "
            "print(sorted(m for m in ('numpy', 'onnxruntime', 'voiced.tts.audio', 'voiced.tts.voice') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_the_tts_package_gives_each_public_name_when_asked() -> None:
    import voiced.tts as tts
    from voiced.tts.voice import PiperVoice

    assert tts.PiperVoice is PiperVoice
    assert all(getattr(tts, name) is not None for name in tts.__all__)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = tts.no_such_name


@needs_alsa
def test_say_to_a_device_that_does_not_exist_says_so_once(tmp_path: Path, id_voice: Path) -> None:
    """The player logged the device it could not open and ``say`` printed the same error again."""
    conf = tmp_path / "asoundrc"
    conf.write_text(playback_pcm("spk", tmp_path / "spk.raw"))  # a device, but not the one asked for
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{conf}", HOME=str(tmp_path), PYTHONPATH=str(REPO))
    run = subprocess.run([sys.executable, "-m", "voiced", "say", "--voice", str(id_voice), "--device", "nosuch",
                          "Is anybody there?"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 1, run.stderr
    assert [line for line in run.stderr.splitlines() if "nosuch" in line] == [run.stderr.splitlines()[-1]], run.stderr
    assert run.stderr.splitlines()[-1].startswith("voiced: cannot open playback device nosuch: "), run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "spk.raw").exists()

"""``voiced doctor`` on a working setup and on a broken one.

Working: real libasound with file-plugin PCMs (in a fresh interpreter, since libasound
reads its configuration once per process), generated models, a listening TCP socket as the
broker. Broken: a device ALSA does not know, a missing VAD file, an incomplete ASR
directory, a closed port, and a fake sysfs whose governor is powersave.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.audio.test_alsa import _alsa_conf, needs_alsa
from tests.disk_fixtures import SmallDisk
from tests.modelgen.transducer import make_transducer
from voiced.audio.wav import write_wav
from voiced.doctor import Check, CheckStatus, DoctorOptions, run_checks, run_doctor
from voiced.errors import ModelError
from voiced.models.manifest import Manifest, manifest_path, sha256_file

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker() -> Iterator[tuple[str, int]]:
    """Something accepting TCP connections, as far as a connect test can tell a broker."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()
    server.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def vad_like_model(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def fake_cpufreq(root: Path, governor: str) -> Path:
    for cpu in (0, 1):
        (root / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (root / f"cpu{cpu}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    return root


def write_config(path: Path, *, source: str, vad: Path, asr: Path | None, host: str, port: int) -> Path:
    asr_line = f'[asr]\nmodel = "{asr}"\n' if asr else ""
    path.write_text(f'[audio]\nsource = "{source}"\n\n[vad]\nmodel = "{vad}"\n\n{asr_line}\n'
                    f'[mqtt]\nhost = "{host}"\nport = {port}\n')
    return path


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@needs_alsa
@pytest.mark.shared
def test_good_setup_exits_zero(tmp_path: Path, broker: tuple[str, int], models: Path) -> None:
    asoundrc = tmp_path / "asoundrc"
    asoundrc.write_text('pcm.mic {\n  type file\n  slave.pcm "null"\n  file "/dev/null"\n  infile "/dev/zero"\n}\n'
                        'pcm.!default {\n  type file\n  slave.pcm "null"\n  file "/dev/null"\n}\n')
    asr = make_transducer(tmp_path / "asr", "lstm")
    silero = models / "silero_vad_v5" / "silero_vad.onnx"
    config = write_config(tmp_path / "voiced.toml", source="alsa:mic", vad=silero, asr=asr, host=broker[0],
                          port=broker[1])
    env = {**os.environ, "ALSA_CONFIG_PATH": f"{_alsa_conf()}:{asoundrc}", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "voiced.doctor", "--config", str(config), "--profile", "x86-64"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "[FAIL]" not in out
    assert f"[ ok ] config: {config} is valid" in out
    assert "[ ok ] capture: 'mic' opens at 16000 Hz (supports 16000, 44100, 48000 Hz)" in out
    assert "[ ok ] playback: 'default' opens at 22050 Hz" in out
    assert out.count("[ ok ] asr.model:") == 3 and "loads" in out
    assert f"[ ok ] vad.model: {silero}" in out
    assert f"[ ok ] broker: {broker[0]}:{broker[1]} accepts TCP connections" in out
    assert "[ ok ] hardware: profile x86-64" in out
    assert "[ ok ] affinity capture: pinned to cores 0" in out
    assert "[ ok ] intents: off: transcripts only, every query is answered intentNotRecognized" in out
    assert re.search(r"\[ ok \] state: \S+ writable, [\d,]+ MB free", out)


@needs_alsa
def test_the_playback_device_probed_is_the_one_the_daemon_plays_through(tmp_path: Path) -> None:
    """``[playback] device``, not the hardware profile's ``[alsa] playback`` (which the daemon never
    uses): here the configured PCM works and the profile's ("default") is a card that is not there."""
    asoundrc = tmp_path / "asoundrc"
    asoundrc.write_text('pcm.spk {\n  type file\n  slave.pcm "null"\n  file "/dev/null"\n}\n'
                        'pcm.!default {\n  type hw\n  card 97\n}\n')
    config = tmp_path / "voiced.toml"
    config.write_text('[playback]\ndevice = "spk"\n')
    env = {**os.environ, "ALSA_CONFIG_PATH": f"{_alsa_conf()}:{asoundrc}", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "voiced.doctor", "--config", str(config), "--profile", "x86-64",
                           "--no-load"], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert "[ ok ] playback: 'spk' opens at 22050 Hz" in proc.stdout, proc.stdout + proc.stderr
    assert "'default'" not in "".join(line for line in proc.stdout.splitlines() if "playback" in line)


def test_broken_setup_says_what_to_fix(tmp_path: Path) -> None:
    (tmp_path / "asr").mkdir()
    (tmp_path / "asr" / "tokens.txt").write_text("<blk> 0\n")
    port = closed_port()
    config = write_config(tmp_path / "voiced.toml", source="alsa:voiced_no_such_pcm", vad=tmp_path / "missing.onnx",
                          asr=tmp_path / "asr", host="127.0.0.1", port=port)
    options = DoctorOptions(profile="pi4", cpufreq_root=fake_cpufreq(tmp_path / "cpu", "powersave"),
                            broker_timeout_s=5)
    lines, code = run_doctor(config, options)
    assert code == 1
    checks = by_name(run_checks(config, options))
    assert checks["capture"].status is CheckStatus.FAIL
    assert "voiced_no_such_pcm" in checks["capture"].message and "arecord -L" in checks["capture"].fix
    assert checks["vad.model"].status is CheckStatus.FAIL and "missing.onnx does not exist" in checks["vad.model"].message
    assert checks["asr.model"].status is CheckStatus.FAIL and "encoder" in checks["asr.model"].message
    folder = write_config(tmp_path / "folder.toml", source="none", vad=tmp_path / "asr", asr=None, host="127.0.0.1",
                          port=port)  # the model's folder given for the file: said so, not "does not exist"
    vad = by_name(run_checks(folder, options))["vad.model"]
    assert vad.status is CheckStatus.FAIL and "asr is a folder, not the Silero .onnx file" in vad.message
    assert checks["broker"].status is CheckStatus.FAIL
    assert f"127.0.0.1:{port} unreachable" in checks["broker"].message and str(config) in checks["broker"].fix
    assert checks["governor"].status is CheckStatus.WARN and "voiced-cpu-performance" in checks["governor"].fix
    text = "\n".join(lines)
    assert "[FAIL] broker:" in text and "       fix: start the broker" in text
    assert text.splitlines()[-1].startswith("4 problem(s)")


def test_intents_are_reported(tmp_path: Path) -> None:
    config = tmp_path / "voiced.toml"
    config.write_text('[intents]\nbuiltin = "home-assistant"\n[intents.lists]\nname = ["kitchen light"]\n')
    check = by_name(run_checks(config, DoctorOptions(profile="x86-64")))["intents"]
    assert check.status is CheckStatus.OK
    assert re.fullmatch(r"[1-9]\d+ intents from home-assistant sentences \(en\) \+ 0 template file\(s\)", check.message)
    config.write_text('[intents]\nbuiltin = "home-assistant"\nlanguage = "xx"\n')
    check = by_name(run_checks(config, DoctorOptions(profile="x86-64")))["intents"]
    assert check.status is CheckStatus.FAIL and "intents.language" in check.message and str(config) in check.message


def test_the_voice_and_the_timer_bell_are_checked(tmp_path: Path) -> None:
    """A Piper voice loads (the real joe voice) or its missing file is named; a satellite's timer
    bell plays or why it cannot is said, as the daemon would fail at start."""
    from tests.tts.joe import joe_voice_path

    write_wav(tmp_path / "bell.wav", np.zeros(8000, np.float32), 16000)
    config = tmp_path / "voiced.toml"
    config.write_text(f'[tts]\nvoice = "{joe_voice_path()}"\n[wyoming]\nsatellite = true\n'
                      'timer_finished_wav = "bell.wav"\n')
    checks = by_name(run_checks(config, DoctorOptions(profile="x86-64")))
    assert checks["tts.voice"].status is CheckStatus.OK and "en_US-joe-medium.onnx" in checks["tts.voice"].message
    assert "loads" in checks["tts.voice"].message
    assert checks["wyoming.timer_finished_wav"].status is CheckStatus.OK
    assert checks["wyoming.timer_finished_wav"].message.endswith("bell.wav: 0.5 s at 16000 Hz")
    (tmp_path / "bell.wav").write_bytes(b"not a wave")
    config.write_text('[tts]\nvoice = "voices/none.onnx"\n'
                      '[wyoming]\nsatellite = true\ntimer_finished_wav = "bell.wav"\n')
    checks = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))
    assert checks["tts.voice"].status is CheckStatus.FAIL and "none.onnx" in checks["tts.voice"].message
    bell = checks["wyoming.timer_finished_wav"]
    assert bell.status is CheckStatus.FAIL and "bell.wav" in bell.message and "WAV" in bell.message


def test_feedback_sounds_are_checked_when_they_are_on(tmp_path: Path) -> None:
    """A feedback WAV that is on is played or why it cannot be is said; one that is off is not looked at."""
    write_wav(tmp_path / "ding.wav", np.zeros(4410, np.float32), 22050)
    (tmp_path / "dong.wav").write_bytes(b"RIFF, not a wave")
    config = tmp_path / "voiced.toml"
    config.write_text('[feedback]\nwake = true\nwake_wav = "ding.wav"\nheard = true\nheard_wav = "dong.wav"\n')
    checks = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))
    assert checks["feedback.wake_wav"].status is CheckStatus.OK
    assert checks["feedback.wake_wav"].message.endswith("ding.wav: 0.2 s at 22050 Hz")
    heard = checks["feedback.heard_wav"]
    assert heard.status is CheckStatus.FAIL and "dong.wav" in heard.message and "WAV" in heard.message
    config.write_text('[feedback]\nwake = true\nheard_wav = "dong.wav"\n')  # heard is off: its WAV is unused
    checks = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))
    assert "feedback.heard_wav" not in checks and "feedback.wake_wav" not in checks  # the built-in blip


@needs_alsa
def test_the_doctor_checks_the_profile_the_config_names_and_its_pcms(tmp_path: Path) -> None:
    """Without --profile the doctor takes the daemon's profile: a bare ``alsa`` source and an unset
    ``[playback] device`` are probed on that profile's PCMs (here ones that do not exist)."""
    (tmp_path / "den.toml").write_text('name = "den"\n[alsa]\ncapture = "nosuchmic"\nplayback = "nosuchspk"\n')
    config = tmp_path / "voiced.toml"
    config.write_text('[audio]\nsource = "alsa"\n[hardware]\nprofile = "den.toml"\n')
    checks = by_name(run_checks(config, DoctorOptions(load_models=False)))
    assert checks["hardware"].message.startswith("profile den")
    assert checks["capture"].status is CheckStatus.FAIL and "nosuchmic" in checks["capture"].message
    assert checks["playback"].status is not CheckStatus.OK and "nosuchspk" in checks["playback"].message
    checks = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))  # asked for another
    assert checks["hardware"].message.startswith("profile x86-64") and "nosuchmic" not in checks["capture"].message


def test_missing_and_invalid_config(tmp_path: Path) -> None:
    lines, code = run_doctor(tmp_path / "nope.toml", DoctorOptions(profile="x86-64"))
    assert code == 1 and any(line.startswith("[FAIL] config: config in") and "file not found" in line
                             for line in lines)
    bad = tmp_path / "bad.toml"
    bad.write_text('[mqtt]\nport = 70000\n')
    lines, code = run_doctor(bad, DoctorOptions(profile="x86-64"))
    assert code == 1 and any("mqtt.port" in line and "65535" in line for line in lines)


def test_unknown_profile_fails(tmp_path: Path) -> None:
    checks = by_name(run_checks(tmp_path / "nope.toml", DoctorOptions(profile="pi9")))
    assert checks["hardware"].status is CheckStatus.FAIL and "x86-64" in checks["hardware"].message


def test_affinity_is_checked_per_stage_and_clamping_warned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.affinity"):
        checks = [c for c in run_checks(Path("/nonexistent.toml"), DoctorOptions(profile="pi4"))
                  if c.name.startswith("affinity")]
    assert not caplog.records  # the checks say it: no log line beside them
    assert {c.name for c in checks} == {f"affinity {s}" for s in ("capture", "listen", "intent", "speak", "mqtt")}
    assert all(c.status is not CheckStatus.FAIL for c in checks)
    if max(os.sched_getaffinity(0)) < 3:  # a Pi 4 profile on a smaller machine: clamped, said so
        assert any(c.status is CheckStatus.WARN and "profile wants cores 2-3" in c.message for c in checks)
    generic = [c for c in run_checks(Path("/nonexistent.toml"), DoctorOptions(profile="x86-64"))
               if c.name.startswith("affinity")]
    assert all(c.status is CheckStatus.OK for c in generic)  # the generic profile is meant to be clamped


def test_checksum_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: tuple[str, int]) -> None:
    from voiced.doctor import setup as doctor

    vad = vad_like_model(tmp_path / "vad.onnx")
    config = write_config(tmp_path / "voiced.toml", source="none", vad=vad, asr=None, host=broker[0], port=broker[1])
    options = DoctorOptions(profile="x86-64", load_models=False)

    monkeypatch.setattr(doctor, "_verifier", lambda: lambda path: SimpleNamespace(trust=SimpleNamespace(value="verified")))
    assert by_name(run_checks(config, options))["vad.model"].message == f"{vad} checksum verified"

    def mismatch(path: Path) -> None:
        raise ModelError(f"{path}: sha256 abc does not match the manifest's def")

    monkeypatch.setattr(doctor, "_verifier", lambda: mismatch)
    check = by_name(run_checks(config, options))["vad.model"]
    assert check.status is CheckStatus.FAIL and "does not match" in check.message and "voiced models" in check.fix

    monkeypatch.setattr(doctor, "_verifier", lambda: None)  # the manifest module absent: existence only
    assert by_name(run_checks(config, options))["vad.model"].message == f"{vad} exists"


def test_truncated_model_fails(tmp_path: Path, broker: tuple[str, int]) -> None:
    vad = tmp_path / "vad.onnx"
    vad.write_bytes(vad_like_model(tmp_path / "whole.onnx").read_bytes()[:20])
    config = write_config(tmp_path / "voiced.toml", source="none", vad=vad, asr=None, host=broker[0], port=broker[1])
    checks = by_name(run_checks(config, DoctorOptions(profile="x86-64")))
    assert checks["vad.model"].status is CheckStatus.FAIL
    assert checks["capture"].status is CheckStatus.WARN  # source = none: nothing is listened to
    assert checks["broker"].status is CheckStatus.OK


def test_wake_word_without_its_streaming_front_end_is_warned(tmp_path: Path, broker: tuple[str, int]) -> None:
    wake = tmp_path / "openwakeword"
    wake.mkdir()
    config = write_config(tmp_path / "voiced.toml", source="alsa:default", vad=vad_like_model(tmp_path / "vad.onnx"),
                          asr=None, host=broker[0], port=broker[1])
    config.write_text(config.read_text() + f'\n[wake]\ndirectory = "{wake}"\nmodels = ["alexa_v0.1"]\n')
    options = DoctorOptions(profile="generic", load_models=False)
    check = by_name(run_checks(config, options))["wake.directory"]
    assert check.status is CheckStatus.WARN and "frontend.stream.onnx" in check.message
    assert check.fix == f"voiced-quantize wake-stream {wake}"
    stream = vad_like_model(wake / "frontend.stream.onnx")
    # without its manifest (cp *.onnx leaves it behind) it may come from other models: not used
    check = by_name(run_checks(config, options))["wake.directory"]
    assert check.status is CheckStatus.WARN and "has no manifest" in check.message
    assert check.fix == f"voiced-quantize wake-stream {wake}"
    Manifest(model=stream.name, sha256=sha256_file(stream), size=stream.stat().st_size,
             source={"file": "embedding_model.onnx"}).write(manifest_path(stream))
    check = by_name(run_checks(config, options))["wake.directory"]
    assert check.status is CheckStatus.OK and str(stream) in check.message


@pytest.mark.shared
def test_wake_thresholds_naming_no_wake_word_and_a_directory_that_is_a_file_fail(tmp_path: Path, models: Path,
                                                                              broker: tuple[str, int]) -> None:
    """What the daemon refuses at start, doctor refuses too: a threshold for a label no head has (the
    timer head's labels are its classes, read from the graph), a wake directory naming a head file."""
    oww = models / "openwakeword"
    config = write_config(tmp_path / "voiced.toml", source="none", vad=vad_like_model(tmp_path / "vad.onnx"), asr=None,
                          host=broker[0], port=broker[1])
    base = config.read_text()

    def wake(lines: str) -> dict[str, Check]:
        config.write_text(base + f'\n[wake]\ndirectory = "{oww}"\nmodels = ["alexa_v0.1", "timer_v0.1"]\n{lines}\n')
        return by_name(run_checks(config, DoctorOptions(profile="x86-64")))

    checks = wake('thresholds = { "hey_jarvis" = 0.7, "1_minute_timer" = 0.6 }')
    bad = checks["wake.thresholds.hey_jarvis"]
    assert bad.status is CheckStatus.FAIL and "alexa_v0.1" in bad.fix and "1_minute_timer" in bad.fix
    assert not [c for c in wake('thresholds = { "1_minute_timer" = 0.6 }').values()
                if c.name.startswith("wake.thresholds")]
    config.write_text(base + f'\n[wake]\ndirectory = "{oww / "alexa_v0.1.onnx"}"\nmodels = ["alexa_v0.1"]\n')
    check = by_name(run_checks(config, DoctorOptions(profile="x86-64")))["config"]
    assert check.status is CheckStatus.FAIL and "wake.directory" in check.message and "is a file" in check.message


def test_a_state_directory_on_a_disk_that_takes_no_writes_is_warned(small_disk: SmallDisk,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon runs there (its outbox from memory), but what it holds is lost if it stops (or, with a
    runtime directory, if the machine reboots): a warning."""
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    state = small_disk.path / "state"
    config = small_disk.path.parent / "voiced.toml"
    config.write_text(f'[daemon]\nstate_dir = "{state}"\n')

    def check() -> Check:
        return by_name(run_checks(config, DoctorOptions(profile="x86-64")))["state"]

    assert check().status is CheckStatus.OK and f"{state} writable" in check().message
    small_disk.fill()
    full = check()
    assert full.status is CheckStatus.WARN and "full disk" in full.message and full.fix == "free space on it"
    assert "lost if voiced stops" in full.message and "no runtime directory" in full.message
    monkeypatch.setenv("RUNTIME_DIRECTORY", "/run/voiced")
    assert "kept in /run/voiced across a restart" in check().message
    small_disk.free()
    small_disk.read_only()
    read_only = check()
    assert read_only.status is CheckStatus.WARN and "read-only disk" in read_only.message
    assert "remount it read-write" in read_only.fix


def test_a_microphone_switched_off_from_home_assistant_is_warned(tmp_path: Path) -> None:
    """"It stopped listening": the first thing to know is whether someone switched its microphone off in
    Home Assistant; the doctor reads the daemon's own ``controls.json`` and says how to switch it back."""
    from voiced.core.controls import CONTROLS_FILE, Controls, save_controls
    from voiced.wake import Sensitivity

    state = tmp_path / "state"
    config = tmp_path / "voiced.toml"
    config.write_text(f'[site]\nid = "den"\n[daemon]\nstate_dir = "{state}"\n')

    def check() -> Check:
        return by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["controls"]

    assert check().status is CheckStatus.OK and "nothing set from Home Assistant" in check().message
    save_controls(state / CONTROLS_FILE, Controls(microphone=False, volume=0.4, wake_sensitivity=Sensitivity.VERY))
    off = check()
    assert off.status is CheckStatus.WARN and "switched off from Home Assistant" in off.message
    assert "volume 40 %" in off.message and "very sensitive" in off.message
    assert off.fix is not None and "voiced/den/microphone/set" in off.fix
    save_controls(state / CONTROLS_FILE, Controls())
    assert check().status is CheckStatus.OK and check().message.startswith("microphone on, [playback] volume")


def test_a_damaged_controls_file_is_warned_with_what_the_daemon_uses_instead(tmp_path: Path) -> None:
    """The daemon reads a damaged ``controls.json`` as the defaults and only logs it: a user whose
    microphone came back on (or volume loud) after a power cut learns why from the doctor."""
    from voiced.core.controls import CONTROLS_FILE

    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "voiced.toml"
    config.write_text(f'[site]\nid = "den"\n[daemon]\nstate_dir = "{state}"\n')

    def check() -> Check:
        return by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["controls"]

    (state / CONTROLS_FILE).write_bytes(b'{"microphone": fal')  # cut short by a power cut
    cut = check()
    assert cut.status is CheckStatus.WARN and "cannot be read" in cut.message and "microphone on" in cut.message
    assert cut.fix is not None and "Home Assistant" in cut.fix
    (state / CONTROLS_FILE).write_text('{"microphone": false, "volume": 7, "wake_sensitivity": "Very sensitive"}')
    odd = check()
    assert odd.status is CheckStatus.WARN and "volume 7 is not within 0..1" in odd.message
    assert "microphone off" in odd.message and "very sensitive" in odd.message


def test_voiced_doctor_takes_the_profile_its_own_advice_names(tmp_path: Path, capsys) -> None:
    """Doctor's fix says "--profile / hardware.profile" and the README says "--profile to try
    another", but only ``python -m voiced.doctor`` took it: ``voiced doctor --profile`` was refused."""
    from voiced.cli import main

    config = tmp_path / "voiced.toml"
    config.write_text('[audio]\nsource = "none"\n[vad]\nkind = "energy"\n')
    main(["doctor", "--config", str(config), "--profile", "pi4", "--no-load"])
    out = capsys.readouterr().out
    assert "hardware: profile pi4" in out and f"config: {config} is valid" in out


def test_a_state_directory_that_is_a_file_or_under_one_fails(tmp_path: Path) -> None:
    """The daemon refuses both at start ("is a file, not a directory"); doctor called them writable."""
    config = tmp_path / "voiced.toml"
    blocker = tmp_path / "state"
    blocker.write_text("not a directory\n")
    for state in (blocker, blocker / "voiced"):
        config.write_text(f'[daemon]\nstate_dir = "{state}"\n')
        check = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["state"]
        assert check.status is CheckStatus.FAIL and f"{blocker} is a file, not a directory" in check.message, check


def test_a_vad_model_that_is_no_silero_vad_fails(tmp_path: Path, broker: tuple[str, int]) -> None:
    """Any ONNX file "loaded" (a transducer's joiner given as vad.model), and the daemon then refused it."""
    config = write_config(tmp_path / "voiced.toml", source="none", vad=vad_like_model(tmp_path / "vad.onnx"), asr=None,
                          host=broker[0], port=broker[1])
    check = by_name(run_checks(config, DoctorOptions(profile="x86-64")))["vad.model"]
    assert check.status is CheckStatus.FAIL and "not a Silero VAD v5 model" in check.message, check


def test_an_llm_model_folder_that_is_not_there_fails(tmp_path: Path) -> None:
    """The daemon fails its start on it (README: "fails the start either way"); doctor had no LLM check."""
    config = tmp_path / "voiced.toml"
    config.write_text(f'[llm]\nmodel = "{tmp_path / "qwen"}"\n')
    check = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["llm.model"]
    assert check.status is CheckStatus.FAIL and "genai_config.json" in check.message, check


def test_a_file_source_is_opened_as_the_daemon_opens_it(tmp_path: Path) -> None:
    """A mono recording with audio.channel = 1 "exists" for doctor; the daemon refused it at start."""
    wav = tmp_path / "room.wav"
    write_wav(wav, np.zeros(1600, np.int16), 16000)
    config = tmp_path / "voiced.toml"

    def capture(audio: str) -> Check:
        config.write_text(f'[audio]\nsource = "file:{wav}"\n{audio}\n')
        return by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["capture"]

    ok = capture("")
    assert ok.status is CheckStatus.OK and f"file:{wav} @16000 Hz" in ok.message
    bad = capture("channels = 2\nchannel = 1")
    assert bad.status is CheckStatus.FAIL and "channel 1 requested" in bad.message and "1 channel(s)" in bad.message
    wav.write_text("not a wav\n")
    assert capture("").status is CheckStatus.FAIL


def voiced_doctor(config: Path) -> subprocess.CompletedProcess[str]:
    """``voiced doctor`` as a user runs it, in its own process."""
    return subprocess.run([sys.executable, "-m", "voiced.doctor", "--config", str(config), "--profile", "x86-64",
                           "--no-load"], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def wyoming_config(path: Path, uri: str, broker: tuple[str, int]) -> Path:
    path.write_text(f'[audio]\nsource = "none"\n[vad]\nkind = "energy"\n[mqtt]\nhost = "{broker[0]}"\n'
                    f'port = {broker[1]}\n[wyoming]\nuri = "{uri}"\n')
    return path


def test_a_wyoming_port_in_use_fails_and_a_free_one_is_ok(tmp_path: Path, broker: tuple[str, int]) -> None:
    """A port another server holds (a voiced already running, wyoming-satellite) showed only when the
    daemon failed its start; doctor did not look at [wyoming] uri."""
    from tests.support import free_port

    config = tmp_path / "voiced.toml"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        held = holder.getsockname()[1]
        proc = voiced_doctor(wyoming_config(config, f"tcp://127.0.0.1:{held}", broker))
    out = proc.stdout
    assert f"[FAIL] wyoming.uri: port {held} is in use (another voiced or Wyoming service running?)" in out, \
        out + proc.stderr
    assert f"fix: stop the other server (ss -ltnp 'sport = :{held}' names it)" in out
    assert proc.returncode == 1 and "[FAIL]" not in out.replace("[FAIL] wyoming.uri", ""), out
    free = free_port()
    proc = voiced_doctor(wyoming_config(config, f"tcp://127.0.0.1:{free}", broker))
    assert f"[ ok ] wyoming.uri: tcp://127.0.0.1:{free}: free to listen on" in proc.stdout, proc.stdout + proc.stderr
    assert "[FAIL]" not in proc.stdout and proc.returncode == 0, proc.stdout


def test_a_wyoming_address_not_of_this_host_is_a_warning(tmp_path: Path) -> None:
    """The daemon waits for such an address (a DHCP lease after boot), so it is no failure; 192.0.2.1
    (TEST-NET-1) is nobody's address."""
    config = tmp_path / "voiced.toml"
    config.write_text('[wyoming]\nuri = "tcp://192.0.2.1:10700"\n')
    check = by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["wyoming.uri"]
    assert check.status is CheckStatus.WARN, check
    assert check.message.startswith("192.0.2.1 is not an address of this host"), check


def test_a_wyoming_unix_socket_a_server_listens_on_fails_and_a_stale_one_is_ok(tmp_path: Path) -> None:
    """A live socket means a server runs there (the daemon refuses to take it over); one left by a
    run that ended is replaced at start."""
    path = tmp_path / "run" / "wyoming.sock"
    config = tmp_path / "voiced.toml"
    config.write_text(f'[wyoming]\nuri = "unix://{path}"\n')

    def check() -> Check:
        return by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["wyoming.uri"]

    fresh = check()  # the daemon makes the directory
    assert fresh.status is CheckStatus.OK and f"{tmp_path} writable" in fresh.message, fresh
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        live = check()
    assert live.status is CheckStatus.FAIL, live
    assert live.message == f"a server listens on {path} (another voiced or Wyoming service running?)"
    stale = check()  # the server closed; its socket file stays
    assert path.exists() and stale.status is CheckStatus.OK and "left by an earlier run" in stale.message, stale


def test_a_tls_setup_against_a_plain_broker_port_fails_with_the_handshake_not_unreachable(tmp_path: Path) -> None:
    """[mqtt] tls on against mosquitto's plain listener: doctor said "accepts TCP connections" and the
    daemon then failed every connect. The handshake is tried, and its failure names the setting;
    against the TLS listener it passes."""
    from tests.mqtt.conftest import MOSQUITTO, Broker
    from tests.support import free_port, make_certificates

    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    make_certificates(tmp_path)
    (tmp_path / "plain").mkdir()
    (tmp_path / "tls").mkdir()
    plain, secure = Broker(tmp_path / "plain", free_port()), Broker(tmp_path / "tls", free_port())
    secure.conf.write_text(secure.conf.read_text() + f"cafile {tmp_path / 'ca.crt'}\n"
                           f"certfile {tmp_path / 'server.crt'}\nkeyfile {tmp_path / 'server.key'}\n")
    config = tmp_path / "voiced.toml"

    def broker_check(broker: Broker) -> Check:
        config.write_text(f'[mqtt]\nhost = "{broker.host}"\nport = {broker.port}\nca_file = "{tmp_path / "ca.crt"}"\n')
        return by_name(run_checks(config, DoctorOptions(profile="x86-64", load_models=False)))["broker"]

    try:
        plain.start()
        secure.start()
        wrong = broker_check(plain)
        right = broker_check(secure)
    finally:
        plain.stop()
        secure.stop()
    assert wrong.status is CheckStatus.FAIL, wrong
    assert wrong.message.startswith(f"TLS handshake with {plain.host}:{plain.port} failed"), wrong
    assert wrong.message.endswith("is that port TLS? [mqtt] tls is on") and "8883" in (wrong.fix or ""), wrong
    assert right.status is CheckStatus.OK and "accepts TLS connections" in right.message, right

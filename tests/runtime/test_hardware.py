"""Hardware profiles: the shipped files, validation errors, and board detection from a fake device tree."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.audio.test_alsa import _alsa_conf
from voiced.errors import ConfigError
from voiced.runtime.hardware import (
    PROFILES_DIR,
    HardwareProfile,
    OnnxRole,
    Stage,
    detect_board,
    detect_profile,
    known_profiles,
    load_profile,
    select_profile,
)
from voiced.runtime.onnx import create_session

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("pi-zero-2w", "pi3", "pi4", "pi5", "x86-64")


def test_shipped_profiles() -> None:
    assert known_profiles() == tuple(sorted(SHIPPED))
    for name in SHIPPED:
        profile = load_profile(name)
        assert isinstance(profile, HardwareProfile) and profile.name == name
        assert profile.description
        assert "window_frames" not in (PROFILES_DIR / f"{name}.toml").read_text()  # an [audio] key, not a board's
        for stage in Stage:
            assert profile.cpus(stage), f"{name}: {stage} unpinned"
        if name.startswith("pi"):
            # Every Pi here has 4 cores; the capture core is not shared with the heavy listen stage.
            assert all(c < 4 for stage in Stage for c in profile.cpus(stage))
            assert not profile.cpus(Stage.CAPTURE) & profile.cpus(Stage.LISTEN)
            assert 0 < profile.realtime_priority <= 10  # the unit's LimitRTPRIO=10


def test_profiles_are_package_data_and_linked_from_the_repo() -> None:
    assert PROFILES_DIR.parent == Path(__file__).resolve().parents[2] / "voiced" / "runtime"
    for name in SHIPPED:
        link = REPO / "hardware" / f"{name}.toml"
        if link.exists():  # the repo's hardware/ points at the package copy: one source of truth
            assert link.resolve() == (PROFILES_DIR / f"{name}.toml").resolve()


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_profile("pi9")
    assert err.value.key == "hardware.profile"
    for name in SHIPPED:
        assert name in str(err.value)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


GOOD = """
name = "myboard"
match = ["Acme Board"]
[cores]
capture = [0]
listen = [1]
[threads]
asr = 2
"""


def test_load_by_path_and_defaults(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "anything", GOOD))
    assert profile.name == "myboard"
    assert profile.cpus(Stage.CAPTURE) == {0} and profile.cpus("listen") == {1}
    assert profile.cpus(Stage.SPEAK) is None  # not given: unpinned
    assert profile.threads.asr == 2 and profile.threads.vad == 1
    assert profile.alsa.capture == "default"
    assert profile.tts_release_after_phonemes == 150  # Piper keeps its arena below 150 phonemes
    assert load_profile(str(tmp_path / "anything.toml")) == profile


def test_a_copy_of_an_older_profile_still_loads_and_is_told_where_its_audio_keys_belong(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """window_frames and capture_rate were profile keys nothing read ([audio]'s decided): a profile
    copied from an older release loads, with a warning that names the file and the config key."""
    path = write(tmp_path, "old", GOOD.replace('name = "myboard"', 'name = "myboard"\nwindow_frames = 20\n'
                                                                 'capture_rate = 48000'))
    with caplog.at_level("WARNING"):
        assert load_profile(path) == load_profile(write(tmp_path, "anything", GOOD))
    assert "[audio] window_frames" in caplog.text and "[audio] capture_rate" in caplog.text and str(path) in caplog.text


@pytest.mark.parametrize(("text", "key"), [
    (GOOD + "\n[alsa]\nmic = 'x'\n", "hardware.alsa.mic"),
    (GOOD.replace("asr = 2", "asr = 0"), "hardware.threads.asr"),
    (GOOD.replace("listen = [1]", "listen = [-1]"), "hardware.cores.listen"),
    (GOOD.replace("listen = [1]", "listen = 1"), "hardware.cores.listen"),
    (GOOD.replace('name = "myboard"', 'name = "myboard"\nrealtime_priority = 100'), "hardware.realtime_priority"),
    (GOOD.replace('name = "myboard"', 'name = "myboard"\ntts_release_after_phonemes = -1'),
     "hardware.tts_release_after_phonemes"),
    (GOOD.replace('name = "myboard"', 'name = "My Board"'), "hardware.name"),
    (GOOD.replace('name = "myboard"', ""), "hardware"),
    ("name = [", "hardware.profile"),
])
def test_errors_name_the_key_and_the_file(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, "bad", text)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert err.value.key == key
    assert err.value.source == str(path)


def test_name_must_match_the_file(tmp_path: Path) -> None:
    write(tmp_path, "other", GOOD)
    with pytest.raises(ConfigError, match="must be the file's name 'other'"):
        load_profile("other", directory=tmp_path)


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "expected"), [
    ("Raspberry Pi Zero 2 W Rev 1.0", "pi-zero-2w"),
    ("Raspberry Pi 3 Model B Rev 1.2", "pi3"),
    ("Raspberry Pi 3 Model B Plus Rev 1.3", "pi3"),
    ("Raspberry Pi Compute Module 3 Plus Rev 1.0", "pi3"),
    ("Raspberry Pi 4 Model B Rev 1.4", "pi4"),
    ("Raspberry Pi 400 Rev 1.0", "pi4"),
    ("Raspberry Pi Compute Module 4 Rev 1.0", "pi4"),
    ("Raspberry Pi 5 Model B Rev 1.0", "pi5"),
    ("Raspberry Pi Compute Module 5 Rev 1.0", "pi5"),
])
def test_detect_from_device_tree(tmp_path: Path, model: str, expected: str) -> None:
    dt = tmp_path / "model"
    dt.write_bytes(model.encode() + b"\0")  # the kernel's file ends with a NUL
    assert detect_board([dt]) == model
    assert detect_profile([dt]).name == expected
    assert select_profile("auto", paths=[dt]).name == expected
    assert select_profile(None, paths=[dt]).name == expected


def test_detect_falls_back_to_the_sysfs_path(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys-model"
    sysfs.write_bytes(b"Raspberry Pi 5 Model B Rev 1.0\0")
    assert detect_profile([tmp_path / "missing", sysfs]).name == "pi5"


def test_unknown_board_uses_the_generic_profile(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dt = tmp_path / "model"
    dt.write_bytes(b"Pine64 RockPro64 v2.1\0")
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.hardware"):
        assert detect_profile([dt]).name == "x86-64"
    assert "no hardware profile for board 'Pine64 RockPro64 v2.1'" in caplog.text


def test_no_device_tree_uses_the_generic_profile(tmp_path: Path) -> None:
    assert detect_board([tmp_path / "none"]) is None
    assert detect_profile([tmp_path / "none"]).name == "x86-64"


def test_explicit_name_wins_over_detection(tmp_path: Path) -> None:
    dt = tmp_path / "model"
    dt.write_bytes(b"Raspberry Pi 4 Model B Rev 1.4\0")
    assert select_profile("pi-zero-2w", paths=[dt]).name == "pi-zero-2w"


def test_a_profile_is_fitted_to_this_machine_once_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    two = {0, 1}
    with caplog.at_level(logging.INFO):
        generic = load_profile("x86-64").fitted(available=two)
        pi4 = load_profile("pi4").fitted(available=two)
        assert load_profile("pi4").fitted(available=range(8)) == load_profile("pi4")  # nothing to cut
    lines = [r for r in caplog.records if "not available here" in r.getMessage()]
    assert [(r.levelno, r.getMessage().split(":")[0]) for r in lines] == [
        (logging.INFO, "profile x86-64"), (logging.WARNING, "profile pi4")]  # the generic one is meant to be cut
    assert generic.cpus(Stage.LISTEN) == {1} and generic.cpus(Stage.CAPTURE) == {0}
    assert pi4.cpus(Stage.INTENT) == {1} and pi4.cpus(Stage.LISTEN) == two  # none of 2-3 left: all there are
    # every thread and ONNX session pinned from a fitted profile has nothing more to say
    caplog.clear()
    with caplog.at_level(logging.INFO):
        for role in OnnxRole:
            generic.session_options(role)
    assert "not available" not in caplog.text


# -- ONNX session options ----------------------------------------------------------------------


def tiny_model(path: Path) -> Path:
    """y = relu(x @ W): enough to run ONNX Runtime's MatMul kernels on its thread pool."""
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 64])],
        [onnx.numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what the installed onnxruntime reads, whatever onnx writes by default
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("name", SHIPPED)
def test_session_options_are_accepted_by_onnxruntime(tmp_path: Path, name: str) -> None:
    profile = load_profile(name)
    model = tiny_model(tmp_path / "tiny.onnx")
    for role in OnnxRole:
        options = profile.session_options(role)
        assert options.threads == getattr(profile.threads, role.value)
        if options.threads > 1:
            entries = options.thread_affinities.split(";")
            assert len(entries) == options.threads - 1
            assert all(int(e) >= 1 for e in entries)  # ONNX Runtime's ids are 1-based
        else:
            assert options.thread_affinities is None
        session = create_session(model, options)
        x = np.ones((256, 64), np.float32)
        (y,) = session.run(None, {"x": x})
        assert y.shape == (256, 64)


# -- example ALSA configs ----------------------------------------------------------------------

ALSA_EXAMPLES = sorted((REPO / "hardware" / "alsa").glob("*.conf"))


@pytest.mark.skipif(shutil.which("aplay") is None or _alsa_conf() is None,
                    reason="needs aplay (alsa-utils) and libasound's alsa.conf")
@pytest.mark.parametrize("conf", ALSA_EXAMPLES, ids=lambda p: p.name)
def test_alsa_examples_parse_and_define_their_pcms(conf: Path) -> None:
    """libasound itself parses each example (no card is needed to list the PCMs it defines)."""
    proc = subprocess.run(["aplay", "-L"], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "ALSA_CONFIG_PATH": f"{_alsa_conf()}:{conf}"})
    assert "ALSA lib" not in proc.stderr, proc.stderr
    listed = {line for line in proc.stdout.splitlines() if line and not line.startswith(" ")}
    defined = set(re.findall(r"^pcm\.(voiced_\w+)", conf.read_text(), flags=re.MULTILINE))
    assert defined and defined <= listed


def test_alsa_examples_exist() -> None:
    assert {p.name for p in ALSA_EXAMPLES} == {"dsnoop-dmix.conf", "usb-mic-48k.conf", "respeaker-2mic.conf"}

"""Config files: defaults, relative paths, and errors that name the key and the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiced.asr.search import SearchMethod
from voiced.audio.wav import write_wav
from voiced.config import Config
from voiced.errors import ConfigError
from voiced.stages import Counters, DropOldestQueue
from voiced.vad import VadKind


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "voiced.toml"
    path.write_text(text)
    return path


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    path = write(tmp_path, """
[site]
id = "kitchen"
[audio]
source = "alsa:hw:1,0"
[vad]
model = "models/silero.onnx"
[asr]
model = "models/asr"
[intents]
templates = ["intents/*.yaml"]
""")
    c = Config.from_file(path)
    assert c.site.id == "kitchen"
    assert c.vad.kind is VadKind.SILERO and c.vad.model == tmp_path / "models/silero.onnx"
    assert c.asr.model == tmp_path / "models/asr" and c.asr.method is SearchMethod.MODIFIED_BEAM
    assert c.intents.templates == (str(tmp_path / "intents/*.yaml"),)
    assert c.mqtt.availability_topic == "voiced/kitchen/availability"
    assert c.audio.window_frames == 10


@pytest.mark.parametrize("text, key, problem", [
    ("[mqtt]\nport = 'x'", "mqtt.port", "must be an integer"),
    ("[mqtt]\nport = 70000", "mqtt.port", "1..65535"),
    ("[mqtt]\nprot = 1883", "mqtt.prot", "unknown key"),
    ("[mqtts]\nport = 1883", "mqtts", "unknown section"),
    ("[vad]\nkind = 'silero'", "vad.model", "Silero"),
    ("[vad]\nkind = 'webrtc'", "vad.kind", "must be one of"),
    ("[vad.endpoint]\nmin_silence_ms = -5", "vad.endpoint.min_silence_ms", ""),
    ("[asr]\nmethod = 'beam'", "asr.method", "must be one of"),
    ("[asr]\npartials = 'yes'", "asr.partials", "true or false"),
    ("[audio]\nwindow_frames = 0", "audio.window_frames", "1..100"),
    ("[audio]\nsource = ''", "audio.source", "is not alsa:DEVICE, alsa, file:PATH or none"),  # run refused it, doctor passed it
    ("[audio]\nsource = 'file:'", "audio.source", "needs a WAV file path"),
    ("[site]\nid = 'a/b'", "site.id", "without"),
    ("[intents]\ntemplates = 'x.yaml'", "intents.templates", "must be a list"),
    ("[mqtt]\nusername = 'u'\npassword_file = '/nonexistent/pw'", "mqtt.password_file", "does not exist"),
    ("not toml ][", "config", "not valid TOML"),
])
def test_errors_name_key_and_file(tmp_path: Path, text: str, key: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        Config.from_file(path)
    assert info.value.key == key
    assert problem in str(info.value)
    if key != "mqtt.password_file":  # that error names the missing file itself
        assert str(path) in str(info.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        Config.from_file(tmp_path / "absent.toml")


def test_drop_oldest_queue_counts_drops_and_can_block() -> None:
    counters = Counters()
    q: DropOldestQueue[int] = DropOldestQueue(2, counters, "dropped")
    for i in range(5):
        q.put(i)
    assert counters.get("dropped") == 3
    assert [q.get(0.1), q.get(0.1), q.get(0.01)] == [3, 4, None]


def test_mqtt_files_are_relative_to_the_config_file(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "secret").write_text("hunter2\n")
    monkeypatch.chdir("/")
    c = Config.from_file(write(tmp_path, "[mqtt]\nusername = 'u'\npassword_file = 'secret'\n"))
    assert c.mqtt.password_file == str(tmp_path / "secret")
    assert c.mqtt.read_password() == "hunter2"


def test_files_saved_with_a_byte_order_mark_read_as_without(tmp_path: Path) -> None:
    """Windows editors write a UTF-8 byte-order mark; it is neither TOML nor part of a password."""
    (tmp_path / "secret").write_bytes(b"\xef\xbb\xbfhunter2\r\n")
    path = tmp_path / "voiced.toml"
    path.write_bytes(b"\xef\xbb\xbf[mqtt]\r\nusername = 'u'\r\npassword_file = 'secret'\r\n")
    c = Config.from_file(path)
    assert c.mqtt.username == "u"
    assert c.mqtt.read_password() == "hunter2"


def test_backoff_errors_name_the_nested_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_file(write(tmp_path, "[mqtt.backoff]\ninitial = 5.0\nmaximum = 1.0\n"))
    assert info.value.key == "mqtt.backoff.initial"


def test_the_runtime_directory_is_systemd_s_or_the_configured_one(tmp_path: Path, monkeypatch) -> None:
    """Held messages outlive a restart only on a disk that is not the state's: systemd's RuntimeDirectory=,
    a configured one (relative to the config file), or none at all outside systemd."""
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    assert Config.from_file(write(tmp_path, "")).daemon.resolved_runtime_dir() is None
    monkeypatch.setenv("RUNTIME_DIRECTORY", "/run/voiced:/run/other")
    assert Config.from_file(write(tmp_path, "")).daemon.resolved_runtime_dir() == Path("/run/voiced")
    configured = Config.from_file(write(tmp_path, '[daemon]\nruntime_dir = "run"\n'))
    assert configured.daemon.resolved_runtime_dir() == tmp_path / "run"


def test_every_file_the_config_names_is_relative_to_the_config_file(tmp_path: Path, monkeypatch) -> None:
    """As the README says: a relative path is read beside the config file, not in the working directory
    (which is / under systemd): a WAV source, a hardware profile file and a wake word head given as a path."""
    from voiced.audio.source import open_source
    from voiced.runtime.hardware import select_profile

    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "myboard.toml").write_text((Path(__file__).parent.parent / "hardware" / "pi4.toml").read_text()
                                         .replace('name = "pi4"', 'name = "myboard"'))
    write_wav(folder / "x.wav", np.zeros((1600, 1), np.float32), 16_000)
    path = write(folder, """
[audio]
source = "file:x.wav"
[hardware]
profile = "myboard.toml"
[wake]
directory = "oww"
models = ["alexa_v0.1", "heads/custom.onnx", "/abs/other.onnx"]
""")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    c = Config.from_file(path)
    assert c.audio.source == f"file:{folder / 'x.wav'}"
    with open_source(c.audio.source) as source:  # found and read
        assert sum(len(chunk) for chunk in source.chunks()) == 1600
    assert select_profile(c.hardware.profile).name == "myboard"
    assert c.wake.models == ("alexa_v0.1", str(folder / "heads/custom.onnx"), "/abs/other.onnx")
    for kept in ("alsa:hw:1,0", "none", f"file:{folder / 'x.wav'}"):
        assert Config.from_file(write(folder, f'[audio]\nsource = "{kept}"\n')).audio.source == kept
    assert Config.from_file(write(folder, '[hardware]\nprofile = "pi4"\n')).hardware.profile == "pi4"


def test_a_state_dir_that_is_a_file_is_named_as_the_config_key(tmp_path: Path) -> None:
    """It was found by the outbox, which named its own database ("outbox.path in .../outbox.sqlite3:
    File exists"), after the models had loaded."""
    from voiced.core import Core

    taken = tmp_path / "state"
    taken.write_text("not a directory")
    (tmp_path / "voiced.toml").write_text('[vad]\nkind = "energy"\n[daemon]\nstate_dir = "state"\n')
    with pytest.raises(ConfigError, match=r"^daemon\.state_dir in .*voiced\.toml: .*state is a file, not a directory"):
        Core(Config.from_file(tmp_path / "voiced.toml"))

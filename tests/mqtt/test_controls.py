"""The microphone switch and the volume slider Home Assistant shows for the device, kept across restarts.

Real parts: ``voiced run`` as a process (the satellite harness: the microphone a FIFO written in
100 ms steps, the speaker a raw file behind the ALSA file plugin), a real mosquitto carrying what
Home Assistant would send (MQTT discovery's command topics), the real alexa head and Silero.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

import voiced

from tests.audio.test_alsa import needs_alsa
from tests.mqtt.conftest import raw_publish
from tests.support import wait_until
from tests.wyoming.test_satellite import satellite
from voiced.audio.wav import read_wav, write_wav
from voiced.core.controls import CONTROLS_FILE, Controls, load_controls, save_controls
from voiced.mqtt.hermes import play_bytes_topic
from voiced.wake.sensitivity import Sensitivity

_T = np.arange(8000) / 16000
SWEEP = np.round(0.5 * 32767 * np.sin(2 * np.pi * (300 + 900 * _T) * _T)).astype("<i2")
"""0.5 s sweeping up from 300 Hz, loud enough that 40 % of it is far from rounding."""
READING = "roots_19_morris_0269.wav"
"""A hifitts reading (2.7 s, 16 kHz): a WAV of 86 KB."""


def _state(sub, topic: str) -> str:
    """The last retained state on ``topic``."""
    return sub.payloads(topic)[-1].decode()


def _counters(stats) -> dict:
    return json.loads(stats.payloads()[-1])["counters"]


@needs_alsa
@pytest.mark.shared
def test_home_assistant_switches_the_microphone_off_and_turns_the_volume_down_and_both_survive_a_restart(
        tmp_path, broker, subscriber_factory, models, speech) -> None:
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    gap = np.zeros(16000, np.float32)
    write_wav(tmp_path / "sweep.wav", SWEEP, 16000)
    sweep_wav = (tmp_path / "sweep.wav").read_bytes()
    discovery = subscriber_factory(broker, "homeassistant/#")
    states = subscriber_factory(broker, "voiced/den/#")
    hotwords = subscriber_factory(broker, "hermes/hotword/#")
    finished = subscriber_factory(broker, "hermes/audioServer/den/playFinished")
    speaker = tmp_path / "speaker.raw"

    def heard_said(sat, audio: np.ndarray) -> None:
        """Say ``audio`` and wait until the daemon has taken all of it in (windows heard or muted)."""
        before = _counters(states_stats)
        sat.room.say(audio)
        total = len(audio) / 16000 + 0.5

        def taken() -> bool:
            now = _counters(states_stats)
            return sum(now.get(k, 0) - before.get(k, 0) for k in ("windows", "windows_muted")) / 10 >= total
        wait_until(taken, timeout=60, what="the audio taken in")

    states_stats = subscriber_factory(broker, "voiced/den/stats")
    with satellite(tmp_path, broker, models, speaker_file=f"|cat >>{speaker}", daemon="stats_interval_s = 0.5") as sat:
        wait_until(lambda: states.payloads("voiced/den/microphone") and states_stats.payloads(), timeout=60,
                   what="the first states")
        assert _state(states, "voiced/den/microphone") == "ON" and _state(states, "voiced/den/volume") == "100"
        configs = {t.split("/")[1]: json.loads(p) for t, p, _ in discovery.messages
                   if t in ("homeassistant/switch/den/microphone/config", "homeassistant/number/den/volume/config")}
        assert configs["switch"]["command_topic"] == "voiced/den/microphone/set"
        # the device HA creates: this version, in the satellite's area ([wyoming] area = "Den")
        device = configs["switch"]["device"]
        assert (device["sw_version"], device["suggested_area"]) == (voiced.__version__, "Den")
        assert configs["switch"]["state_topic"] == "voiced/den/microphone"
        assert (configs["number"]["command_topic"], configs["number"]["min"], configs["number"]["max"]) == (
            "voiced/den/volume/set", 0, 100)
        # what Home Assistant sends when the slider moves: the speaker plays at 40 % from then on
        raw_publish(broker, "voiced/den/volume/set", b"40")
        wait_until(lambda: _state(states, "voiced/den/volume") == "40", timeout=30, what="volume 40")
        raw_publish(broker, play_bytes_topic("den", "sweep"), sweep_wav)
        wait_until(lambda: speaker.exists() and speaker.stat().st_size >= SWEEP.nbytes, timeout=30,
                   what="the sweep played")
        played = np.frombuffer(speaker.read_bytes(), "<i2").astype(np.int32)
        start, expected = int(np.argmax(np.abs(played) > 0)), np.round(SWEEP[1:] * 0.4)  # SWEEP[0] is 0
        assert np.abs(played[start:start + len(expected)] - expected).max() <= 1
        # a WAV of real speech over max_payload_bytes (64 KB: 2 s here) plays whole and is answered
        reading = read_wav(speech / "hifitts_6097_5min" / "audio" / READING)[0][:, 0]
        write_wav(tmp_path / "reading.wav", reading, 16000)
        reading_wav = (tmp_path / "reading.wav").read_bytes()
        assert len(reading_wav) > 65536
        before = speaker.stat().st_size
        raw_publish(broker, play_bytes_topic("den", "reading"), reading_wav)
        finished.wait_count(2)
        wait_until(lambda: speaker.stat().st_size - before >= 2 * len(reading), timeout=30,
                   what="every sample of the reading played")
        assert [json.loads(p)["id"] for p in finished.payloads()] == ["sweep", "reading"]
        # garbage on the command topics is counted and ignored
        raw_publish(broker, "voiced/den/volume/set", b"loud")
        raw_publish(broker, "voiced/den/volume/set", b"140")
        raw_publish(broker, "voiced/den/microphone/set", b"maybe")
        wait_until(lambda: json.loads(states_stats.payloads()[-1])["mqtt"]["malformed"] >= 3, timeout=30,
                   what="three malformed commands counted")
        # switched off: the wake word said to the room is not heard
        raw_publish(broker, "voiced/den/microphone/set", b"OFF")
        wait_until(lambda: _state(states, "voiced/den/microphone") == "OFF", timeout=30, what="microphone OFF")
        # a dialogue manager's toggleOn is its own business: it does not switch the user's microphone on
        raw_publish(broker, "hermes/asr/toggleOn", b'{"siteId": "den"}')
        heard_said(sat, np.concatenate([gap, alexa, gap]))
        assert hotwords.payloads() == [] and _counters(states_stats).get("wake_detections", 0) == 0
        assert _state(states, "voiced/den/volume") == "40"
    assert load_controls(tmp_path / "state" / CONTROLS_FILE) == Controls(microphone=False, volume=0.4)

    # a restart (a power cut): still off, still 40 %, until Home Assistant switches it on
    states.messages.clear()
    states_stats.messages.clear()
    with satellite(tmp_path, broker, models, speaker_file=f"|cat >>{speaker}", daemon="stats_interval_s = 0.5") as sat:
        wait_until(lambda: states.payloads("voiced/den/microphone") and states.payloads("voiced/den/volume"),
                   timeout=60, what="the states after the restart")
        assert _state(states, "voiced/den/microphone") == "OFF" and _state(states, "voiced/den/volume") == "40"
        wait_until(lambda: states_stats.payloads() and _counters(states_stats).get("windows_muted", 0) > 0,
                   timeout=60, what="the restarted daemon's stats")
        heard_said(sat, np.concatenate([gap, alexa, gap]))
        assert hotwords.payloads() == []
        raw_publish(broker, "voiced/den/microphone/set", b"ON")
        wait_until(lambda: _state(states, "voiced/den/microphone") == "ON", timeout=30, what="microphone ON")
        sat.room.say(np.concatenate([gap, alexa, gap]))
        hotwords.wait_count(1, "hermes/hotword/alexa_v0.1/detected")


@needs_alsa
@pytest.mark.shared
def test_home_assistant_notify_is_spoken_by_the_real_voice(tmp_path, broker, subscriber_factory, models) -> None:
    """``notify.send_message`` to the Speak entity: the message published on its command topic is
    said through the speaker, sample for sample what the joe voice says; bad messages are counted."""
    from tests.tts.joe import joe_voice_path
    from voiced.tts import PiperVoice, SynthesisOptions

    message = "Dinner is ready. Come to the kitchen."
    voice = PiperVoice.load(joe_voice_path())
    said = np.concatenate([c.samples for c in voice.synthesize(message, SynthesisOptions(noise_scale=0, noise_w=0))])
    discovery = subscriber_factory(broker, "homeassistant/notify/#")
    stats = subscriber_factory(broker, "voiced/den/stats")
    finished = subscriber_factory(broker, "hermes/tts/sayFinished")
    speaker = tmp_path / "speaker.raw"
    tts = f'voice = "{joe_voice_path()}"\nnoise_scale = 0\nnoise_w = 0\nmax_text_chars = 200'
    with satellite(tmp_path, broker, models, speaker_file=f"|cat >>{speaker}", daemon="stats_interval_s = 0.5",
                   tts=tts):
        [config] = [json.loads(p) for p in discovery.wait_count(1)]
        assert config["command_topic"] == "voiced/den/say" and config["name"] == "Speak"
        for bad in (b"\xff\xfe", b"   ", ("word " * 100).encode()):  # not UTF-8, empty, over max_text_chars
            raw_publish(broker, "voiced/den/say", bad)
        raw_publish(broker, "voiced/den/say", message.encode())
        wait_until(lambda: speaker.exists() and speaker.stat().st_size >= said.nbytes, timeout=60,
                   what="the message spoken")
        wait_until(lambda: stats.payloads() and json.loads(stats.payloads()[-1])["mqtt"]["malformed"] >= 2,
                   timeout=30, what="the two malformed messages counted")
        # a Hermes say it cannot read still gets its sayFinished: its sender is waiting for it
        raw_publish(broker, "hermes/tts/say", b'{"text": 42, "siteId": "den", "id": "t-bad", "sessionId": "s"}')
        # a session id of the wrong type (the error itself) is left out of the answer, not the answer out
        raw_publish(broker, "hermes/tts/say", b'{"text": "x", "siteId": "den", "id": "t-int", "sessionId": 9}')
        assert [json.loads(p) for p in finished.wait_count(2)] == [
            {"siteId": "den", "id": "t-bad", "sessionId": "s"}, {"siteId": "den", "id": "t-int", "sessionId": None}]
        counters = _counters(stats)
    played = np.frombuffer(speaker.read_bytes(), "<i2")
    start, first = int(np.argmax(np.abs(played) > 0)), int(np.argmax(np.abs(said) > 0))
    assert len(played) - start >= len(said) - first - 1  # the whole message, not only its start
    assert np.array_equal(played[start:start + 4000], said[first:first + 4000])
    assert counters["notify_messages"] == 2 and counters.get("spoken_failed", 0) == 1  # the long one: refused


SLOW_SPEAKER = """import sys, time
out = open(sys.argv[1], "ab", buffering=0)
while chunk := sys.stdin.buffer.read(2205):  # 50 ms of 22.05 kHz int16 per 100 ms: half real time
    out.write(chunk)
    time.sleep(0.1)
"""


@needs_alsa
@pytest.mark.shared
def test_the_stop_button_ends_a_long_announcement(tmp_path, broker, subscriber_factory, models) -> None:
    """A speaker slower than real time (the file plugin writes into a pipe read at half speed) plays
    a long announcement; Home Assistant's Stop button ends it and what was queued: the speaker
    gets a fraction of it, the request ends interrupted, and the next message is spoken as ever."""
    from tests.tts.joe import joe_voice_path
    from voiced.tts import PiperVoice, SynthesisOptions

    long = " ".join(f"This is sentence number {n} of a long announcement about the weather." for n in range(12))
    voice = PiperVoice.load(joe_voice_path())
    full = sum(c.samples.nbytes for c in voice.synthesize(long, SynthesisOptions(noise_scale=0, noise_w=0)))
    (tmp_path / "slow.py").write_text(SLOW_SPEAKER)
    speaker = tmp_path / "speaker.raw"
    stats = subscriber_factory(broker, "voiced/den/stats")
    buttons = subscriber_factory(broker, "homeassistant/button/#")
    tts = f'voice = "{joe_voice_path()}"\nnoise_scale = 0\nnoise_w = 0'
    with satellite(tmp_path, broker, models, speaker_file=f"|{sys.executable} {tmp_path / 'slow.py'} {speaker}",
                   daemon="stats_interval_s = 0.5", tts=tts):
        [config] = [json.loads(p) for p in buttons.wait_count(1)]
        assert config["command_topic"] == "voiced/den/stop"
        raw_publish(broker, "voiced/den/say", long.encode())
        wait_until(lambda: speaker.exists() and speaker.stat().st_size > 20_000, timeout=60, what="speech begun")
        raw_publish(broker, "voiced/den/stop", b"stop!")  # not what the button sends: counted, ignored
        raw_publish(broker, "voiced/den/stop", b"PRESS")
        wait_until(lambda: stats.payloads() and _counters(stats).get("spoken_interrupted", 0) == 1, timeout=60,
                   what="the announcement interrupted")
        stopped_at = speaker.stat().st_size
        raw_publish(broker, "voiced/den/say", b"Done.")
        wait_until(lambda: stats.payloads() and _counters(stats).get("spoken_completed", 0) == 1, timeout=60,
                   what="the next message spoken")
        counters = _counters(stats)
    assert stopped_at < full / 2, (stopped_at, full)  # a fraction of it, not the whole
    assert counters["stops_pressed"] == 1 and json.loads(stats.payloads()[-1])["mqtt"]["malformed"] >= 1


def test_settings_are_kept_whole_and_bad_files_read_as_the_defaults(tmp_path: Path, caplog) -> None:
    path = tmp_path / "state" / CONTROLS_FILE
    assert load_controls(path) == Controls()  # none yet: microphone on, the config's volume
    assert save_controls(path, Controls(False, 0.25)) and load_controls(path) == Controls(False, 0.25)
    assert [p.name for p in path.parent.iterdir()] == [CONTROLS_FILE]  # no temporary file left
    for damaged in (b"", b"{\"microphone\": fa", b"[1, 2]", b"\xff\xfe", b'{"microphone": "no", "volume": 0.5}',
                    b'{"microphone": false, "volume": 7}', b'{"volume": NaN}', b'{"volume": true}'):
        path.write_bytes(damaged)
        controls = load_controls(path)
        assert controls.microphone is (b"false" not in damaged) and controls.volume in (None, 0.5), damaged
    assert "controls.json" in caplog.text
    path.write_bytes(b'{"microphone": false, "volume": 7}')
    assert load_controls(path) == Controls(False, None)  # the good half is kept
    # a directory that takes no writes: False, logged, nothing raised (the settings last in memory)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert not save_controls(blocker / CONTROLS_FILE, Controls(False, None))


def test_saving_removes_temporary_files_a_crash_left_and_the_saved_file_is_in_force(tmp_path: Path) -> None:
    """A daemon killed between writing and renaming leaves ``.controls.json.<pid>.tmp``: the next
    load or save removes it, whatever its pid, and what was saved last is what is read."""
    path = tmp_path / "state" / CONTROLS_FILE
    path.parent.mkdir()
    leftovers = [path.with_name(f".{CONTROLS_FILE}.{pid}.tmp") for pid in (1234, 98765)]
    for leftover in leftovers:
        leftover.write_text('{"microphone": tr')  # cut short by the crash
    assert load_controls(path) == Controls()
    assert list(path.parent.iterdir()) == [], "a load removes them too"
    for leftover in leftovers:
        leftover.write_text('{"microphone": tr')
    assert save_controls(path, Controls(False, 0.3, Sensitivity.SLIGHTLY))
    assert [p.name for p in path.parent.iterdir()] == [CONTROLS_FILE]
    assert json.loads(path.read_text("utf-8")) == {"microphone": False, "volume": 0.3,
                                                   "wake_sensitivity": Sensitivity.SLIGHTLY.value}
    assert load_controls(path) == Controls(False, 0.3, Sensitivity.SLIGHTLY)


def test_saving_fsyncs_the_file_before_the_rename_and_the_directory_after(tmp_path: Path, monkeypatch) -> None:
    """"Microphone off" must survive a power cut soon after it is set. A power cut cannot be run in a
    test, so this records the os.fsync calls instead (the one thing observable short of one): the
    written file's descriptor, with its data already in it, then its directory's, after the
    rename. The real fsync still runs."""
    path = tmp_path / "state" / CONTROLS_FILE
    real_fsync = os.fsync
    synced: list[tuple[os.stat_result, bool]] = []  # each fsync'd descriptor, and whether controls.json existed

    def recording_fsync(fd: int) -> None:
        synced.append((os.fstat(fd), path.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    assert save_controls(path, Controls(microphone=False))
    written = path.stat()
    assert len(synced) == 2, synced
    (first, renamed_first), (second, renamed_second) = synced
    # the file now named controls.json, with all of its bytes written out, fsynced before the rename
    assert stat.S_ISREG(first.st_mode) and first.st_ino == written.st_ino and first.st_size == written.st_size > 0
    assert not renamed_first
    # then its directory, after the rename
    assert stat.S_ISDIR(second.st_mode) and second.st_ino == path.parent.stat().st_ino and renamed_second
    assert load_controls(path) == Controls(microphone=False)

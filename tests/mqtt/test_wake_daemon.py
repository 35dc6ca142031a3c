"""voiced run in wake mode: a real "alexa", then a real spoken command, through Whisper to a Hermes intent.

Real mosquitto, the real openWakeWord alexa head, real Silero, real Whisper tiny.en; the command
is spoken by the real Piper joe voice. Speech before the wake word is not transcribed, nor is
the wake word itself; the command is, in the session the wake word opened.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from rhasspyhermes.asr import AsrTextCaptured
from rhasspyhermes.nlu import NluIntent
from rhasspyhermes.wake import HotwordDetected

from tests.mqtt.test_whisper_daemon import _spoken
from voiced.audio.wav import read_wav, write_wav
from voiced.config import Config

HUMAN = "roots_19_morris_0269.wav"


def wake_toml(broker, source: str, whisper_model_dir, models, site: str = "kitchen", wake: str = "",
              daemon: str = "", sections: str = "") -> str:
    """A daemon that wakes on alexa (real Silero, Whisper, Home Assistant's sentences, a real broker)
    hearing ``source``; ``wake``, ``daemon``: more keys of theirs; ``sections``: more TOML."""
    return f"""
[site]
id = "{site}"
[audio]
source = "{source}"
[vad]
kind = "silero"
model = "{models / 'silero_vad_v5' / 'silero_vad.onnx'}"
[asr]
model = "{whisper_model_dir}"
[intents]
builtin = "home-assistant"
[intents.lists]
name = ["kitchen light", "porch light"]
[wake]
directory = "{models / 'openwakeword'}"
models = ["alexa_v0.1"]
{wake}
{sections}
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
{daemon}
"""


def _config(tmp_path, broker, wav, whisper_model_dir, models) -> Config:
    (tmp_path / "voiced.toml").write_text(wake_toml(broker, f"file:{wav}", whisper_model_dir, models))
    return Config.from_file(tmp_path / "voiced.toml")


@pytest.mark.shared
def test_wake_word_then_command_becomes_an_intent_and_nothing_else_is_heard(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models, speech) -> None:
    from voiced.pipeline import Daemon, ListenMode

    gap = np.zeros(16000, np.float32)
    human = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)[0][:, 0]
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    audio = np.concatenate([gap, human, gap, gap, alexa, gap[:8000], _spoken("Turn on the kitchen light."), gap, gap])
    wav = tmp_path / "room.wav"
    write_wav(wav, audio[:, None], 16000)
    sub = subscriber_factory(broker, "hermes/#")
    everything = subscriber_factory(broker, "#")
    daemon = Daemon(_config(tmp_path, broker, wav, whisper_model_dir, models), ListenMode.WAKE)
    daemon.start()
    try:
        [raw] = sub.wait_count(1, "hermes/hotword/alexa_v0.1/detected")
        hotword = HotwordDetected.from_dict(json.loads(raw))
        assert hotword.site_id == "kitchen" and hotword.model_id == "alexa_v0.1" and hotword.session_id
        # Home Assistant sees the wake word too: an event entity whose event fires with the detection
        topics = daemon.discovery.topics
        [event] = [json.loads(p) for p in everything.wait_count(1, topics.wake)]
        assert event["event_type"] == "alexa_v0.1" and event["session_id"] == hotword.session_id
        # discovery goes out on connecting, ahead of the outbox: even when the wake word was heard
        # before the broker took the connection, HA knows the entity before its first event
        order = [t for t, _, _ in everything.messages]
        configs = [json.loads(p) for t, p, _ in everything.messages[: order.index(topics.wake)]
                   if t.endswith("/wake/config")]
        assert configs and configs[-1]["event_types"] == ["alexa_v0.1"] and configs[-1]["state_topic"] == topics.wake
        [raw] = sub.wait_count(1, "hermes/intent/HassTurnOn")
        intent = NluIntent.from_dict(json.loads(raw))
        assert intent.session_id == hotword.session_id
        assert {s.slot_name: s.value["value"] for s in intent.slots}["name"] == "kitchen light"
        captured = [AsrTextCaptured.from_dict(json.loads(p)) for p in sub.payloads("hermes/asr/textCaptured")]
        assert [c.text.lower().strip(".") for c in captured] == ["turn on the kitchen light"]  # not the human, not "alexa"
        # the wake word the session came with is named on what it led to, as Rhasspy's services do
        assert intent.wakeword_id == captured[0].wakeword_id == "alexa_v0.1"
        # the wake word starts the session, as Rhasspy's dialogue manager does: sessionStarted follows
        # the detection at once (not the speech after it), once, and comes before its transcript
        sub.wait_count(1, "hermes/dialogueManager/sessionEnded")
        order = [t for t, _, _ in sub.messages]
        assert order.count("hermes/dialogueManager/sessionStarted") == 1
        assert (order.index("hermes/hotword/alexa_v0.1/detected") + 1 == order.index("hermes/dialogueManager/sessionStarted")
                < order.index("hermes/asr/textCaptured"))
        [started] = [json.loads(p) for p in sub.payloads("hermes/dialogueManager/sessionStarted")]
        assert started["sessionId"] == hotword.session_id
    finally:
        daemon.stop(timeout=2)


@pytest.mark.shared
def test_a_wake_word_followed_by_silence_is_a_session_started_and_timed_out(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models, speech) -> None:
    """Nothing said after "alexa": the session ends with reason timeout, and it had begun (its
    sessionEnded used to come without a sessionStarted: readers pairing them saw a stray end)."""
    from rhasspyhermes.dialogue import DialogueSessionEnded, DialogueSessionStarted

    from voiced.pipeline import Daemon, ListenMode

    gap = np.zeros(16000, np.float32)
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    wav = tmp_path / "room.wav"
    write_wav(wav, np.concatenate([gap, alexa, *[gap] * 4])[:, None], 16000)
    (tmp_path / "voiced.toml").write_text(wake_toml(broker, f"file:{wav}", whisper_model_dir, models,
                                                    wake="timeout_s = 2.0"))
    sub = subscriber_factory(broker, "hermes/#")
    daemon = Daemon(Config.from_file(tmp_path / "voiced.toml"), ListenMode.WAKE)
    daemon.start()
    try:
        [raw] = sub.wait_count(1, "hermes/dialogueManager/sessionEnded")
        ended = DialogueSessionEnded.from_dict(json.loads(raw))
        [raw] = sub.payloads("hermes/dialogueManager/sessionStarted")
        started = DialogueSessionStarted.from_dict(json.loads(raw))
        [raw] = sub.payloads("hermes/hotword/alexa_v0.1/detected")
        assert started.session_id == ended.session_id == HotwordDetected.from_dict(json.loads(raw)).session_id
        assert ended.termination.reason.value == "timeout" and not sub.payloads("hermes/asr/textCaptured")
    finally:
        daemon.stop(timeout=2)


@pytest.mark.shared
def test_hotword_toggle_off_silences_the_wake_word_and_toggle_on_brings_it_back(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models, speech) -> None:
    """A retained toggleOff (as a dialogue manager leaves it) is in force before the first "alexa";
    toggleOn, sent once that "alexa" has been heard, lets the second one through. The audio is paced
    to the clock, and each message has seconds of silence before the "alexa" it must precede."""
    from tests.mqtt.conftest import raw_publish
    from voiced.pipeline import Daemon, ListenMode
    from tests.support import wait_until

    gap = np.zeros(16000, np.float32)
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    first_end = 3 + len(alexa) / 16000
    audio = np.concatenate([gap, gap, gap, alexa, *[gap] * 5, alexa, gap, gap])
    wav = tmp_path / "room.wav"
    write_wav(wav, audio[:, None], 16000)
    config = _config(tmp_path, broker, wav, whisper_model_dir, models)
    config = dataclasses.replace(config, audio=dataclasses.replace(config.audio, realtime=True))
    sub = subscriber_factory(broker, "hermes/hotword/#")
    off = b'{"siteId": "kitchen", "reason": "dialogueSession"}'
    raw_publish(broker, "hermes/hotword/toggleOff", off, retain=True)
    daemon = Daemon(config, ListenMode.ALWAYS)

    def heard() -> float:
        # stream time gone by: windows dropped while the listen stage lagged (a loaded machine) count too
        return (daemon.counters.get("windows") + daemon.counters.get("windows_dropped")) * 0.1

    daemon.start()
    try:
        # once the first "alexa" has gone by (stream time), detection comes back on
        wait_until(lambda: heard() > first_end + 0.5, timeout=30, what="the first alexa")
        raw_publish(broker, "hermes/hotword/toggleOff", b"", retain=True)  # clear the retained message
        # a sound played meanwhile holds it off too; its end leaves the session's reason standing
        raw_publish(broker, "hermes/hotword/toggleOff", b'{"siteId": "kitchen", "reason": "playAudio"}')
        raw_publish(broker, "hermes/hotword/toggleOn", b'{"siteId": "kitchen", "reason": "playAudio"}')
        raw_publish(broker, "hermes/hotword/toggleOn", b'{"siteId": "kitchen", "reason": "dialogueSession"}')
        [raw] = sub.wait_count(1, "hermes/hotword/alexa_v0.1/detected")
        wait_until(lambda: heard() >= len(audio) / 16000 - 0.2, timeout=30, what="the end of the audio")
        assert len(sub.payloads("hermes/hotword/alexa_v0.1/detected")) == 1  # the second alexa only
        assert daemon.counters.get("wake_detections") == 1
    finally:
        daemon.stop(timeout=2)


@pytest.mark.shared
def test_the_asr_toggled_off_leaves_the_wake_word_listening(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models, speech) -> None:
    """Hermes' ASR and wake word are two components with switches of their own: a retained
    hermes/asr/toggleOff used to silence the wake word as well (every window muted). A real
    human sentence and a real "alexa": the wake word is heard, nothing is transcribed."""
    from tests.mqtt.conftest import raw_publish
    from tests.support import wait_until
    from voiced.pipeline import Daemon, ListenMode

    gap = np.zeros(16000, np.float32)
    human = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)[0][:, 0]
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    audio = np.concatenate([gap, gap, gap, human, gap, alexa, gap, gap])  # 3 s for the retained message to land
    wav = tmp_path / "room.wav"
    write_wav(wav, audio[:, None], 16000)
    sub = subscriber_factory(broker, "hermes/#")
    raw_publish(broker, "hermes/asr/toggleOff", b'{"siteId": "kitchen", "reason": "ttsSay"}', retain=True)
    config = _config(tmp_path, broker, wav, whisper_model_dir, models)
    daemon = Daemon(dataclasses.replace(config, audio=dataclasses.replace(config.audio, realtime=True)),
                    ListenMode.ALWAYS)
    daemon.start()
    try:
        sub.wait_count(1, "hermes/hotword/alexa_v0.1/detected")
        windows = len(audio) // 1600
        wait_until(lambda: daemon.counters.get("windows") >= windows - 1, timeout=60, what="the whole recording heard")
        assert daemon.counters.get("windows_asr_off") >= windows - 30, "off from the first 3 s on"
        assert daemon.counters.get("windows_muted") == 0
        assert not sub.payloads("hermes/asr/textCaptured") and daemon.counters.get("utterances") == 0
    finally:
        raw_publish(broker, "hermes/asr/toggleOff", b"", retain=True)
        daemon.stop(timeout=2)

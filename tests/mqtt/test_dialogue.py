"""An app leads voiced's own sessions as Rhasspy's dialogue manager lets it: startSession,
continueSession, endSession (rhasspyhermes' messages, parsed back with its classes).

Real parts only: ``voiced run --listen-mode wake`` as a process, a real mosquitto, real libasound
with the ALSA file plugin as speaker and as microphone (a FIFO this test writes in 100 ms steps),
real Silero and Whisper tiny.en, the real alexa head, the real joe voice saying the prompts and
the command. No wake word is ever said: a dialogue's turn is heard without one.
"""

from __future__ import annotations

import json
import os

import pytest
from rhasspyhermes.dialogue import (
    DialogueAction,
    DialogueContinueSession,
    DialogueEndSession,
    DialogueIntentNotRecognized,
    DialogueNotification,
    DialogueSessionEnded,
    DialogueSessionQueued,
    DialogueSessionStarted,
    DialogueStartSession,
)
from rhasspyhermes.nlu import NluIntent

from tests.audio.test_alsa import file_pcm, needs_alsa
from tests.mqtt.test_daemon import answered_probe
from tests.mqtt.test_voice_daemon import Room, voiced_run
from tests.mqtt.test_wake_daemon import wake_toml
from tests.mqtt.test_whisper_daemon import _spoken
from tests.tts.joe import joe_voice_path
from tests.tts.test_playback import playback_pcm

COMMAND = "Turn on the kitchen light."


def _publish(broker, message) -> None:
    import paho.mqtt.publish as mqtt_publish

    mqtt_publish.single(message.topic(), message.payload(), qos=1, hostname=broker.host, port=broker.port)


@needs_alsa
@pytest.mark.shared
def test_an_app_announces_asks_continues_and_ends_voiceds_sessions(tmp_path, broker, subscriber_factory,
                                                                   whisper_model_dir, models) -> None:
    fifo, speaker = tmp_path / "mic.fifo", tmp_path / "speaker.raw"
    os.mkfifo(fifo)
    (tmp_path / "asoundrc").write_text(playback_pcm("spk", speaker) + file_pcm("mic", fifo))
    (tmp_path / "voiced.toml").write_text(wake_toml(broker, "alsa:mic", whisper_model_dir, models, sections=f"""
[tts]
voice = "{joe_voice_path()}"
tail_ms = 300
[playback]
device = "spk"
"""))
    command = _spoken(COMMAND, exact=True)
    room = Room(fifo)
    sub = subscriber_factory(broker, "hermes/#")
    spoken = subscriber_factory(broker, "voiced/+/speaking")

    def said() -> int:  # how many times the daemon began to speak
        return [p for _, p, _ in spoken.messages].count(b"ON")

    def quiet_after(times: int) -> None:
        spoken.wait_for(lambda ms: [p for _, p, _ in ms].count(b"ON") >= times and ms[-1][1] == b"OFF",
                        f"spoken {times} times, then quiet")

    try:
        with voiced_run(tmp_path, "--listen-mode", "wake"):
            answered_probe(broker, sub)
            # a notification: said, and the session begins and ends with the app's customData
            _publish(broker, DialogueStartSession(init=DialogueNotification(text="The laundry is done."),
                                                  site_id="kitchen", custom_data="cd-n"))
            [raw] = sub.wait_count(1, "hermes/dialogueManager/sessionEnded")
            ended = DialogueSessionEnded.from_dict(json.loads(raw))
            [raw] = sub.payloads("hermes/dialogueManager/sessionStarted")
            started = DialogueSessionStarted.from_dict(json.loads(raw))
            assert started.session_id == ended.session_id and started.custom_data == ended.custom_data == "cd-n"
            assert ended.termination.reason.value == "nominal" and said() == 1
            quiet_after(1)
            # an action: the question is said, then the answer is heard without a wake word
            _publish(broker, DialogueStartSession(init=DialogueAction(can_be_enqueued=False, text="What should I turn on?",
                                                                      intent_filter=["HassTurnOn"]),
                                                  site_id="kitchen", custom_data="cd-a"))
            quiet_after(2)
            room.say(command)
            [raw] = sub.wait_count(1, "hermes/intent/HassTurnOn")
            intent = NluIntent.from_dict(json.loads(raw))
            ask = intent.session_id
            assert intent.custom_data == "cd-a" and {s.slot_name: s.value["value"] for s in intent.slots}["name"] \
                == "kitchen light"
            [raw] = sub.wait_count(2, "hermes/dialogueManager/sessionEnded")[1:]
            assert DialogueSessionEnded.from_dict(json.loads(raw)).session_id == ask
            # the app continues that session: said, heard, the same session, its data as the app now gives it
            _publish(broker, DialogueContinueSession(session_id=ask, text="Anything else?", custom_data="cd-c"))
            quiet_after(3)
            room.say(command)
            [raw] = sub.wait_count(2, "hermes/intent/HassTurnOn")[1:]
            again = NluIntent.from_dict(json.loads(raw))
            assert again.session_id == ask and again.custom_data == "cd-c"
            sub.wait_count(3, "hermes/dialogueManager/sessionEnded")
            # an answer no intent of the filter matches, and the app asked to be told: told, the session open
            _publish(broker, DialogueContinueSession(session_id=ask, text="Which one?", intent_filter=["HassTurnOff"],
                                                     send_intent_not_recognized=True))
            quiet_after(4)
            room.say(command)
            [raw] = sub.wait_count(1, "hermes/dialogueManager/intentNotRecognized")
            unrecognized = DialogueIntentNotRecognized.from_dict(json.loads(raw))
            assert unrecognized.session_id == ask and unrecognized.custom_data == "cd-c"
            assert "kitchen light" in unrecognized.input.lower()
            # a session not of this device (another satellite's) is left alone; the app's last word is
            # said, and ends the session it kept open
            _publish(broker, DialogueEndSession(session_id="not-ours", text="Wrong room."))
            _publish(broker, DialogueEndSession(session_id=ask, text="Done."))
            [raw] = sub.wait_count(4, "hermes/dialogueManager/sessionEnded")[3:]
            done = DialogueSessionEnded.from_dict(json.loads(raw))
            assert done.session_id == ask and done.termination.reason.value == "nominal"
            quiet_after(5)
            # a question nobody answers ends with reason timeout ([wake] timeout_s): the device does not
            # go on listening without a wake word (a television would become the answer)
            _publish(broker, DialogueStartSession(init=DialogueAction(can_be_enqueued=False, text="Are you there?"),
                                                  site_id="kitchen", custom_data="cd-t"))
            [raw] = sub.wait_count(5, "hermes/dialogueManager/sessionEnded")[4:]
            timed_out = DialogueSessionEnded.from_dict(json.loads(raw))
            assert timed_out.termination.reason.value == "timeout" and timed_out.custom_data == "cd-t"
            # the app ends a session still listening: it ends then, and what is said after is not heard
            _publish(broker, DialogueStartSession(init=DialogueAction(can_be_enqueued=False, text="Which light?"),
                                                  site_id="kitchen", custom_data="cd-e"))
            quiet_after(7)
            [raw] = sub.payloads("hermes/dialogueManager/sessionStarted")[-1:]
            listening = json.loads(raw)["sessionId"]
            # one question at a time: another app's, enqueueable, waits (sessionQueued); one that is not is dropped
            _publish(broker, DialogueStartSession(init=DialogueAction(can_be_enqueued=True, text="And the porch?"),
                                                  site_id="kitchen", custom_data="cd-q"))
            _publish(broker, DialogueStartSession(init=DialogueAction(can_be_enqueued=False, text="Dropped."),
                                                  site_id="kitchen", custom_data="cd-x"))
            [raw] = sub.wait_count(1, "hermes/dialogueManager/sessionQueued")
            queued = DialogueSessionQueued.from_dict(json.loads(raw))
            assert queued.custom_data == "cd-q" and queued.site_id == "kitchen"
            _publish(broker, DialogueEndSession(session_id=listening, custom_data="cd-e2"))
            [raw] = sub.wait_count(6, "hermes/dialogueManager/sessionEnded")[5:]
            ended = DialogueSessionEnded.from_dict(json.loads(raw))
            assert ended.session_id == listening and ended.termination.reason.value == "nominal"
            assert ended.custom_data == "cd-e2"
            # the device is free: the queued question is asked, and the answer is its (not the ended one's)
            quiet_after(8)
            room.say(command)
            [raw] = sub.wait_count(3, "hermes/intent/HassTurnOn")[2:]
            answered = NluIntent.from_dict(json.loads(raw))
            assert answered.session_id == queued.session_id and answered.custom_data == "cd-q"
            sub.wait_count(7, "hermes/dialogueManager/sessionEnded")
    finally:
        room.stop.set()
    starts = [DialogueSessionStarted.from_dict(json.loads(p)) for p in sub.payloads("hermes/dialogueManager/sessionStarted")]
    ends = [DialogueSessionEnded.from_dict(json.loads(p)) for p in sub.payloads("hermes/dialogueManager/sessionEnded")]
    # every end had its start; nothing was heard but the two answers (no wake word, no echo of the prompts)
    assert [s.session_id for s in starts] == [e.session_id for e in ends]
    assert said() == 8 and len(sub.payloads("hermes/asr/textCaptured")) == 4
    assert len(sub.payloads("hermes/intent/HassTurnOn")) == 3
    assert all(json.loads(p).get("customData") != "cd-x" for t, p, _ in sub.messages  # the dropped one: nothing
               if t != "hermes/dialogueManager/startSession")

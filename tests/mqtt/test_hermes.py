"""Hermes payloads against rhasspyhermes, the reference implementation of the protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voiced.intents import Intent, IntentRecognizer, IntentSource, Slot, SlotKind
from voiced.mqtt import hermes
from voiced.mqtt.hermes import AsrToken, MalformedMessage, TerminationReason, Topic

rh_asr = pytest.importorskip(
    "rhasspyhermes.asr", reason="rhasspy-hermes (install with --no-deps, plus dataclasses-json) checks the payloads"
)
from rhasspyhermes.audioserver import AudioPlayBytes, AudioPlayFinished
from rhasspyhermes.dialogue import (
    DialogueSessionEnded,
    DialogueSessionStarted,
    DialogueSessionTerminationReason,
)
from rhasspyhermes.nlu import NluIntent, NluIntentNotRecognized, NluQuery
from rhasspyhermes.tts import TtsSay, TtsSayFinished

AsrStartListening, AsrStopListening = rh_asr.AsrStartListening, rh_asr.AsrStopListening
AsrTextCaptured, AsrToggleOn, AsrToggleOff = rh_asr.AsrTextCaptured, rh_asr.AsrToggleOn, rh_asr.AsrToggleOff


def decode(message: hermes.HermesMessage) -> dict[str, object]:
    obj = json.loads(message.json())
    assert isinstance(obj, dict)
    return obj


def test_topics_are_the_reference_topics() -> None:
    assert Topic.TEXT_CAPTURED == AsrTextCaptured.topic()
    assert Topic.START_LISTENING == AsrStartListening.topic()
    assert Topic.STOP_LISTENING == AsrStopListening.topic()
    assert Topic.ASR_TOGGLE_ON == AsrToggleOn.topic()
    assert Topic.ASR_TOGGLE_OFF == AsrToggleOff.topic()
    assert Topic.NLU_QUERY == NluQuery.topic()
    assert Topic.INTENT_NOT_RECOGNIZED == NluIntentNotRecognized.topic()
    assert Topic.INTENT_ALL == NluIntent.topic()
    assert hermes.intent_topic("HassTurnOn") == NluIntent.topic(intent_name="HassTurnOn")
    assert hermes.intent_name_from_topic("hermes/intent/HassTurnOn") == "HassTurnOn"
    assert hermes.intent_name_from_topic("hermes/nlu/query") is None
    assert Topic.SESSION_STARTED == DialogueSessionStarted.topic()
    assert Topic.SESSION_ENDED == DialogueSessionEnded.topic()
    assert Topic.TTS_SAY == TtsSay.topic()
    assert Topic.TTS_SAY_FINISHED == TtsSayFinished.topic()
    assert hermes.play_bytes_topic("kitchen", "r1") == AudioPlayBytes.topic(site_id="kitchen", request_id="r1")
    assert hermes.site_and_request_from_play_bytes("hermes/audioServer/kitchen/playBytes/r1") == ("kitchen", "r1")
    assert hermes.play_finished_topic("kitchen") == AudioPlayFinished.topic(site_id="kitchen")
    assert Topic.PARTIAL_TEXT_CAPTURED == "hermes/asr/partialTextCaptured"
    with pytest.raises(ValueError):
        hermes.intent_topic("a/b")


def test_text_captured_round_trips_with_tokens_and_times() -> None:
    tokens = [AsrToken("TURN", 0.9, 0, 4, 0.10, 0.30), AsrToken("ON", 0.8, 5, 7, 0.30, 0.45)]
    msg = hermes.text_captured("TURN ON", 0.85, 1.25, "kitchen", "s-1", "hey_jarvis", tokens, "en")
    assert msg.topic == Topic.TEXT_CAPTURED
    obj = decode(msg)
    assert {"siteId", "sessionId", "asrTokens"} <= obj.keys()
    ref = AsrTextCaptured.from_dict(obj)
    assert (ref.text, ref.likelihood, ref.seconds) == ("TURN ON", 0.85, 1.25)
    assert (ref.site_id, ref.session_id, ref.wakeword_id, ref.lang) == ("kitchen", "s-1", "hey_jarvis", "en")
    assert ref.asr_tokens is not None and len(ref.asr_tokens) == 1
    first, second = ref.asr_tokens[0]
    assert (first.value, first.confidence, first.range_start, first.range_end) == ("TURN", 0.9, 0, 4)
    assert first.time is not None and (first.time.start, first.time.end) == (0.10, 0.30)
    assert (second.value, second.range_start, second.range_end) == ("ON", 5, 7)
    # And back: the reference serializes to the same object but voiced's own key (readers ignore it).
    assert json.loads(ref.payload()) == {k: v for k, v in obj.items() if k != "fromTemplates"}
    assert obj["fromTemplates"] is False
    assert decode(hermes.text_captured("TURN ON", 0.85, 1.25, "kitchen", from_templates=True))["fromTemplates"] is True


def test_text_captured_derives_tokens_from_the_text() -> None:
    ref = AsrTextCaptured.from_dict(decode(hermes.text_captured("turn  on the light", 0.7, 2.0, "default")))
    assert ref.asr_tokens is not None
    assert [(t.value, t.range_start, t.range_end) for t in ref.asr_tokens[0]] == [
        ("turn", 0, 4), ("on", 6, 8), ("the", 9, 12), ("light", 13, 18)
    ]
    partial = hermes.partial_text_captured("turn", 0.5, 0.3, "default", "s")
    assert partial.topic == Topic.PARTIAL_TEXT_CAPTURED
    assert AsrTextCaptured.from_dict(decode(partial)).text == "turn"


def test_nlu_intent_round_trips_from_a_recognized_intent(tmp_path: Path) -> None:
    templates = tmp_path / "en.yaml"
    templates.write_text(
        "language: en\n"
        "intents:\n"
        "  HassTurnOn:\n"
        "    data:\n"
        "      - sentences: ['turn on [the] lights in [the] {area}']\n"
        "        slots: {domain: light}\n"
        "      - sentences: ['set [the] {area} to {brightness} percent']\n"
        "lists:\n"
        "  area: {values: [{in: living room, out: living_room}]}\n"
        "  brightness: {range: {from: 0, to: 100}}\n"
    )
    intent = IntentRecognizer.load([templates]).recognize("Turn on the lights in the Living Room")
    assert intent is not None
    msg = hermes.nlu_intent(intent, "kitchen", "s-1", request_id="q-7", custom_data="cd", asr_confidence=0.9)
    assert msg.topic == "hermes/intent/HassTurnOn"
    obj = decode(msg)
    assert obj["siteId"] == "kitchen" and obj["sessionId"] == "s-1"
    ref = NluIntent.from_dict(obj)
    assert ref.intent.intent_name == "HassTurnOn" and ref.intent.confidence_score == 1.0
    assert (ref.input, ref.raw_input, ref.id, ref.custom_data, ref.asr_confidence) == (
        intent.text, intent.text, "q-7", "cd", 0.9
    )
    assert ref.slots is not None
    area, domain = ref.slots
    assert (area.entity, area.slot_name, area.raw_value, area.value) == (
        "area", "area", "Living Room", {"kind": "Unknown", "value": "living_room"}
    )
    assert area.range is not None and intent.text[area.range.start : area.range.end] == "Living Room"
    assert (domain.slot_name, domain.value["value"], domain.range) == ("domain", "light", None)
    rhasspy = ref.to_rhasspy_dict()  # what Rhasspy's own intent handlers consume
    assert rhasspy["slots"] == {"area": "living_room", "domain": "light"}
    assert ref.asr_tokens is not None and [t.value for t in ref.asr_tokens[0]] == intent.text.split()

    number = IntentRecognizer.load([templates]).recognize("set the living room to 40 percent")
    assert number is not None
    slots = NluIntent.from_dict(decode(hermes.nlu_intent(number, "default"))).slots
    assert slots is not None
    assert slots[1].value == {"kind": "Number", "value": 40}


def test_nlu_intent_from_another_source_keeps_its_confidence() -> None:
    intent = Intent("GetTime", "what time is it", (), 0.62, IntentSource.LLM)
    ref = NluIntent.from_dict(decode(hermes.nlu_intent(intent, "default")))
    assert ref.intent.confidence_score == 0.62 and ref.slots == []
    slot = Slot("name", "name", "kitchen light", "kitchen light", SlotKind.WILDCARD, 12, 25)
    wild = Intent("HassTurnOn", "turn on the kitchen light", (slot,), 1.0)
    ref = NluIntent.from_dict(decode(hermes.nlu_intent(wild, "default")))
    assert ref.slots is not None and ref.slots[0].value == {"kind": "Unknown", "value": "kitchen light"}


def test_intent_not_recognized_round_trips() -> None:
    msg = hermes.intent_not_recognized("open the pod bay doors", "kitchen", "s-2", request_id="q-1")
    assert msg.topic == Topic.INTENT_NOT_RECOGNIZED
    obj = decode(msg)
    assert "sessionId" in obj and "siteId" in obj
    ref = NluIntentNotRecognized.from_dict(obj)
    assert (ref.input, ref.site_id, ref.session_id, ref.id) == ("open the pod bay doors", "kitchen", "s-2", "q-1")


def test_session_started_and_ended_round_trip() -> None:
    started = DialogueSessionStarted.from_dict(decode(hermes.session_started("kitchen", "s-3", "cd", "en")))
    assert (started.site_id, started.session_id, started.custom_data, started.lang) == ("kitchen", "s-3", "cd", "en")
    for reason in TerminationReason:
        ended = DialogueSessionEnded.from_dict(decode(hermes.session_ended("kitchen", "s-3", reason)))
        assert ended.termination.reason == DialogueSessionTerminationReason(reason.value)
        assert (ended.site_id, ended.session_id) == ("kitchen", "s-3")


def test_say_finished_and_play_finished_round_trip() -> None:
    say = TtsSayFinished.from_dict(decode(hermes.say_finished("kitchen", "say-1", "s-4")))
    assert (say.site_id, say.id, say.session_id) == ("kitchen", "say-1", "s-4")
    msg = hermes.play_finished("kitchen", "req-9")
    assert AudioPlayFinished.is_topic(msg.topic) and AudioPlayFinished.get_site_id(msg.topic) == "kitchen"
    assert AudioPlayFinished.from_dict(decode(msg)).id == "req-9"


def test_parsers_read_what_rhasspy_sends() -> None:
    q = hermes.parse_nlu_query(NluQuery(input="turn on the light", site_id="kitchen", id="q", intent_filter=["A"],
                                        session_id="s", asr_confidence=0.5).payload())
    assert (q.input, q.site_id, q.id, q.intent_filter, q.session_id, q.asr_confidence) == (
        "turn on the light", "kitchen", "q", ("A",), "s", 0.5
    )
    start = hermes.parse_start_listening(AsrStartListening(site_id="kitchen", session_id="s", stop_on_silence=False,
                                                           wakeword_id="w").payload())
    assert (start.site_id, start.session_id, start.stop_on_silence, start.wakeword_id) == ("kitchen", "s", False, "w")
    stop = hermes.parse_stop_listening(AsrStopListening(site_id="kitchen", session_id="s").payload())
    assert (stop.site_id, stop.session_id) == ("kitchen", "s")
    on = hermes.parse_message(Topic.ASR_TOGGLE_ON, AsrToggleOn(site_id="kitchen").payload())
    off = hermes.parse_message(Topic.ASR_TOGGLE_OFF, AsrToggleOff(site_id="kitchen").payload())
    assert isinstance(on, hermes.AsrToggle) and isinstance(off, hermes.AsrToggle)
    assert (on.enabled, off.enabled, on.site_id) == (True, False, "kitchen")
    say = hermes.parse_tts_say(TtsSay(text="hello", site_id="kitchen", id="t", volume=0.5).payload())
    assert (say.text, say.site_id, say.id, say.volume) == ("hello", "kitchen", "t", 0.5)
    # Snips-style minimal payloads: defaults fill in.
    assert hermes.parse_stop_listening(b"{}").site_id == "default"
    assert hermes.parse_nlu_query('{"input": "x"}').site_id == "default"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[1, 2]", "not an object"),
        (b'"text"', "not an object"),
        (b'{"siteId": "default"}', "'input' is missing"),
        (b'{"input": null}', "'input' is missing"),
        (b'{"input": 5}', "'input' must be a string"),
        (b'{"input": "x", "siteId": 3}', "'siteId' must be a string"),
        (b'{"input": "x", "intentFilter": "A"}', "'intentFilter' must be a list"),
        (b'{"input": "x", "intentFilter": [1]}', "'intentFilter' must be a list"),
        (b'{"input": "x", "asrConfidence": true}', "'asrConfidence' must be a number"),
    ],
)
def test_malformed_queries_say_why(payload: bytes, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        hermes.parse_nlu_query(payload)


def test_other_malformed_messages() -> None:
    with pytest.raises(MalformedMessage, match="'stopOnSilence' must be true or false"):
        hermes.parse_start_listening(b'{"stopOnSilence": "yes"}')
    with pytest.raises(MalformedMessage, match="'text' is missing"):
        hermes.parse_tts_say(b'{"siteId": "default"}')
    with pytest.raises(MalformedMessage, match="'volume' must be a number"):
        hermes.parse_tts_say(b'{"text": "hi", "volume": "loud"}')
    with pytest.raises(MalformedMessage, match="no Hermes message"):
        hermes.parse_message("hermes/unknown", b"{}")


def test_dialogue_messages_parse_as_rhasspyhermes_writes_them() -> None:
    from rhasspyhermes.dialogue import (DialogueAction, DialogueContinueSession, DialogueEndSession,
                                        DialogueNotification, DialogueStartSession)

    action = DialogueStartSession(init=DialogueAction(can_be_enqueued=True, text="Which room?", intent_filter=["A"]),
                                  site_id="kitchen", custom_data="cd", lang="en")
    start = hermes.parse_message(Topic.START_SESSION, action.payload())
    assert start == hermes.StartSession(hermes.SessionKind.ACTION, "Which room?", "kitchen", ("A",), "cd", "en",
                                        can_be_enqueued=True)
    note = hermes.parse_start_session(DialogueStartSession(init=DialogueNotification(text="Hi")).payload())
    assert note.kind is hermes.SessionKind.NOTIFICATION and note.text == "Hi" and note.site_id == "default"
    cont = hermes.parse_continue_session(DialogueContinueSession(session_id="s", text="And?", intent_filter=["B"],
                                                                 custom_data="c2").payload())
    assert cont == hermes.ContinueSession("s", "And?", ("B",), "c2")
    told = DialogueContinueSession(session_id="s", send_intent_not_recognized=True).payload()
    assert hermes.parse_continue_session(told).send_intent_not_recognized and not cont.send_intent_not_recognized
    assert hermes.parse_end_session(DialogueEndSession(session_id="s", text="Done.").payload()) == \
        hermes.EndSession("s", "Done.")
    with pytest.raises(MalformedMessage, match="'init' is missing"):
        hermes.parse_start_session(b'{"siteId": "kitchen"}')
    with pytest.raises(MalformedMessage, match="'init' must be an object"):
        hermes.parse_start_session(b'{"init": "action"}')
    with pytest.raises(MalformedMessage, match="init.type must be one of action, notification"):
        hermes.parse_start_session(b'{"init": {"type": "question"}}')
    with pytest.raises(MalformedMessage, match="'sessionId' is missing"):
        hermes.parse_continue_session(b'{"text": "x"}')


def test_for_site_ignores_other_sites() -> None:
    assert hermes.for_site({"siteId": "kitchen"}, "kitchen")
    assert not hermes.for_site({"siteId": "bedroom"}, "kitchen")
    assert hermes.for_site({}, "default") and not hermes.for_site({}, "kitchen")
    assert hermes.for_site(hermes.parse_tts_say(b'{"text": "x", "siteId": "kitchen"}'), "kitchen")
    assert not hermes.for_site(hermes.parse_stop_listening(b'{"siteId": "bedroom"}'), "kitchen")


def test_numbers_must_be_finite() -> None:
    with pytest.raises(ValueError):
        hermes.text_captured("x", float("nan"), 1.0, "default").json()


def test_what_rhasspy_allows_is_read_as_rhasspy_reads_it() -> None:
    """An empty ``intentFilter`` filters nothing (Rhasspy's NLU: ``if query.intent_filter``); a
    volume beyond [0, 1] is a number rhasspyhermes sends as it is: clamped, not refused."""
    assert hermes.parse_nlu_query(NluQuery(input="x", intent_filter=[]).payload()).intent_filter is None
    assert hermes.parse_start_listening(b'{"intentFilter": []}').intent_filter is None
    assert hermes.parse_tts_say(TtsSay(text="hi", volume=2.0).payload()).volume == 1.0
    assert hermes.parse_tts_say(TtsSay(text="hi", volume=-0.5).payload()).volume == 0.0


def test_a_malformed_request_still_says_whom_to_answer() -> None:
    to = hermes.reply_address(b'{"text": 42, "siteId": "kitchen", "id": "t7", "sessionId": "s", "customData": "c"}')
    assert to == hermes.ReplyAddress("kitchen", "t7", "s", "c") and hermes.for_site(to, "kitchen")
    assert hermes.reply_address(b'{"text": null}') == hermes.ReplyAddress("default", None, None, None)
    assert hermes.reply_address(b'{"text": "x", "id": "t8", "sessionId": 9, "customData": {"a": 1}}') == \
        hermes.ReplyAddress("default", "t8", None, None)  # the fields in error are left out, the answer is not
    for unreadable in (b"not json", b"[1]", b'{"id": 7}', b'{"siteId": 1, "id": "x"}'):
        assert hermes.reply_address(unreadable) is None, unreadable


def test_seconds_are_to_the_millisecond() -> None:
    tokens = [AsrToken("on", 0.9, 0, 2, 0.1 + 0.2, 1.5000000000000004)]
    obj = decode(hermes.text_captured("on", 0.9, 3.5600000000000023, "kitchen", tokens=tokens))
    assert obj["seconds"] == 3.56
    assert obj["asrTokens"][0][0]["time"] == {"start": 0.3, "end": 1.5}

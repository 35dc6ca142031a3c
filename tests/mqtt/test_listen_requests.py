"""``voiced run --listen-mode on_request`` answers hermes/asr/startListening and stopListening as
Rhasspy's ASR services do.

Real mosquitto, real Silero, real Whisper tiny.en, a real human reading (hifitts) and a command
spoken by the real Piper joe voice; the recording is paced to the clock and each request is sent
at a known point of it. Speech outside a request is not transcribed; a request sent while
someone is talking hears the rest of what they say; a stopListening for a request that heard
nothing is answered with an empty transcript, so the dialogue manager goes on. A request with a
sessionId is a dialogue manager's: voiced transcribes, the manager asks for the intent
(hermes/nlu/query) and starts and ends its session; a request without one is voiced's own session.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from rhasspyhermes.asr import AsrTextCaptured
from rhasspyhermes.dialogue import DialogueSessionEnded, DialogueSessionStarted
from rhasspyhermes.nlu import NluIntent

from tests.mqtt.conftest import raw_publish
from tests.mqtt.test_wake_daemon import wake_toml
from tests.mqtt.test_whisper_daemon import _spoken
from tests.support import wait_until
from voiced.audio.wav import read_wav, write_wav
from voiced.config import Config

FIRST = "roots_19_morris_0269.wav"  # "they were men having no country to go back to"
LONG = "hartmann_12_fawcett_0088.wav"
"""6.2 s: "it was entering the lion's den possibly only to find a victim before becoming one myself"."""


def _text(payload: bytes) -> AsrTextCaptured:
    return AsrTextCaptured.from_dict(json.loads(payload))


def _paced_config(tmp_path, broker, wav, whisper_model_dir, models) -> Config:
    """The daemon hearing ``wav`` paced to the clock (requests go out at known points of it), no wake words."""
    (tmp_path / "voiced.toml").write_text(wake_toml(broker, f"file:{wav}", whisper_model_dir, models))
    config = Config.from_file(tmp_path / "voiced.toml")
    return dataclasses.replace(config, audio=dataclasses.replace(config.audio, realtime=True),
                               wake=dataclasses.replace(config.wake, models=()))


def _heard(daemon) -> float:
    """Stream time gone by (windows dropped while the machine lagged count too)."""
    return (daemon.counters.get("windows") + daemon.counters.get("windows_dropped")) * 0.1


@pytest.mark.shared
def test_requests_hear_from_their_start_and_a_stop_is_answered(tmp_path, broker, subscriber_factory,
                                                                whisper_model_dir, models, speech) -> None:
    from voiced.pipeline import Daemon, ListenMode

    gap = np.zeros(16000, np.float32)
    hifitts = speech / "hifitts_6097_5min" / "audio"
    first, long = (read_wav(hifitts / name)[0][:, 0] for name in (FIRST, LONG))
    command = _spoken("Turn on the kitchen light.", exact=True)
    # the second command (no session) comes before the long reading: its request goes out after two
    # short transcripts, not after the long one, which a loaded machine may take seconds to decode
    parts = [gap, first, gap, gap, command, gap, gap, gap, gap, command, gap, gap, long, gap, gap]
    starts = np.cumsum([0] + [len(p) for p in parts]) / 16000
    audio = np.concatenate(parts)
    wav = tmp_path / "room.wav"
    write_wav(wav, audio[:, None], 16000)
    config = _paced_config(tmp_path, broker, wav, whisper_model_dir, models)
    sub = subscriber_factory(broker, "hermes/#")
    rhasspy = subscriber_factory(broker, "rhasspy/#")
    daemon = Daemon(config, ListenMode.ON_REQUEST)

    def request(topic: str, session: str | None, **more: object) -> None:
        ids = {"siteId": "kitchen"} | ({"sessionId": session} if session else {})
        raw_publish(broker, f"hermes/asr/{topic}", json.dumps(ids | more))

    def captured(session: str) -> list[AsrTextCaptured]:
        return [c for c in map(_text, sub.payloads("hermes/asr/textCaptured")) if c.session_id == session]

    daemon.start()
    try:
        wait_until(lambda: _heard(daemon) > starts[2] + 0.5, timeout=60, what="the first reader gone by")
        # stopOnSilence: the command, then the request ends; its audio is asked for too (Rhasspy)
        request("startListening", "sl-command", sendAudioCaptured=True)
        wait_until(lambda: captured("sl-command"), timeout=60, what="the command's transcript")
        # the dialogue manager's session: no intent of voiced's own, the manager's query gets one
        [command_text] = captured("sl-command")
        assert not sub.payloads("hermes/intent/HassTurnOn")
        raw_publish(broker, "hermes/nlu/query", json.dumps({"input": command_text.text, "siteId": "kitchen",
                                                            "sessionId": "sl-command", "id": "q1"}))
        [raw] = sub.wait_count(1, "hermes/intent/HassTurnOn")
        assert NluIntent.from_dict(json.loads(raw)).session_id == "sl-command"
        # a request that hears nothing, stopped: answered with an empty transcript in its session
        request("startListening", "sl-nothing")
        request("stopListening", "sl-other")  # another session's stop leaves it open
        request("stopListening", "sl-nothing")
        wait_until(lambda: captured("sl-nothing"), timeout=30, what="the empty transcript")
        assert [c.text for c in captured("sl-nothing")] == [""]
        # a request without a session (an automation's "listen now"): voiced's own session and intent
        wait_until(lambda: _heard(daemon) > starts[5] + 0.5, timeout=60, what="the first command gone by")
        assert _heard(daemon) < starts[9] - 0.3, "the request would come too late for the command: a slower machine than thought"
        request("startListening", None)
        [raw] = sub.wait_count(2, "hermes/intent/HassTurnOn")[1:]
        own = NluIntent.from_dict(json.loads(raw)).session_id
        # a request in the middle of a long reading hears the rest of it, and its stop ends it
        wait_until(lambda: _heard(daemon) > starts[12] + 2.5, timeout=60, what="the long reading under way")
        request("startListening", "sl-late", stopOnSilence=False)
        wait_until(lambda: _heard(daemon) > starts[12] + 4.5, timeout=60, what="more of the long reading")
        request("stopListening", "sl-late")
        wait_until(lambda: captured("sl-late"), timeout=60, what="the late request's transcript")
        [late] = captured("sl-late")
        # what was said from the request on (2.5 s in), not its beginning ("it was entering the lion's den")
        assert len(late.text.split()) >= 2 and "entering" not in late.text.lower(), late.text
        wait_until(lambda: _heard(daemon) >= len(audio) / 16000 - 0.2, timeout=60, what="the end of the recording")
    finally:
        daemon.stop(timeout=2)
    # the first reader, outside any request, was never transcribed; each request's session once
    sessions = [c.session_id for c in map(_text, sub.payloads("hermes/asr/textCaptured"))]
    assert sorted(sessions) == sorted(["sl-command", "sl-nothing", own, "sl-late"])
    assert "kitchen light" in command_text.text.lower() and "kitchen light" in captured(own)[0].text.lower()
    # dialogue sessions: only voiced's own began and ended here, the managers' were left to them
    started = [DialogueSessionStarted.from_dict(json.loads(p)).session_id
               for p in sub.payloads("hermes/dialogueManager/sessionStarted")]
    ended = [DialogueSessionEnded.from_dict(json.loads(p)).session_id
             for p in sub.payloads("hermes/dialogueManager/sessionEnded")]
    assert started == ended == [own]
    assert len(sub.payloads("hermes/intent/HassTurnOn")) == 2  # one per command: none twice
    # the one request that asked got the command's own samples back as WAV, and the others nothing
    [(topic, wav_bytes, _)] = rhasspy.messages
    assert topic == "rhasspy/asr/kitchen/sl-command/audioCaptured"
    back, rate = read_wav(tmp_path / "back.wav", wav_bytes)
    assert rate == 16000 and back.shape[1] == 1
    _assert_holds_whole(read_wav(wav)[0][:, 0], back[:, 0], starts[4], starts[5])


def _assert_holds_whole(audio: np.ndarray, back: np.ndarray, begin: float, end: float) -> None:
    """``back`` is a stretch of ``audio`` (to one 16-bit step: voiced hears 16-bit samples as floats)
    and holds all the sound between ``begin`` and ``end`` seconds."""
    room, got = (np.round(a * 32768).astype(np.int32) for a in (audio, back))
    first = int(np.argmax(np.abs(got) > 300))  # the first sound, to find where the stretch lies
    probe = got[first:first + 400]
    lo = max(0, int((begin - 2.0) * 16000))  # the utterance begins near ``begin``, pre-roll included
    windows = np.lib.stride_tricks.sliding_window_view(room[lo:int((begin + 1.5) * 16000)], len(probe))
    [at] = np.flatnonzero(np.abs(windows - probe).max(axis=1) <= 1) + lo - first
    assert at >= 0 and np.abs(room[at:at + len(got)] - got).max() <= 1
    sound = np.flatnonzero(np.abs(room[int(begin * 16000):int(end * 16000)]) > 300) + int(begin * 16000)
    assert at <= sound[0] and at + len(got) > sound[-1], (at, len(got), sound[[0, -1]])


@pytest.mark.shared
def test_a_listen_now_request_stopped_in_silence_is_a_whole_session_with_its_tags(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models) -> None:
    """An automation's startListening without a sessionId, with a wakewordId and lang, stopped before
    anyone spoke: its empty textCaptured names them (they were dropped: the session's id is only made
    when it is heard), and its sessionEnded has a sessionStarted before it (there was none)."""
    from voiced.pipeline import Daemon, ListenMode

    wav = tmp_path / "room.wav"
    write_wav(wav, np.zeros((16000 * 30, 1), np.float32), 16000)
    config = _paced_config(tmp_path, broker, wav, whisper_model_dir, models)
    sub = subscriber_factory(broker, "hermes/#")
    daemon = Daemon(config, ListenMode.ON_REQUEST)
    daemon.start()
    try:
        wait_until(lambda: daemon.counters.get("windows") > 5, timeout=30, what="the daemon listening")
        raw_publish(broker, "hermes/asr/startListening",
                    json.dumps({"siteId": "kitchen", "wakewordId": "ww-e", "lang": "en"}))
        wait_until(lambda: daemon.counters.get("windows") > 15, timeout=30, what="a second of silence heard")
        raw_publish(broker, "hermes/asr/stopListening", json.dumps({"siteId": "kitchen"}))
        [raw] = sub.wait_count(1, "hermes/dialogueManager/sessionEnded")
    finally:
        daemon.stop(timeout=2)
    [captured] = map(_text, sub.payloads("hermes/asr/textCaptured"))
    assert captured.text == "" and captured.wakeword_id == "ww-e" and captured.lang == "en"
    ended = DialogueSessionEnded.from_dict(json.loads(raw))
    [started] = [DialogueSessionStarted.from_dict(json.loads(p))
                 for p in sub.payloads("hermes/dialogueManager/sessionStarted")]
    assert started.session_id == ended.session_id == captured.session_id and started.lang == "en"
    order = [t for t, _, _ in sub.messages]
    assert order.index("hermes/dialogueManager/sessionStarted") < order.index("hermes/dialogueManager/sessionEnded")


@pytest.mark.shared
def test_a_replaced_request_is_answered_and_one_not_stopping_on_silence_gets_one_transcript(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models, speech) -> None:
    """A dialogue manager's request replaced by another before anything was said was never answered
    (its manager waited for its timeout); one with stopOnSilence false got a textCaptured per
    utterance and an empty one at its stop. Rhasspy's ASR answers each request, and the latter once,
    at its stop, with all it heard."""
    from voiced.pipeline import Daemon, ListenMode

    gap = np.zeros(16000, np.float32)
    first = read_wav(speech / "hifitts_6097_5min" / "audio" / FIRST)[0][:, 0]
    command = _spoken("Turn on the kitchen light.", exact=True)
    parts = [gap, gap, first, gap, gap, command, gap, gap, gap, gap, gap]
    starts = np.cumsum([0] + [len(p) for p in parts]) / 16000
    wav = tmp_path / "room.wav"
    write_wav(wav, np.concatenate(parts)[:, None], 16000)
    config = _paced_config(tmp_path, broker, wav, whisper_model_dir, models)
    sub = subscriber_factory(broker, "hermes/asr/textCaptured")
    daemon = Daemon(config, ListenMode.ON_REQUEST)

    daemon.start()
    try:
        wait_until(lambda: _heard(daemon) > 0.3, timeout=60, what="the daemon listening")
        assert _heard(daemon) < starts[2] - 0.5, "the requests would come after the reader began: a slower machine than thought"
        raw_publish(broker, "hermes/asr/startListening", json.dumps({"siteId": "kitchen", "sessionId": "dm-x"}))
        raw_publish(broker, "hermes/asr/startListening",
                    json.dumps({"siteId": "kitchen", "sessionId": "dm-f", "stopOnSilence": False}))
        wait_until(lambda: _heard(daemon) > starts[6] + 1.5, timeout=60, what="both utterances gone by")
        raw_publish(broker, "hermes/asr/stopListening", json.dumps({"siteId": "kitchen", "sessionId": "dm-f"}))
        sub.wait_count(2, "hermes/asr/textCaptured")
        wait_until(lambda: _heard(daemon) >= len(np.concatenate(parts)) / 16000 - 0.2, timeout=60, what="the end")
    finally:
        daemon.stop(timeout=2)
    captured = [_text(p) for p in sub.payloads("hermes/asr/textCaptured")]
    assert [c.session_id for c in captured] == ["dm-x", "dm-f"]
    assert captured[0].text == ""
    text = captured[1].text.lower()
    assert "country" in text and "kitchen light" in text, text  # the reader's words, then the command
    assert text.index("country") < text.index("kitchen")

"""The daemon end to end: real mosquitto, real audio files, generated transducer, Hermes checks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import time
from pathlib import Path

import numpy as np
import paho.mqtt.publish as mqtt_publish
import pytest
from rhasspyhermes.asr import AsrTextCaptured
from rhasspyhermes.nlu import NluIntent, NluIntentNotRecognized

from tests.modelgen.transducer import make_transducer
from tests.mqtt.conftest import Broker, Gate
from tests.support import wait_until
from voiced.audio.wav import read_wav, write_wav
from voiced.config import Config
from voiced.intentconfig import IntentsSection
from voiced.pipeline import Daemon

TEMPLATES = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences:
          - "turn on [the] {name}"
"""

UTTERANCES = ["swag_06_tompkins_0883.wav", "glitteringplain_15_morris_0108.wav", "roots_19_morris_0269.wav"]


def make_config(tmp_path: Path, broker: Broker, **sections: dict) -> Config:
    (tmp_path / "intents.yaml").write_text(TEMPLATES)
    data = {
        "site": {"id": "kitchen"},
        "audio": {"source": "none"},
        "vad": {"kind": "energy"},
        "intents": {"templates": [str(tmp_path / "intents.yaml")]},
        "mqtt": {"host": broker.host, "port": broker.port, "client_id": "voiced-test",
                 "backoff": {"initial": 0.05, "maximum": 0.5}},
        "daemon": {"state_dir": str(tmp_path / "state"), "stats_interval_s": 0.5},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return Config.from_dict(data, tmp_path / "voiced.toml")


@pytest.fixture
def running(request):
    daemons: list[Daemon] = []

    def start(config: Config) -> Daemon:
        d = Daemon(config)
        d.start()
        daemons.append(d)
        return d

    yield start
    for d in daemons:
        d.stop(timeout=2)


def query(broker: Broker, payload: dict | bytes, topic: str = "hermes/nlu/query") -> None:
    body = payload if isinstance(payload, bytes) else json.dumps(payload)
    mqtt_publish.single(topic, body, qos=1, hostname=broker.host, port=broker.port)


def answered_probe(broker: Broker, sub) -> None:
    """Query until the daemon answers: its subscriptions are live from then on."""
    last = [0.0]

    def answered() -> bool:
        if time.monotonic() - last[0] > 0.3:  # one probe at a time, not one per poll
            last[0] = time.monotonic()
            query(broker, {"input": "probe", "siteId": "kitchen", "id": "probe"})
        return any((t.startswith("hermes/intent/") or t == "hermes/nlu/intentNotRecognized")
                   and json.loads(p).get("id") == "probe" for t, p, _ in list(sub.messages))
    wait_until(answered, what="the daemon answering")
    time.sleep(0.5)  # answers to earlier probes may still be on their way
    sub.messages.clear()


def test_nlu_query_yields_intent_and_survives_garbage(tmp_path, broker, subscriber_factory, running) -> None:
    sub = subscriber_factory(broker, "hermes/#")
    stats = subscriber_factory(broker, "voiced/kitchen/stats")
    daemon = running(make_config(tmp_path, broker))
    assert daemon.client.wait_connected(10)
    answered_probe(broker, sub)
    for garbage in (b"not json", b"[1, 2]", b'{"input": 42, "siteId": "kitchen"}', b'{"siteId": "kitchen"}',
                    b"{" * 70_000):
        query(broker, garbage)
    query(broker, {"input": "turn on the kitchen light", "siteId": "kitchen", "id": "q-1", "sessionId": "s-1"})
    query(broker, {"input": "turn on the kitchen light", "siteId": "garage", "id": "q-other"})
    query(broker, {"input": "make me a sandwich", "siteId": "kitchen", "id": "q-2"})

    sub.wait_for(lambda ms: any(t == "hermes/nlu/intentNotRecognized" and json.loads(p).get("id") == "q-2"
                                for t, p, _ in ms), "the answer to q-2")
    [raw] = sub.payloads("hermes/intent/HassTurnOn")
    intent = NluIntent.from_dict(json.loads(raw))
    assert intent.id == "q-1" and intent.session_id == "s-1" and intent.site_id == "kitchen"
    assert intent.intent.intent_name == "HassTurnOn"
    [slot] = intent.slots
    assert slot.slot_name == "name" and slot.raw_value == "kitchen light" and slot.value["value"] == "kitchen light"
    [raw] = [p for p in sub.payloads("hermes/nlu/intentNotRecognized") if json.loads(p)["id"] != "probe"]
    miss = NluIntentNotRecognized.from_dict(json.loads(raw))
    assert miss.id == "q-2" and miss.input == "make me a sandwich"
    # the other site's query got no answer; the garbage was counted, not fatal
    assert all(json.loads(p).get("id") != "q-other" for t, p, _ in sub.messages if t.startswith("hermes/intent"))
    # one snapshot with all three: a snapshot taken before the queries were handled may be the last one yet
    stats.wait_for(lambda ms: any(_counted(json.loads(p)) for _, p, _ in ms), "malformed, oversized and query counts")
    # with no audio source at all, every stage still beats: the watchdog must not see a stall
    time.sleep(1.0)
    for info in daemon.supervisor.stages():
        assert info.heartbeat_age_s < 0.9 and not info.stalled, info


def test_a_bad_query_with_an_id_is_answered_and_an_empty_filter_filters_nothing(
        tmp_path, broker, subscriber_factory, running) -> None:
    """A sender waits for its answer: an nlu/query it got wrong, when its id can be read, gets
    intentNotRecognized (it used to get nothing, and waited for its timeout). ``intentFilter: []``
    filters nothing, as in Rhasspy (it used to refuse every intent)."""
    sub = subscriber_factory(broker, "hermes/#")
    daemon = running(make_config(tmp_path, broker))
    assert daemon.client.wait_connected(10)
    answered_probe(broker, sub)
    query(broker, {"siteId": "kitchen", "id": "q-bad", "customData": "cd"})  # no input
    query(broker, {"input": 7, "siteId": "garage", "id": "q-other"})
    query(broker, {"input": "turn on the kitchen light", "siteId": "kitchen", "id": "q-all", "intentFilter": [],
                   "wakewordId": "alexa_v0.1", "lang": "en"})
    query(broker, {"input": "turn on the kitchen light", "siteId": "kitchen", "id": "q-none",
                   "intentFilter": ["HassTurnOff"]})
    # 5 kB of shopping list: its intent (an asrToken per word) outgrew MQTT and went unanswered
    query(broker, {"input": "add " + "eggs " * 1000 + "to my shopping list", "siteId": "kitchen", "id": "q-long"})
    sub.wait_for(lambda ms: {"q-bad", "q-all", "q-none", "q-long"} <= {json.loads(p).get("id") for t, p, _ in ms
                                                                       if t != "hermes/nlu/query"}, "the answers")
    misses = {json.loads(p)["id"]: NluIntentNotRecognized.from_dict(json.loads(p))
              for p in sub.payloads("hermes/nlu/intentNotRecognized")}
    assert set(misses) == {"q-bad", "q-none", "q-long"} and misses["q-bad"].custom_data == "cd"
    assert daemon.core.counters.get("intent_texts_too_long") == 1
    [hit] = sub.payloads("hermes/intent/HassTurnOn")
    intent = NluIntent.from_dict(json.loads(hit))
    assert (intent.id, intent.wakeword_id, intent.lang) == ("q-all", "alexa_v0.1", "en"), "handed back, as Rhasspy's NLU"
    assert all(json.loads(p).get("id") != "q-other" for t, p, _ in sub.messages if t != "hermes/nlu/query"), \
        "another site's is not answered"


def _counted(stats: dict) -> bool:
    return (stats["mqtt"].get("malformed", 0) >= 4 and stats["mqtt"].get("dropped_oversized", 0) >= 1
            and stats["counters"].get("queries", 0) >= 2)


def test_discovery_configs_are_retained_valid_json(tmp_path, broker, subscriber_factory, running) -> None:
    daemon = running(make_config(tmp_path, broker))
    assert daemon.client.wait_connected(10)
    wait_until(lambda: daemon.client.stats()["queued"] == daemon.client.stats()["inflight"] == 0,
               what="outbox drained and discovery acknowledged")
    late = subscriber_factory(broker, "homeassistant/#")  # a fresh subscriber sees only retained messages
    late.wait_for(lambda ms: len(ms) >= 4, "retained discovery configs")
    configs = {t: json.loads(p) for t, p, retained in late.messages if retained}
    components = {t.split("/")[1] for t in configs}
    assert {"event", "sensor", "binary_sensor"} <= components
    for cfg in configs.values():
        assert cfg["availability_topic"] == "voiced/kitchen/availability"
    [event] = [c for t, c in configs.items() if t.startswith("homeassistant/event/")]
    assert "HassTurnOn" in event["event_types"]


# -- audio in -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def asr_model(tmp_path_factory) -> Path:
    return make_transducer(tmp_path_factory.mktemp("asr"), "zipformer2", seed=3, int8=True)


@pytest.fixture
def multi_utterance_wav(tmp_path, speech) -> Path:
    gap = np.zeros((24000, 1), np.float32)  # 1.5 s of silence between utterances
    parts = [gap]
    for name in UTTERANCES:
        parts += [read_wav(speech / "hifitts_6097_5min" / "audio" / name)[0], gap]
    path = tmp_path / "three.wav"
    write_wav(path, np.concatenate(parts), 16000)
    return path


def audio_config(tmp_path, broker, wav: Path, model: Path, models_dir: Path) -> Config:
    return make_config(
        tmp_path, broker,
        audio={"source": f"file:{wav}"},
        vad={"kind": "silero", "model": str(models_dir / "silero_vad_v5" / "silero_vad.onnx")},
        asr={"model": str(model), "method": "greedy_search"},
    )


def test_each_utterance_yields_text_captured(tmp_path, broker, subscriber_factory, running,
                                             multi_utterance_wav, asr_model, models) -> None:
    sub = subscriber_factory(broker, "hermes/#")
    running(audio_config(tmp_path, broker, multi_utterance_wav, asr_model, models))
    payloads = sub.wait_count(3, "hermes/asr/textCaptured")
    captured = [AsrTextCaptured.from_dict(json.loads(p)) for p in payloads]
    assert all(c.text and c.site_id == "kitchen" and c.session_id for c in captured)
    assert len({c.session_id for c in captured}) == 3
    assert [json.loads(p)["fromTemplates"] for p in payloads] == [False] * 3  # greedy_search: free text
    started = [json.loads(p)["sessionId"] for p in sub.payloads("hermes/dialogueManager/sessionStarted")]
    assert started == [c.session_id for c in captured]
    for c in captured:
        assert c.asr_tokens and c.asr_tokens[0], "word tokens with times"
        assert " ".join(t.value for t in c.asr_tokens[0]) == c.text


def test_started_while_broker_down_delivers_every_transcript(tmp_path, broker, subscriber_factory, running,
                                                            multi_utterance_wav, asr_model, models) -> None:
    # The daemon reaches the broker through a gate that stays shut (nothing listens: like a broker
    # that is down) until the subscriber is in place, so no backlog message can outrun it.
    gate = Gate(broker)
    config = audio_config(tmp_path, broker, multi_utterance_wav, asr_model, models)
    config = dataclasses.replace(config, mqtt=dataclasses.replace(config.mqtt, port=gate.port))
    daemon = running(config)
    wait_until(lambda: daemon.counters.get("transcripts") == 3, timeout=60, what="3 transcripts while offline")
    assert not daemon.client.connected
    # the stats (every 0.5 s here, every minute by default) are not kept for later: days of them
    # filled the outbox's 10,000 messages and pushed out the intents of the first days
    stats_topic = "voiced/kitchen/stats"
    wait_until(lambda: daemon.counters.get("stats_unsent") >= 3, what="stats due while offline")
    held = [m.topic for m in daemon.client._outbox.peek(limit=1000)]
    assert "hermes/asr/textCaptured" in held and stats_topic not in held
    stats = subscriber_factory(broker, stats_topic)
    sub = subscriber_factory(broker, "hermes/asr/textCaptured")
    gate.open()
    try:
        assert daemon.client.wait_connected(30)
        texts = [json.loads(p)["text"] for p in sub.wait_count(3, "hermes/asr/textCaptured")]
        assert len(texts) == 3 and all(texts)
        stats.wait_count(1, stats_topic)  # and they come again once the broker is there
    finally:
        gate.shut()
        gate.cut()


def test_spoken_command_becomes_an_intent(tmp_path, broker, subscriber_factory, running, speech, asr_model,
                                          models) -> None:
    """Audio → VAD → ASR → hassil → hermes/intent, with a template made from what this model hears."""
    from voiced.asr.recognizer import Recognizer, RecognizerConfig
    from voiced.audio.source import WavSource
    from voiced.listener import Listener, ListenEventType
    from voiced.vad import VadKind, build_endpointer

    wav = speech / "hifitts_6097_5min" / "audio" / UTTERANCES[2]
    vad = models / "silero_vad_v5" / "silero_vad.onnx"
    listener = Listener(Recognizer.load(asr_model, RecognizerConfig()), build_endpointer(VadKind.SILERO, vad))
    with WavSource(wav) as src:
        [heard] = [e.text for e in listener.events(src.chunks()) if e.type is ListenEventType.FINAL]
    words = heard.lower().split()
    assert len(words) >= 3 and all(w.replace("'", "").isalpha() for w in words[:2]), heard
    (tmp_path / "heard.yaml").write_text(
        "language: en\nintents:\n  Heard:\n    data:\n"
        f"      - sentences: [\"{words[0]} {words[1]} {{rest}}\"]\n")
    config = audio_config(tmp_path, broker, wav, asr_model, models)
    config = dataclasses.replace(config, intents=dataclasses.replace(config.intents,
                                                                     templates=(str(tmp_path / "heard.yaml"),)))
    sub = subscriber_factory(broker, "hermes/#")
    running(config)
    [raw] = sub.wait_count(1, "hermes/intent/Heard")
    intent = NluIntent.from_dict(json.loads(raw))
    assert intent.input.lower() == heard.lower()
    [slot] = intent.slots
    assert slot.slot_name == "rest" and slot.raw_value.lower() == " ".join(words[2:])
    ended = [json.loads(p) for p in sub.wait_count(1, "hermes/dialogueManager/sessionEnded")]
    assert ended[-1]["sessionId"] == intent.session_id and ended[-1]["termination"]["reason"] == "nominal"


def test_unmatched_text_goes_to_the_llm_and_comes_back_valid_or_not_recognized(
        tmp_path, broker, subscriber_factory, running, tmp_path_factory) -> None:
    """[llm]: a random-weight model, guided by the schema: whatever it says is a known intent or nothing."""
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed (pip install 'voiced[llm]')")
    from tests.llm.tinymodel import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("llm") / "tiny")
    config = make_config(tmp_path, broker, llm={"model": str(model), "time_budget_s": 5.0, "preload": True})
    sub = subscriber_factory(broker, "hermes/#")
    daemon = running(config)
    assert daemon.client.wait_connected(10)
    answered_probe(broker, sub)  # "probe" itself went to the LLM too
    queries = ["it is too dark in here", "could you do something about the heating", "the kitchen"]
    for i, text in enumerate(queries):
        query(broker, {"input": text, "siteId": "kitchen", "id": f"llm-{i}"})

    def answered(ms) -> list[dict]:
        out = []
        for t, p, _ in ms:
            if t.startswith("hermes/intent/") or t == "hermes/nlu/intentNotRecognized":
                body = json.loads(p)
                if str(body.get("id", "")).startswith("llm-"):
                    out.append((t, body))
        return out

    sub.wait_for(lambda ms: len(answered(ms)) == len(queries), "an answer to every query")
    for topic, body in answered(sub.messages):
        if topic == "hermes/nlu/intentNotRecognized":
            NluIntentNotRecognized.from_dict(body)
            continue
        intent = NluIntent.from_dict(body)
        assert intent.intent.intent_name == "HassTurnOn"  # the only intent the templates know
        assert intent.intent.confidence_score < 1.0  # marked as LLM-derived
        assert {s.slot_name for s in intent.slots} <= {"name"}
    counters = daemon.counters.snapshot()
    assert counters.get("llm_intents", 0) + counters.get("llm_misses", 0) >= len(queries)

    # a command the templates know is answered while the LLM thinks about others (here: is stuck on
    # them): it queued behind each of them for its whole budget
    def answers(prefix: str) -> list[str]:
        return [t for t, body in answered_any(sub.messages) if body.get("id", "").startswith(prefix)]

    pid = daemon.core.models.llm.worker.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for i in range(2):
            query(broker, {"input": "it is cold in here", "siteId": "kitchen", "id": f"stuck-{i}"})
        query(broker, {"input": "turn on the lamp", "siteId": "kitchen", "id": "known"})
        sub.wait_for(lambda ms: answers("known"), "the known command's intent")
        assert answers("known") == ["hermes/intent/HassTurnOn"] and not answers("stuck-")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    sub.wait_for(lambda ms: len(answers("stuck-")) == 2, "the LLM's answers, within their budget")


def answered_any(messages: list) -> list[tuple[str, dict]]:
    """(topic, payload) of every intent and intentNotRecognized among ``messages``."""
    return [(t, json.loads(p)) for t, p, _ in messages
            if t.startswith("hermes/intent/") or t == "hermes/nlu/intentNotRecognized"]


# -- cloud fallback ---------------------------------------------------------------------------


def cloud_section(tmp_path, url: str, **extra) -> dict:
    (tmp_path / "cloud-key").write_text("sk-test\n")
    return {"enabled": True, "base_url": url, "api_key_file": str(tmp_path / "cloud-key"), "asr": True,
            "intent": True, "probe_budget_s": 1.5, "request_timeout_s": 1.5, "local_budget_s": 4.0, **extra}


def test_without_a_local_model_the_cloud_transcribes_and_the_intent_follows(
        tmp_path, broker, subscriber_factory, running, multi_utterance_wav, models) -> None:
    from tests.cloud.conftest import FakeCloud

    cloud = FakeCloud().start()
    try:
        config = make_config(
            tmp_path, broker, audio={"source": f"file:{multi_utterance_wav}"},
            vad={"kind": "silero", "model": str(models / "silero_vad_v5" / "silero_vad.onnx")},
            cloud=cloud_section(tmp_path, cloud.url))
        assert config.asr.model is None
        sub = subscriber_factory(broker, "hermes/#")
        running(config)
        captured = [AsrTextCaptured.from_dict(json.loads(p)) for p in sub.wait_count(3, "hermes/asr/textCaptured")]
        assert [c.text for c in captured] == ["turn on the kitchen light"] * 3
        intents = [NluIntent.from_dict(json.loads(p)) for p in sub.wait_count(3, "hermes/intent/HassTurnOn")]
        assert {i.session_id for i in intents} == {c.session_id for c in captured}
        uploads = [s for s in cloud.seen if s.path == "/v1/audio/transcriptions"]
        assert len(uploads) == 3  # one WAV per utterance, and only because [cloud] asr = true
    finally:
        cloud.stop()


def test_without_a_local_model_an_utterance_the_cloud_cannot_take_is_said_to_be_lost(
        tmp_path, broker, subscriber_factory, running, multi_utterance_wav, models, caplog) -> None:
    """No [asr] model and a cloud that is not to be used (here its key file is missing; an open
    breaker is the same): each utterance ended its session and nothing said why."""
    config = make_config(
        tmp_path, broker, audio={"source": f"file:{multi_utterance_wav}"},
        vad={"kind": "silero", "model": str(models / "silero_vad_v5" / "silero_vad.onnx")},
        cloud=cloud_section(tmp_path, "http://127.0.0.1:9", api_key_file=str(tmp_path / "no-such-key")))
    sub = subscriber_factory(broker, "hermes/#")
    with caplog.at_level(logging.WARNING, logger="voiced.core.engine"):
        daemon = running(config)
        sub.wait_count(3, "hermes/dialogueManager/sessionEnded")
    lost = [r.getMessage() for r in caplog.records if "was not transcribed" in r.getMessage()]
    assert len(lost) == 3 and "no [asr] model" in lost[0] and "no-such-key" in lost[0], lost
    assert daemon.counters.get("utterances_untranscribed") == 3 and not sub.payloads("hermes/asr/textCaptured")


def test_black_holed_cloud_never_holds_up_local_results(
        tmp_path, broker, subscriber_factory, running, multi_utterance_wav, asr_model, models) -> None:
    from tests.cloud.conftest import BlackHole

    hole = BlackHole()
    try:
        config = audio_config(tmp_path, broker, multi_utterance_wav, asr_model, models)
        config = dataclasses.replace(config, cloud=Config.from_dict(
            {"cloud": cloud_section(tmp_path, f"http://127.0.0.1:{hole.port}")}).cloud)
        sub = subscriber_factory(broker, "hermes/#")
        daemon = running(config)  # constructed and started: no network was needed for that
        # the local transcripts arrive while the cloud (asked for the unmatched intents) hangs
        sub.wait_count(3, "hermes/asr/textCaptured")
        misses = sub.wait_count(3, "hermes/nlu/intentNotRecognized")  # the cloud never answered
        assert len(misses) == 3
        assert hole.accepted.is_set(), "the cloud was consulted (and hung) for the unmatched intents"
        stats = daemon.stats()["cloud"]
        assert stats["state"] != "up"
    finally:
        hole.stop()


# -- speech out ----------------------------------------------------------------------------------


def test_tts_say_is_played_on_the_alsa_device_and_answered(tmp_path, broker, subscriber_factory) -> None:
    """voiced run as a process, speaker = the ALSA file plugin: the device gets exactly the voice's audio."""
    import os
    import signal
    import subprocess
    import sys

    from tests.audio.test_alsa import _alsa_conf, needs_alsa  # noqa: F401
    from tests.tts.test_playback import playback_pcm
    from tests.tts.voicegen import decode_id_audio, espeak_config, make_voice

    if _alsa_conf() is None:
        pytest.skip("libasound's alsa.conf not found")
    voice = make_voice(tmp_path / "voice", espeak_config(sample_rate=16000), "ids")
    out = tmp_path / "speaker.raw"
    (tmp_path / "asoundrc").write_text(playback_pcm("spk", out))
    (tmp_path / "intents.yaml").write_text(TEMPLATES)
    (tmp_path / "voiced.toml").write_text(f"""
[site]
id = "kitchen"
[vad]
kind = "energy"
[intents]
templates = ["intents.yaml"]
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
[tts]
voice = "{voice}"
[playback]
device = "spk"
""")
    env = dict(os.environ, ALSA_CONFIG_PATH=f"{_alsa_conf()}:{tmp_path / 'asoundrc'}", HOME=str(tmp_path),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    log = open(tmp_path / "voiced.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "voiced.cli", "run", "--config", str(tmp_path / "voiced.toml")],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        sub = subscriber_factory(broker, "#")
        answered_probe(broker, sub)
        text = "Hello there. The 3 lights are on!"
        query(broker, {"text": text, "siteId": "kitchen", "id": "say-1", "sessionId": "s-9"}, "hermes/tts/say")
        sub.wait_for(lambda ms: any(t == "hermes/tts/sayFinished" for t, _, _ in ms), "sayFinished")
        [done] = [json.loads(p) for p in sub.payloads("hermes/tts/sayFinished")]
        assert done["id"] == "say-1" and done["sessionId"] == "s-9" and done["siteId"] == "kitchen"
        pcm = np.frombuffer(out.read_bytes(), np.int16)
        heard = [d.ids for d in decode_id_audio(pcm)]
        from tests.tts.reference import piper_ids

        assert heard == piper_ids(text)
        speaking = [p for t, p, _ in sub.messages if t.endswith("/speaking")]
        assert b"ON" in speaking and speaking[-1] == b"OFF" or sub.wait_for(
            lambda ms: [p for t, p, _ in ms if t.endswith("/speaking")][-1:] == [b"OFF"], "speaking OFF") is None
        # what cannot be spoken or played is said on hermes/error/…, then answered, as Rhasspy's services do
        from rhasspyhermes.audioserver import AudioPlayError
        from rhasspyhermes.tts import TtsError

        query(broker, {"text": " ", "siteId": "kitchen", "id": "say-2", "sessionId": "s-10"}, "hermes/tts/say")
        mqtt_publish.single("hermes/audioServer/kitchen/playBytes/pb-2", b"RIFF but no WAV", qos=1,
                            hostname=broker.host, port=broker.port)
        sub.wait_for(lambda ms: len([t for t, _, _ in ms if t == "hermes/tts/sayFinished"]) == 2
                     and any(t == "hermes/audioServer/kitchen/playFinished" for t, _, _ in ms), "both answers")
        [tts] = [TtsError.from_dict(json.loads(p)) for p in sub.payloads("hermes/error/tts")]
        assert (tts.context, tts.session_id, tts.site_id) == ("say-2", "s-10", "kitchen") and "empty" in tts.error
        [play] = [AudioPlayError.from_dict(json.loads(p)) for p in sub.payloads("hermes/error/audioServer/play")]
        assert play.context == "pb-2" and play.site_id == "kitchen" and play.error
        order = [t for t, _, _ in sub.messages]
        assert order.index("hermes/error/tts") < len(order) - order[::-1].index("hermes/tts/sayFinished") - 1
        assert order.index("hermes/error/audioServer/play") < order.index("hermes/audioServer/kitchen/playFinished")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


# -- without templates, and with Home Assistant's sentences -------------------------------------


def test_transcription_only_publishes_every_transcript_and_answers_not_recognized(
        tmp_path, broker, subscriber_factory, running, multi_utterance_wav, asr_model, models) -> None:
    """No [intents] at all: a transcription satellite. Nothing crashes, nothing is recognized."""
    config = audio_config(tmp_path, broker, multi_utterance_wav, asr_model, models)
    config = dataclasses.replace(config, intents=IntentsSection())
    sub = subscriber_factory(broker, "hermes/#")
    daemon = running(config)
    assert not daemon.intents.enabled and daemon.recognizer is not None
    assert daemon.recognizer.config.hotwords == ()  # nothing to boost
    captured = [AsrTextCaptured.from_dict(json.loads(p)) for p in sub.wait_count(3, "hermes/asr/textCaptured")]
    assert len({c.session_id for c in captured}) == 3 and all(c.text for c in captured)
    # each utterance: intentNotRecognized with its text, and its dialogue session ended
    misses = [NluIntentNotRecognized.from_dict(json.loads(p))
              for p in sub.wait_count(3, "hermes/nlu/intentNotRecognized")]
    assert [(m.session_id, m.input) for m in misses] == [(c.session_id, c.text) for c in captured]
    ended = [json.loads(p) for p in sub.wait_count(3, "hermes/dialogueManager/sessionEnded")]
    assert {e["sessionId"] for e in ended} == {c.session_id for c in captured}
    assert {e["termination"]["reason"] for e in ended} == {"intentNotRecognized"}
    # a query is answered too, echoing its id
    query(broker, {"input": "turn on the kitchen light", "siteId": "kitchen", "id": "q-7", "sessionId": "s-7"})
    sub.wait_for(lambda ms: any(t == "hermes/nlu/intentNotRecognized" and json.loads(p).get("id") == "q-7"
                                for t, p, _ in ms), "the answer to q-7")
    [raw] = [p for p in sub.payloads("hermes/nlu/intentNotRecognized") if json.loads(p).get("id") == "q-7"]
    answer = NluIntentNotRecognized.from_dict(json.loads(raw))
    assert (answer.id, answer.session_id, answer.input, answer.site_id) == ("q-7", "s-7", "turn on the kitchen light",
                                                                          "kitchen")
    assert not any(t.startswith("hermes/intent/") for t, _, _ in sub.messages)


def test_builtin_home_assistant_sentences_with_a_name_list(tmp_path, broker, subscriber_factory, running) -> None:
    """No template file: [intents] builtin = "home-assistant" and one name list give HA's HassTurnOn."""
    (tmp_path / "voiced.toml").write_text(f"""
[site]
id = "kitchen"
[intents]
builtin = "home-assistant"
site_area = "kitchen"
[intents.lists]
name = ["kitchen light", "porch light"]
area = ["kitchen", "living room"]
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
""")
    config = Config.from_file(tmp_path / "voiced.toml")
    sub = subscriber_factory(broker, "hermes/#")
    daemon = running(config)
    assert daemon.client.wait_connected(10)
    answered_probe(broker, sub)
    query(broker, {"input": "turn on the kitchen light", "siteId": "kitchen", "id": "ha-1", "sessionId": "s-1"})
    query(broker, {"input": "turn off the lights", "siteId": "kitchen", "id": "ha-2"})
    [raw] = sub.wait_count(1, "hermes/intent/HassTurnOn")
    intent = NluIntent.from_dict(json.loads(raw))
    assert (intent.id, intent.session_id, intent.input) == ("ha-1", "s-1", "turn on the kitchen light")
    assert intent.intent.intent_name == "HassTurnOn"
    [slot] = intent.slots
    assert (slot.slot_name, slot.entity, slot.raw_value, slot.value["value"]) == (
        "name", "name", "kitchen light", "kitchen light")
    [raw] = sub.wait_count(1, "hermes/intent/HassTurnOff")
    off = NluIntent.from_dict(json.loads(raw))
    assert off.id == "ha-2" and {s.slot_name: s.value["value"] for s in off.slots} == {"area": "kitchen",
                                                                                        "domain": "light"}
    # SIGHUP: a name added to the list is known from then on, the built-in set still loaded
    toml = (tmp_path / "voiced.toml").read_text().replace('"porch light"]', '"porch light", "garage door"]')
    (tmp_path / "voiced.toml").write_text(toml)
    daemon.reload(Config.from_file(tmp_path / "voiced.toml"))
    query(broker, {"input": "turn on the garage door", "siteId": "kitchen", "id": "ha-3"})
    sub.wait_for(lambda ms: any(json.loads(p).get("id") == "ha-3" for t, p, _ in ms
                                if t == "hermes/intent/HassTurnOn"), "the reloaded name")


@pytest.mark.parametrize("disk", ["full", "read-only"])
def test_a_daemon_restarted_on_a_disk_that_takes_no_writes_starts_and_answers(
        tmp_path, broker, subscriber_factory, running, small_disk, disk) -> None:
    """/var full (a runaway log), or the SD card remounted read-only after errors, with no state directory
    yet (a fresh install) or one from before: voice control goes on, from memory."""
    config = make_config(tmp_path, broker, daemon={"state_dir": str(small_disk.path / "state")})
    if disk == "full":
        running(config).stop(timeout=2)  # a first run leaves its state directory and outbox
        small_disk.fill()
    else:
        small_disk.read_only()
    sub = subscriber_factory(broker, "hermes/#")
    daemon = running(config)
    assert daemon.client.wait_connected(10)
    answered_probe(broker, sub)
    query(broker, {"input": "turn on the kitchen light", "siteId": "kitchen", "id": "q-1"})
    [raw] = sub.wait_count(1, "hermes/intent/HassTurnOn")
    assert NluIntent.from_dict(json.loads(raw)).id == "q-1"

"""``voiced bench fuzz``: generated inputs by the thousand against every outside door of voiced.

MQTT: payloads for every topic the daemon subscribes to, through a real mosquitto into a
running daemon (random bytes, truncated, deep and huge JSON, wrong types, odd but valid values);
afterwards it must still answer a valid query correctly, with the malformed ones counted and
RSS bounded. Files: mutated configs, WAVs, templates, token tables and voice configs through
voiced's own loaders (see ``fuzz_files``). Hypothesis generates the inputs (seeded); it is in
the ``test`` extra. The test suite runs a fixed-seed slice of the same strategies.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from voiced.bench.fuzz_files import (
    VALID_CONFIG,
    Outcome,
    Tally,
    check,
    config_text,
    load_config,
    load_intents,
    load_silero,
    load_tokens,
    load_voice_config,
    load_wake_head,
    load_wav,
    mutate_bytes,
    wav_header,
)

__all__ = ["FILE_KINDS", "MODEL_KINDS", "MQTT_TOPICS", "bench_fuzz", "file_cases", "fuzz_files", "fuzz_mqtt", "mqtt_payloads"]

CASE_TIMEOUT_S = 20

# -- strategies ----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_KEYS = ("input", "text", "siteId", "sessionId", "id", "intentFilter", "volume", "lang", "stopOnSilence",
         "reason", "customData", "sendAudioCaptured", "wakewordId")
_odd = st.one_of(st.just(""), st.just(-1), st.just(-1e308), st.just(float("nan")), st.just("default"),
                 st.just("\u0000\ud7ff\ufeff\u202e"), st.just("x" * 70_000), json_values)
hermes_objects = st.dictionaries(st.sampled_from(_KEYS), _odd, max_size=6)
"""Objects with Hermes keys and wrong, odd or valid values."""


def _encode(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=True).encode("utf-8", "surrogatepass")


mqtt_payloads = st.one_of(
    st.binary(max_size=3000),
    json_values.map(_encode),
    hermes_objects.map(_encode),
    st.tuples(hermes_objects.map(_encode), st.integers(0, 200)).map(lambda p: p[0][:p[1]]),  # cut short
    st.integers(1, 200_000).map(lambda n: b"[" * n + b"]" * n),  # deep
    st.integers(1, 50_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.sampled_from([b'{"input": "' + b"a" * 1_000_000 + b'", "siteId": "default"}',  # 1 MB text
                     b'{"text": "hi", "siteId": "default", "volume": -3}',
                     b'{"text": "", "siteId": ""}', b"\xff\xfe\x00", b"null", b"{}", b"[]"]),
)


def mqtt_topics(site: str) -> list[str]:
    return ["hermes/nlu/query", "hermes/asr/startListening", "hermes/asr/stopListening", "hermes/asr/toggleOn",
            "hermes/asr/toggleOff", "hermes/hotword/toggleOn", "hermes/hotword/toggleOff", "hermes/tts/say",
            f"hermes/audioServer/{site}/playBytes/fuzz", "homeassistant/status", "voiced/arbitration/fuzz/claim"]


MQTT_TOPICS = mqtt_topics("default")


def _config_mutation() -> st.SearchStrategy[tuple[str, str, Any]]:
    keys = [(s, k) for s, keys in VALID_CONFIG.items() for k in keys]
    weird = st.one_of(json_values, st.integers(), st.floats(), st.text(max_size=20), st.booleans(),
                      st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
    unknown = st.tuples(st.sampled_from(list(VALID_CONFIG)), st.text(min_size=1, max_size=10).filter(
        lambda k: all(k not in keys for keys in VALID_CONFIG.values())), weird)
    return st.one_of(st.tuples(*[st.sampled_from(keys)]).flatmap(lambda sk: st.tuples(
        st.just(sk[0][0]), st.just(sk[0][1]), weird)), unknown)


def file_cases(kind: str, speech: Path | None = None, models: Path | None = None) -> st.SearchStrategy[bytes]:
    """Bytes of one mutated file of ``kind``."""
    edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)
    cuts = st.none() | st.integers(0, 400)
    if kind in ("silero", "wake_head"):
        if models is None:
            raise ValueError(f"fuzzing {kind} needs the real models (--models)")
        oww = models / "openwakeword"
        own = (models / "silero_vad_v5" / "silero_vad.onnx" if kind == "silero" else oww / "alexa_v0.1.onnx").read_bytes()
        others = [p.read_bytes() for p in (oww / "melspectrogram.onnx", oww / "hey_mycroft_v0.1.onnx",
                                           models / "silero_vad_v5" / "silero_vad.onnx") if p.read_bytes() != own]
        far = st.lists(st.tuples(st.integers(0, len(own) - 1), st.integers(0, 255)), min_size=1, max_size=40)
        return (st.tuples(far, st.none() | st.integers(0, len(own))).map(lambda e: mutate_bytes(own, e[0], e[1]))
                | st.sampled_from(others)  # a real model of another role
                | st.binary(max_size=500))
    if kind == "config":
        def render(m: tuple[str, str, Any]) -> bytes:
            config = {s: dict(k) for s, k in VALID_CONFIG.items()}
            config.setdefault(m[0], {})[m[1]] = m[2]
            return config_text(config).encode("utf-8", "surrogatepass")
        raw = st.binary(max_size=300) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))
        return _config_mutation().map(render) | raw
    if kind == "wav":
        real = (speech / "jfk" / "jfk.wav").read_bytes()[:48_044] if speech else wav_header(16000, 1, 16, 1, 3200) + bytes(3200)
        headers = st.builds(
            lambda rate, ch, bits, tag, data, fmt, body: wav_header(rate, ch, bits, tag, data, fmt) + body,
            st.one_of(st.integers(0, 2_000_000), st.sampled_from([1, 8000, 16000, 44100, 48000, 1_000_000])),
            st.integers(0, 70_000), st.sampled_from([0, 1, 8, 12, 16, 24, 32, 64, 65535]),
            st.sampled_from([0, 1, 2, 3, 0x55, 0xFFFE, 0xFFFF]), st.integers(0, 2**32 - 1),
            st.sampled_from([0, 2, 14, 16, 18, 40, 4096]), st.binary(max_size=4000))
        return headers | st.tuples(edits, cuts).map(lambda e: mutate_bytes(real, e[0], e[1] and e[1] * 100))
    if kind == "intents":
        valid = ("language: en\nintents:\n  HassTurnOn:\n    data:\n      - sentences: ['turn on [the] {name}']\n"
                 "lists:\n  name:\n    values: ['kitchen light']\n")
        return (st.tuples(edits, cuts).map(lambda e: mutate_bytes(valid.encode(), e[0], e[1]))
                | json_values.map(lambda v: json.dumps({"language": "en", "intents": v}).encode())
                | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
    if kind == "tokens":
        valid = "<blk> 0\n<sos/eos> 1\n<unk> 2\n▁THE 3\nS 4\n"
        lines = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.integers(-5, 10), st.text(max_size=3))),
                         max_size=8).map(lambda rows: "".join(f"{a} {b}\n" for a, b in rows).encode("utf-8", "surrogatepass"))
        return lines | st.tuples(edits, cuts).map(lambda e: mutate_bytes(valid.encode(), e[0], e[1])) | st.binary(max_size=200)
    if kind == "voice_config":
        base = {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"},
                "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
                "phoneme_type": "espeak", "num_speakers": 1, "speaker_id_map": {},
                "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [14]}}
        def mutate(m: tuple[str, Any]) -> bytes:
            doc = json.loads(json.dumps(base))
            section, _, key = m[0].partition(".")
            if key:
                doc.setdefault(section, {})
                if isinstance(doc[section], dict):
                    doc[section][key] = m[1]
            else:
                doc[section] = m[1]
            return json.dumps(doc, allow_nan=True).encode()
        paths = st.sampled_from(["audio.sample_rate", "espeak.voice", "inference.noise_scale", "inference.length_scale",
                                 "phoneme_type", "num_speakers", "speaker_id_map", "phoneme_id_map", "audio",
                                 "phoneme_id_map.a", "language.code"])
        return st.tuples(paths, json_values).map(mutate) | st.binary(max_size=200)
    raise ValueError(f"unknown file kind {kind!r}")


FILE_KINDS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "config": ("voiced.toml", load_config), "wav": ("case.wav", load_wav), "intents": ("intents.yaml", load_intents),
    "tokens": ("tokens.txt", load_tokens), "voice_config": ("voice.onnx.json", load_voice_config),
    "silero": ("silero_vad.onnx", load_silero), "wake_head": ("alexa_v0.1.onnx", load_wake_head),
}
MODEL_KINDS = ("silero", "wake_head")
"""Kinds that need ../shared/models."""


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def fuzz_files(kind: str, n: int, workdir: Path, run_seed: int = 0, speech: Path | None = None,
               strict: bool = False, models: Path | None = None) -> Tally:
    """``n`` cases of ``kind``; ``strict`` raises on the first failure (Hypothesis then shrinks it)."""
    name, load = FILE_KINDS[kind]
    tally = Tally()
    path = workdir / name
    config_keys = tuple(f"{s}.{k}" for s, keys in VALID_CONFIG.items() for k in keys) + tuple(VALID_CONFIG)

    if kind == "wake_head" and models is not None:  # the front end beside the mutated head, as in a real folder
        for front in ("melspectrogram.onnx", "embedding_model.onnx"):
            (workdir / front).write_bytes((models / "openwakeword" / front).read_bytes())

    @seed(run_seed)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(file_cases(kind, speech, models))
    def one(data: bytes) -> None:
        path.write_bytes(data)
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_TIMEOUT_S)
        try:
            outcome, detail = check(load, path, config_keys if kind == "config" else ())
        except _Timeout:
            outcome, detail = Outcome.FAILURE, f"no answer within {CASE_TIMEOUT_S} s"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        tally.add(outcome, detail, repr(data[:300]))
        if strict and outcome in (Outcome.FAILURE, Outcome.UNNAMED_ERROR):
            raise AssertionError(f"{kind}: {outcome.value}: {detail}")

    one()
    return tally


# -- MQTT ----------------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024


def fuzz_mqtt(n: int, run_seed: int, models: Path | None, voice: Path | None) -> dict[str, Any]:
    """``n`` payloads over every subscribed topic into ``voiced run`` (its own process, so its RSS is its
    own); then a valid query must be answered, and its stats must show the malformed ones counted."""
    import subprocess

    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    from voiced.bench.broker import Mosquitto

    models = models.resolve() if models is not None else None  # the config file lives elsewhere
    voice = voice.resolve() if voice is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = Mosquitto(work)
        (work / "intents.yaml").write_text(
            "language: en\nintents:\n  HassTurnOn:\n    data:\n      - sentences: ['turn on [the] {name}']\n"
            "lists:\n  name:\n    values: ['kitchen light']\n")
        wake = (f'[wake]\ndirectory = "{models / "openwakeword"}"\nmodels = ["alexa_v0.1"]\narbitration_group = "fuzz"\n'
                if models is not None else "")
        tts = f'[tts]\nvoice = "{voice}"\nmax_text_chars = 200\nmax_pending = 4\n' if voice is not None else ""
        (work / "voiced.toml").write_text(f"""[intents]
templates = ["{work / 'intents.yaml'}"]
[mqtt]
host = "127.0.0.1"
port = {broker.port}
client_id = "fuzz-daemon"
[daemon]
state_dir = "{work / 'state'}"
stats_interval_s = 0.5
[playback]
device = "null"
{wake}{tts}""")
        log = open(work / "voiced.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "voiced", "run", "--config", str(work / "voiced.toml")],
                                stdout=log, stderr=subprocess.STDOUT)
        answers: list[str] = []
        stats: dict[str, Any] = {}
        got = threading.Event()

        def on_message(client: Any, userdata: Any, msg: Any) -> None:
            try:
                payload = json.loads(msg.payload)
            except ValueError:
                return
            if msg.topic == "voiced/default/stats":
                stats.clear()
                stats.update(payload)
            elif isinstance(payload, dict) and payload.get("id") == "fuzz-final":
                answers.append(msg.topic)
                got.set()

        listener = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fuzz-listener")
        listener.on_message = on_message
        listener.connect("127.0.0.1", broker.port)
        listener.subscribe([("hermes/intent/#", 1), ("hermes/nlu/intentNotRecognized", 1), ("voiced/default/stats", 1)])
        listener.loop_start()
        sender = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fuzz-sender")
        sender.connect("127.0.0.1", broker.port)
        sender.loop_start()
        deadline = time.monotonic() + 120
        while not stats and time.monotonic() < deadline:  # running, subscribed, models loaded
            if proc.poll() is not None:
                log.close()
                raise RuntimeError(f"voiced run exited ({proc.returncode}): "
                                   f"{(work / 'voiced.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        topics = mqtt_topics("default")
        rss_before = _rss_mb(proc.pid)
        rss: list[float] = []  # the daemon's RSS after each fifth of the payloads: bounded or growing?
        sent = {"n": 0}
        t0 = time.monotonic()

        @seed(run_seed)
        @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.sampled_from(topics), mqtt_payloads)
        def one(topic: str, payload: bytes) -> None:
            sender.publish(topic, payload, qos=1).wait_for_publish(10)
            sent["n"] += 1
            if sent["n"] % max(1, n // 5) == 0:
                rss.append(round(_rss_mb(proc.pid), 1))

        one()
        sender.publish("hermes/nlu/query", json.dumps({"input": "turn on the kitchen light", "siteId": "default",
                                                       "id": "fuzz-final"}), qos=1)
        answered = got.wait(120)
        elapsed = time.monotonic() - t0
        time.sleep(1.5)  # a fresh stats message
        rss_after = _rss_mb(proc.pid)
        alive = proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        sender.loop_stop()
        listener.loop_stop()
        broker.close()
    stages = stats.get("stages", {})
    mqtt_stats = stats.get("mqtt", {})
    return {
        "payloads": sent["n"], "topics": len(topics), "seconds": round(elapsed, 1), "process_alive": alive,
        "final_query_answered": answered and answers[:1] == ["hermes/intent/HassTurnOn"],
        "malformed_counted": mqtt_stats.get("malformed", 0), "dropped_oversized": mqtt_stats.get("dropped_oversized", 0),
        "handler_errors": mqtt_stats.get("handler_errors", 0),
        "stage_failures": sum(s.get("failures", 0) for s in stages.values()),
        "stages_stalled": [name for name, s in stages.items() if s.get("stalled")],
        "counters": stats.get("counters", {}),
        "daemon_rss_mb_before": round(rss_before, 1), "daemon_rss_mb_each_fifth": rss,
        "daemon_rss_mb_after": round(rss_after, 1),
    }


def bench_fuzz(speech: Path | None, models: Path | None, voice: Path | None, mqtt_count: int = 10_000,
               file_count: int = 2_000, run_seed: int = 0) -> dict[str, Any]:
    results: dict[str, Any] = {"seed": run_seed}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in FILE_KINDS:
            if kind in MODEL_KINDS and models is None:
                continue
            t0 = time.monotonic()
            tally = fuzz_files(kind, file_count, Path(tmp), run_seed, speech, models=models)
            results[kind] = {**tally.counts, "seconds": round(time.monotonic() - t0, 1), "failures": tally.failures}
            print(json.dumps({kind: tally.counts}), file=sys.stderr, flush=True)
    results["mqtt"] = fuzz_mqtt(mqtt_count, run_seed, models, voice)
    results["failures_total"] = sum(r.get(Outcome.FAILURE.value, 0) + r.get(Outcome.UNNAMED_ERROR.value, 0)
                                    for k, r in results.items() if k in FILE_KINDS)
    return results

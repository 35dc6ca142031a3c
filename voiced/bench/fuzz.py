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
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from voiced.bench.fuzz_cases import FILE_KINDS, MODEL_KINDS, file_cases, fuzz_files, json_values
from voiced.bench.fuzz_files import Outcome

__all__ = ["FILE_KINDS", "MODEL_KINDS", "MQTT_TOPICS", "bench_fuzz", "concrete", "daemon_subscriptions", "file_cases",
           "fuzz_files", "fuzz_mqtt", "mqtt_payloads"]

# -- strategies ----------------------------------------------------------------------------------

_KEYS = ("input", "text", "siteId", "sessionId", "id", "intentFilter", "volume", "lang", "stopOnSilence",
         "reason", "customData", "sendAudioCaptured", "wakewordId")
_odd = st.one_of(st.just(""), st.just(-1), st.just(-1e308), st.just(float("nan")), st.just("default"),
                 st.just("\u0000\ud7ff\ufeff\u202e"), st.just("x" * 70_000), json_values)
hermes_objects = st.dictionaries(st.sampled_from(_KEYS), _odd, max_size=6)
"""Objects with Hermes keys and wrong, odd or valid values."""


def _deep(open_: bytes, close: bytes, n: int) -> bytes:
    return open_ * n + (b"1" if open_.endswith(b":") else b"") + close * n


def _encode(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=True).encode("utf-8", "surrogatepass")


mqtt_payloads = st.one_of(
    st.binary(max_size=3000),
    json_values.map(lambda o: partial(_encode, o)),  # functions: Hypothesis keeps what it generated
    hermes_objects.map(lambda o: partial(_encode, o)),
    st.tuples(hermes_objects.map(_encode), st.integers(0, 200)).map(lambda p: p[0][:p[1]]),  # cut short
    st.integers(1, 200_000).map(lambda n: partial(_deep, b"[", b"]", n)),
    st.integers(1, 50_000).map(lambda n: partial(_deep, b'{"a":', b"}", n)),
    st.sampled_from([b'{"input": "' + b"a" * 1_000_000 + b'", "siteId": "default"}',  # 1 MB text
                     b'{"text": "hi", "siteId": "default", "volume": -3}',
                     b'{"text": "", "siteId": ""}', b"\xff\xfe\x00", b"null", b"{}", b"[]"]),
)


def mqtt_topics(site: str) -> list[str]:
    return ["hermes/nlu/query", "hermes/asr/startListening", "hermes/asr/stopListening", "hermes/asr/toggleOn",
            "hermes/asr/toggleOff", "hermes/hotword/toggleOn", "hermes/hotword/toggleOff", "hermes/tts/say",
            f"hermes/audioServer/{site}/playBytes/fuzz", "homeassistant/status", "voiced/arbitration/fuzz/claim"]


MQTT_TOPICS = mqtt_topics("default")


def daemon_subscriptions(log: Path, client_id: str) -> list[str]:
    """Topic filters ``client_id`` subscribed to, from mosquitto's ``log_type subscribe`` lines
    ("<time>: <client> <qos> <filter>")."""
    out: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[1] == client_id and parts[3] not in out:
            out.append(parts[3])
    return sorted(out)


def concrete(topic_filter: str) -> str:
    """A topic the filter matches (wildcards filled in)."""
    return "/".join("fuzz" if level == "+" else "fuzz/x" if level == "#" else level for level in topic_filter.split("/"))


def _matches(topic_filter: str, topic: str) -> bool:
    import paho.mqtt.client as mqtt

    return bool(mqtt.topic_matches_sub(topic_filter, topic))


# -- MQTT ----------------------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024


def fuzz_mqtt(n: int, run_seed: int, models: Path | None, voice: Path | None, only: str | None = None,
              samples: int = 5) -> dict[str, Any]:
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
        broker = Mosquitto(work, start=False)
        # the broker logs every SUBSCRIBE: the topics fuzzed are the ones the daemon really takes
        broker.conf.write_text(broker.conf.read_text() + f"log_type subscribe\nlog_dest file {work / 'subs.log'}\n")
        broker.start()
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
        subscribed = daemon_subscriptions(work / "subs.log", "fuzz-daemon")
        topics = sorted(set(mqtt_topics("default")) | {concrete(f) for f in subscribed})
        topics = [t for t in topics if only is None or only in t]  # one door at a time (finding a leak)
        rss_before = _rss_mb(proc.pid)
        rss: list[float] = []  # the daemon's RSS after each 1/samples of the payloads: bounded or growing?
        sent = {"n": 0}
        per_topic: dict[str, int] = {}
        t0 = time.monotonic()

        @seed(run_seed)
        @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.sampled_from(topics), mqtt_payloads)
        def one(topic: str, payload: bytes | Callable[[], bytes]) -> None:
            payload = payload() if callable(payload) else payload
            sender.publish(topic, payload, qos=1).wait_for_publish(10)
            sent["n"] += 1
            per_topic[topic] = per_topic.get(topic, 0) + 1
            if sent["n"] % max(1, n // samples) == 0:
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
        "payloads": sent["n"], "topics": len(topics), "payloads_per_topic": dict(sorted(per_topic.items())),
        "subscriptions": subscribed,
        "subscriptions_not_fuzzed": [f for f in subscribed if not any(_matches(f, t) for t in topics)],
        "listed_but_not_subscribed": [t for t in mqtt_topics("default") if not any(_matches(f, t) for f in subscribed)],
        "seconds": round(elapsed, 1), "process_alive": alive,
        "final_query_answered": answered and answers[:1] == ["hermes/intent/HassTurnOn"],
        "malformed_counted": mqtt_stats.get("malformed", 0), "dropped_oversized": mqtt_stats.get("dropped_oversized", 0),
        "handler_errors": mqtt_stats.get("handler_errors", 0),
        "stage_failures": sum(s.get("failures", 0) for s in stages.values()),
        "stages_stalled": [name for name, s in stages.items() if s.get("stalled")],
        "counters": stats.get("counters", {}),
        "daemon_rss_mb_before": round(rss_before, 1), "daemon_rss_mb_samples": rss,
        "daemon_rss_mb_after": round(rss_after, 1),
    }


def bench_fuzz(speech: Path | None, models: Path | None, voice: Path | None, mqtt_count: int = 10_000,
               file_count: int = 2_000, run_seed: int = 0, keep: Path | None = None) -> dict[str, Any]:
    """Every file kind (``file_count`` cases each, in child processes so a crash is counted, not
    fatal), every config key's edge values, then ``mqtt_count`` payloads into a running daemon."""
    from voiced.bench.fuzz_cases import config_sweep
    from voiced.bench.fuzz_isolated import fuzz_files_isolated

    results: dict[str, Any] = {"seed": run_seed}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        sweep = config_sweep(Path(tmp))
        results["config_sweep"] = {**sweep.counts, "seconds": round(time.monotonic() - t0, 1),
                                   "failures": sweep.failures}
        for kind in FILE_KINDS:
            if kind in MODEL_KINDS and models is None:
                continue
            t0 = time.monotonic()
            results[kind] = fuzz_files_isolated(kind, file_count, Path(tmp), run_seed, speech, models, keep)
            results[kind]["seconds"] = round(time.monotonic() - t0, 1)
            print(json.dumps({kind: {k: v for k, v in results[kind].items() if k != "failures"}}), file=sys.stderr,
                  flush=True)
    file_kinds = [k for k in results if k in FILE_KINDS or k == "config_sweep"]
    results["file_cases_total"] = sum(results[k].get(o.value, 0) for k in file_kinds for o in Outcome)
    results["failures_total"] = sum(results[k].get(Outcome.FAILURE.value, 0) + results[k].get(Outcome.UNNAMED_ERROR.value, 0)
                                    for k in file_kinds)
    results["mqtt"] = fuzz_mqtt(mqtt_count, run_seed, models, voice)
    return results

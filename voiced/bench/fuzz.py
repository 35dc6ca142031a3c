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
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from voiced.bench.common import proc_rss_mb
from voiced.bench.fuzz_cases import FILE_KINDS, MODEL_KINDS, file_cases, fuzz_files, json_values, settle_constant_pool
from voiced.bench.fuzz_files import Outcome

__all__ = ["FILE_KINDS", "MODEL_KINDS", "MQTT_TOPICS", "FuzzPart", "FuzzedDaemon", "bench_fuzz", "concrete", "daemon_subscriptions",
           "file_cases", "fuzz_files", "fuzz_mqtt", "mqtt_payloads"]

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


# -- the daemon under fuzz ------------------------------------------------------------------------


DAEMON_CLIENT_ID = "fuzz-daemon"
STATS_TOPIC = "voiced/default/stats"
_START_TIMEOUT_S = 120.0
_INTENTS = ("language: en\nintents:\n  HassTurnOn:\n    data:\n      - sentences: ['turn on [the] {name}']\n"
            "lists:\n  name:\n    values: ['kitchen light']\n")


class FuzzedDaemon:
    """``voiced run`` in its own process (so its RSS is its own and a crash is seen, not shared) beside a
    mosquitto of its own, and the stats it publishes there. ``sections``: more of its TOML (wake, tts,
    asr, wyoming); ``broker_conf``: more of mosquitto's. A context manager: started, then stopped."""

    def __init__(self, work: Path, sections: str = "", broker_conf: str = "") -> None:
        self.work = work
        self.sections = sections
        self.broker_conf = broker_conf
        self.stats: dict[str, Any] = {}
        """The last stats message (``voiced/default/stats``)."""
        self._stats_seen = threading.Condition()
        self._stats_count = 0

    def __enter__(self) -> FuzzedDaemon:
        import subprocess

        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        from voiced.bench.broker import Mosquitto

        work = self.work
        self.broker = Mosquitto(work, start=False)
        self.broker.conf.write_text(self.broker.conf.read_text() + self.broker_conf)
        self.broker.start()
        (work / "intents.yaml").write_text(_INTENTS)
        (work / "voiced.toml").write_text(f"""[intents]
templates = ["{work / 'intents.yaml'}"]
[mqtt]
host = "127.0.0.1"
port = {self.broker.port}
client_id = "{DAEMON_CLIENT_ID}"
[daemon]
state_dir = "{work / 'state'}"
stats_interval_s = 0.5
[playback]
device = "null"
{self.sections}""")
        self.log_path = work / "voiced.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "voiced", "run", "--config", str(work / "voiced.toml")],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self._listener = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fuzz-stats")
        self._listener.on_message = self._on_stats
        self._listener.connect("127.0.0.1", self.broker.port)
        self._listener.subscribe(STATS_TOPIC, 1)
        self._listener.loop_start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self.stats and time.monotonic() < deadline:  # running, subscribed, models loaded
            if self.proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"voiced run exited ({self.proc.returncode}): {self.log_tail()}")
            time.sleep(0.2)
        if not self.stats:
            self.__exit__(None, None, None)
            raise RuntimeError(f"voiced run published no stats within {_START_TIMEOUT_S:g} s: {self.log_tail()}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except Exception:  # noqa: BLE001 - a daemon that will not stop is killed, whatever went wrong
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self._listener.loop_stop()
        self.broker.close()

    def _on_stats(self, client: Any, userdata: Any, msg: Any) -> None:
        try:
            payload = json.loads(msg.payload)
        except ValueError:
            return
        with self._stats_seen:
            self.stats = payload
            self._stats_count += 1
            self._stats_seen.notify_all()

    def fresh_stats(self, timeout: float = 10.0) -> dict[str, Any]:
        """Stats published after this call (what the daemon counted up to now)."""
        with self._stats_seen:
            # the next message may have been snapshotted before the call: wait for the one after it
            wanted = self._stats_count + 2
            self._stats_seen.wait_for(lambda: self._stats_count >= wanted, timeout)
            return self.stats

    def rss_mb(self) -> float:
        return proc_rss_mb(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


# -- MQTT ----------------------------------------------------------------------------------------


def fuzz_mqtt(n: int, run_seed: int, models: Path | None, voice: Path | None, only: str | None = None,
              samples: int = 5) -> dict[str, Any]:
    """``n`` payloads over every subscribed topic into ``voiced run`` (its own process, so its RSS is its
    own); then a valid query must be answered, and its stats must show the malformed ones counted."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    models = models.resolve() if models is not None else None  # the config file lives elsewhere
    voice = voice.resolve() if voice is not None else None
    wake = (f'[wake]\ndirectory = "{models / "openwakeword"}"\nmodels = ["alexa_v0.1"]\narbitration_group = "fuzz"\n'
            if models is not None else "")
    # every sentence gives its memory back (as in the Wyoming part): the Speak door synthesizes any text,
    # and RSS must show leaks, not how far Piper's arena grew for the longest sentence so far
    tts = (f'[tts]\nvoice = "{voice}"\nmax_text_chars = 200\nmax_pending = 4\nrelease_after_phonemes = 1\n'
           if voice is not None else "")
    with tempfile.TemporaryDirectory() as tmp, FuzzedDaemon(
            Path(tmp), wake + tts,
            # the broker logs every SUBSCRIBE: the topics fuzzed are the ones the daemon really takes
            broker_conf=f"log_type subscribe\nlog_dest file {Path(tmp) / 'subs.log'}\n") as daemon:
        answers: list[str] = []
        got = threading.Event()

        def on_message(client: Any, userdata: Any, msg: Any) -> None:
            try:
                payload = json.loads(msg.payload)
            except ValueError:
                return
            if isinstance(payload, dict) and payload.get("id") == "fuzz-final":
                answers.append(msg.topic)
                got.set()

        listener = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fuzz-listener")
        listener.on_message = on_message
        listener.connect("127.0.0.1", daemon.broker.port)
        listener.subscribe([("hermes/intent/#", 1), ("hermes/nlu/intentNotRecognized", 1)])
        listener.loop_start()
        sender = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fuzz-sender")
        sender.connect("127.0.0.1", daemon.broker.port)
        sender.loop_start()
        subscribed = daemon_subscriptions(Path(tmp) / "subs.log", DAEMON_CLIENT_ID)
        topics = sorted(set(mqtt_topics("default")) | {concrete(f) for f in subscribed})
        topics = [t for t in topics if only is None or only in t]  # one door at a time (finding a leak)
        rss_before = daemon.rss_mb()
        rss: list[float] = []  # the daemon's RSS after each 1/samples of the payloads: bounded or growing?
        sent = {"n": 0}
        per_topic: dict[str, int] = {}
        settle_constant_pool()
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
                rss.append(round(daemon.rss_mb(), 1))

        one()
        sender.publish("hermes/nlu/query", json.dumps({"input": "turn on the kitchen light", "siteId": "default",
                                                       "id": "fuzz-final"}), qos=1)
        answered = got.wait(120)
        elapsed = time.monotonic() - t0
        stats = daemon.fresh_stats()
        deadline = time.monotonic() + 120
        while _speech_unanswered(stats) and time.monotonic() < deadline:
            stats = daemon.fresh_stats()  # RSS after: once the speaker has answered every request, not mid-sentence
        rss_after = daemon.rss_mb()
        alive = daemon.alive()
        sender.loop_stop()
        listener.loop_stop()
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


def _speech_unanswered(stats: dict[str, Any]) -> bool:
    """The daemon's speaker still has requests to finish (queued or being said)."""
    speaker = stats.get("speaker") or {}
    return speaker.get("requests", 0) > sum(speaker.get(k, 0) for k in ("completed", "interrupted", "failed"))


class FuzzPart(Enum):
    """What ``voiced bench fuzz`` runs (all of them unless told)."""

    FILES = "files"
    MQTT = "mqtt"
    WYOMING = "wyoming"


def bench_fuzz(speech: Path | None, models: Path | None, voice: Path | None, mqtt_count: int = 10_000,
               file_count: int = 2_000, run_seed: int = 0, keep: Path | None = None, asr_model: Path | None = None,
               wyoming_batches: int = 1_000, parts: frozenset[FuzzPart] = frozenset(FuzzPart)) -> dict[str, Any]:
    """Every file kind (``file_count`` cases each, in child processes so a crash is counted, not
    fatal), every config key's edge values, then ``mqtt_count`` payloads into a running daemon, then
    ``wyoming_batches`` batches of generated clients into its Wyoming port (needs ``asr_model`` and ``speech``)."""
    results: dict[str, Any] = {"seed": run_seed}
    if FuzzPart.FILES in parts:
        results.update(_fuzz_all_files(speech, models, file_count, run_seed, keep))
    if FuzzPart.MQTT in parts:
        results["mqtt"] = fuzz_mqtt(mqtt_count, run_seed, models, voice)
    if FuzzPart.WYOMING in parts:
        from voiced.bench.fuzz_wyoming import WyomingFuzz, fuzz_wyoming

        if asr_model is None or speech is None:
            results["wyoming"] = {"skipped": "needs --asr-model (Whisper, sherpa-onnx layout) and --speech"}
        else:
            results["wyoming"] = fuzz_wyoming(WyomingFuzz(wyoming_batches, asr_model, speech, voice, models, run_seed))
    return results


def _fuzz_all_files(speech: Path | None, models: Path | None, file_count: int, run_seed: int,
                    keep: Path | None) -> dict[str, Any]:
    from voiced.bench.fuzz_cases import config_sweep
    from voiced.bench.fuzz_isolated import fuzz_files_isolated

    results: dict[str, Any] = {}
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
    return results

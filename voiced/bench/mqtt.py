"""``voiced bench mqtt``: end of speech → intent on the broker, and outbox throughput.

Starts its own mosquitto on a free loopback port (or uses --host/--port), plays WAV files
through the daemon paced to the clock, and times each utterance from the end of its speech
(stream time mapped to the wall clock) to the NLU answer arriving at a subscriber.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

__all__ = ["bench_mqtt"]


class _Broker:
    def __init__(self, workdir: Path) -> None:
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        conf = workdir / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n")
        self.proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("mosquitto did not start")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class _Listener:
    """Records (topic, payload, arrival time) of everything under hermes/#."""

    def __init__(self, port: int) -> None:
        self.got: list[tuple[str, dict, float]] = []
        self.ready = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, *_: c.subscribe([("hermes/#", 1), ("bench/#", 1)])
        self.client.on_subscribe = lambda *_: self.ready.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.ready.wait(10)

    def _on_message(self, client, userdata, msg) -> None:
        try:
            payload = json.loads(msg.payload)
        except ValueError:
            payload = {}
        self.got.append((msg.topic, payload, time.monotonic()))

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _outbox_rate(port: int, workdir: Path, n: int, listener: _Listener) -> dict[str, float]:
    from voiced.mqtt.client import MqttClient
    from voiced.mqtt.config import MqttConfig
    from voiced.mqtt.outbox import Outbox, OutboxConfig

    client = MqttClient(MqttConfig(host="127.0.0.1", port=port, client_id="bench-outbox"),
                        Outbox(OutboxConfig(path=str(workdir / "bench-outbox.sqlite3"))))
    client.connect()
    client.wait_connected(10)
    before = sum(1 for t, _, _ in listener.got if t == "bench/outbox")
    t0 = time.monotonic()
    for i in range(n):
        client.publish("bench/outbox", json.dumps({"i": i}))
    queued_s = time.monotonic() - t0
    while sum(1 for t, _, _ in listener.got if t == "bench/outbox") - before < n and time.monotonic() - t0 < 120:
        time.sleep(0.01)
    total = time.monotonic() - t0
    client.close(5)
    return {"messages": n, "enqueue_per_s": round(n / queued_s), "delivered_per_s": round(n / total)}


def bench_mqtt(asr_model: Path, vad_model: Path, files: Sequence[Path], messages: int = 2000) -> dict[str, object]:
    from voiced.audio.source import WavSource
    from voiced.audio.wav import write_wav
    from voiced.config import Config
    from voiced.pipeline import Daemon

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = _Broker(work)
        listener = _Listener(broker.port)
        try:
            gap = np.zeros(32_000, np.float32)
            parts = [gap]
            for f in files:
                with WavSource(f) as src:  # any format, as the daemon would read it
                    parts += [*src.chunks(), gap]
            audio = work / "utterances.wav"
            write_wav(audio, np.concatenate(parts), 16_000)
            (work / "intents.yaml").write_text("language: en\nintents:\n  HassTurnOn:\n    data:\n"
                                              "      - sentences: ['turn on [the] {name}']\n")
            config = Config.from_dict({
                "site": {"id": "bench"}, "audio": {"source": f"file:{audio}", "realtime": True},
                "vad": {"kind": "silero", "model": str(vad_model)},
                "asr": {"model": str(asr_model), "method": "greedy_search"},
                "intents": {"templates": [str(work / "intents.yaml")]},
                "mqtt": {"host": "127.0.0.1", "port": broker.port, "client_id": "bench-daemon"},
                "daemon": {"state_dir": str(work / "state")},
            })
            daemon = Daemon(config)
            daemon.client.connect()
            daemon.client.wait_connected(10)
            ends: list[float] = []
            original = daemon._on_listen_event

            def spy(ev):  # the speech end in stream time, for the wall-clock mapping below
                if ev.type.value == "speech_end":
                    ends.append(ev.end)
                original(ev)

            daemon._on_listen_event = spy
            t0 = time.monotonic()
            daemon.start()
            duration = (sum(len(p) for p in parts)) / 16_000
            deadline = t0 + duration + 15
            answers = lambda: [g for g in listener.got if g[0].startswith("hermes/intent/")
                               or g[0] == "hermes/nlu/intentNotRecognized"]
            while len(answers()) < len(files) and time.monotonic() < deadline:
                time.sleep(0.05)
            daemon.stop()
            latencies = [(arrival - (t0 + end)) * 1000 for (_, _, arrival), end in zip(answers(), ends)]
            rate = _outbox_rate(broker.port, work, messages, listener)
        finally:
            listener.close()
            broker.close()
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return {
        "utterances": len(files),
        "answers": len(latencies),
        "end_of_speech_to_intent_ms_p50": round(float(np.percentile(lat, 50)), 1),
        "end_of_speech_to_intent_ms_p95": round(float(np.percentile(lat, 95)), 1),
        "note": "includes the endpointer's trailing silence (vad.endpoint.min_silence_ms)",
        "min_silence_ms": config.vad.endpoint.min_silence_ms,
        "outbox": rate,
    }

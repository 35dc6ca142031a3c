"""``voiced bench mqtt``: end of speech → intent on the broker, and outbox throughput.

Starts its own mosquitto on a free loopback port (or uses --host/--port), plays WAV files
through the daemon paced to the clock, and times each utterance from the end of its speech
(stream time mapped to the wall clock) to the NLU answer arriving at a subscriber.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from voiced.bench.broker import Mosquitto
from voiced.bench.common import read_samples

__all__ = ["bench_mqtt"]


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


COMMAND_TEMPLATES = """language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["turn on [the] {name}", "switch on [the] {name}"]
  HassTurnOff:
    data:
      - sentences: ["turn off [the] {name}", "switch off [the] {name}"]
  HassNevermind:
    data:
      - sentences: ["never mind", "cancel that"]
lists:
  name:
    values: ["kitchen light", "porch light", "desk lamp", "ceiling fan"]
"""
"""The templates of the spoken-command run (names as a user would list them)."""

COMMANDS = ("Turn on the kitchen light.", "Turn off the porch light.", "Switch on the desk lamp.",
            "Never mind.", "Turn off the ceiling fan.", "Switch off the kitchen light.")


def _utterances_wav(work: Path, parts: list[np.ndarray]) -> Path:
    from voiced.audio.wav import write_wav

    gap = np.zeros(32_000, np.float32)
    audio = work / "utterances.wav"
    write_wav(audio, np.concatenate([gap, *[np.concatenate([p, gap]) for p in parts]]), 16_000)
    return audio


def _daemon_run(work: Path, port: int, listener: _Listener, audio: Path, n: int, asr: dict, vad_model: Path,
                templates: str, endpoint: dict | None = None) -> tuple[list[float], list[tuple[str, str]]]:
    """One daemon over ``audio`` (paced to the clock): per-utterance end of speech → answer in ms,
    and each answer's (topic, text)."""
    from voiced.audio.wav import read_wav
    from voiced.config import Config
    from voiced.core import SpeechEnded
    from voiced.pipeline import Daemon

    (work / "intents.yaml").write_text(templates)
    vad: dict = {"kind": "silero", "model": str(vad_model)}
    if endpoint:
        vad["endpoint"] = endpoint
    config = Config.from_dict({
        "site": {"id": "bench"}, "audio": {"source": f"file:{audio}", "realtime": True}, "vad": vad, "asr": asr,
        "intents": {"templates": [str(work / "intents.yaml")]},
        "mqtt": {"host": "127.0.0.1", "port": port, "client_id": "bench-daemon"},
        "daemon": {"state_dir": str(work / "state")},
    })
    daemon = Daemon(config)
    daemon.client.connect()
    daemon.client.wait_connected(10)
    ends: list[float] = []

    def on_event(ev: object) -> None:  # the speech end in stream time, for the wall-clock mapping below
        if isinstance(ev, SpeechEnded):
            ends.append(ev.end)

    daemon.core.subscribe(on_event)
    first = len(listener.got)
    t0 = time.monotonic()
    daemon.start()
    samples, rate = read_wav(audio)
    deadline = t0 + len(samples) / rate + 15
    answers = lambda: [g for g in listener.got[first:] if g[0].startswith("hermes/intent/")  # noqa: E731
                       or g[0] == "hermes/nlu/intentNotRecognized"]
    while len(answers()) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    daemon.stop()
    got = answers()
    latencies = [(arrival - (t0 + end)) * 1000 for (_, _, arrival), end in zip(got, ends)]
    return latencies, [(topic, str(payload.get("input", ""))) for topic, payload, _ in got]


def _pcts(latencies: list[float]) -> dict[str, float]:
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return {"end_of_speech_to_intent_ms_p50": round(float(np.percentile(lat, 50)), 1),
            "end_of_speech_to_intent_ms_p95": round(float(np.percentile(lat, 95)), 1)}


def bench_mqtt(asr_model: Path, vad_model: Path, files: Sequence[Path], messages: int = 2000,
               voice: Path | None = None, commands: Sequence[str] = COMMANDS,
               threads: int | None = None) -> dict[str, object]:
    """Utterance files through the daemon (greedy transducer); with ``voice`` (a Piper voice) and a
    Whisper ``asr_model``, also spoken commands with intent-aware endpointing on and off, same run.
    ``threads``: the recognizer's ONNX Runtime threads (None: the hardware profile's)."""

    report: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = Mosquitto(work)
        listener = _Listener(broker.port)
        try:
            if files:
                parts = read_samples(files)  # any format, as the daemon would read it
                latencies, got = _daemon_run(
                    work, broker.port, listener, _utterances_wav(work, parts), len(files),
                    {"model": str(asr_model), "method": "greedy_search", **_threads(threads)}, vad_model,
                    "language: en\nintents:\n  HassTurnOn:\n    data:\n      - sentences: ['turn on [the] {name}']\n")
                report.update({"utterances": len(files), "answers": len(latencies), **_pcts(latencies),
                               "note": "includes the endpointer's trailing silence (vad.endpoint.min_silence_ms)"})
            if voice is not None:
                report["spoken_commands"] = _commands_run(work, broker.port, listener, asr_model, vad_model, voice,
                                                          commands, threads)
            report["outbox"] = _outbox_rate(broker.port, work, messages, listener)
        finally:
            listener.close()
            broker.close()
    return report


def _threads(threads: int | None) -> dict[str, int]:
    return {} if threads is None else {"threads": threads}


def _commands_run(work: Path, port: int, listener: _Listener, asr_model: Path, vad_model: Path, voice_path: Path,
                  commands: Sequence[str], threads: int | None = None) -> dict[str, object]:
    """The commands spoken by ``voice`` (noise off), intent-aware endpointing off then on."""
    import soxr

    from voiced.tts import PiperVoice, SynthesisOptions

    voice = PiperVoice.load(voice_path)
    exact = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    parts = [soxr.resample(np.concatenate([c.samples for c in voice.synthesize(text, exact)]).astype(np.float32)
                           / 32768, voice.sample_rate, 16_000).astype(np.float32) for text in commands]
    audio = _utterances_wav(work, parts)
    runs: dict[str, object] = {}
    # (name, matched_silence_ms, whisper_partial_every_s, whisper_decode_at_pause): the daemon's
    # default is the last one (no partials, a decode at each pause)
    setups = (("full_silence", 700, 0.0, False), ("intent_aware_partials_0.2s", 250, 0.2, True),
              ("intent_aware_partials_1s", 250, 1.0, True), ("intent_aware_at_pause", 250, 0.0, True))
    for name, matched, every_s, at_pause in setups:
        asr = {"model": str(asr_model), "whisper_partial_every_s": every_s, "whisper_decode_at_pause": at_pause,
               **_threads(threads)}
        latencies, got = _daemon_run(work, port, listener, audio, len(commands), asr, vad_model, COMMAND_TEMPLATES,
                                     {"min_silence_ms": 700, "matched_silence_ms": matched})
        runs[name] = {**_pcts(latencies), "end_of_speech_to_intent_ms": [round(x) for x in latencies],
                      "answers": [topic.rsplit("/", 1)[-1] for topic, _ in got],
                      "whisper_partial_every_s": every_s, "whisper_decode_at_pause": at_pause}
    answers = [runs[name]["answers"] for name, *_ in setups]  # type: ignore[index]
    runs["same_intents"] = all(a == answers[0] for a in answers)
    runs["commands"] = list(commands)
    runs["asr_threads"] = threads if threads is not None else "hardware profile"
    return runs

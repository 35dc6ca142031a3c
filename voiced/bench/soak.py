"""``voiced bench soak``: hours of audio through the daemon as fast as it goes, and what grows.

The daemon (in this process, a real mosquitto beside it) is fed a loop of real speech from
../shared interleaved with silence and low noise, not paced to the clock, while a client sends
``hermes/nlu/query`` traffic. A sampler records RSS, open file descriptors, threads, the
outbox and CPU; a recorder counts every transcript on the broker. Printed: samples over the
run, RSS growth after warm-up, and transcripts produced vs delivered (goal: equal).

The default is the lightest daemon (energy VAD, a few templates); ``vad_model``, ``builtin`` and
``voice`` make it the one a Home Assistant user runs: Silero, Home Assistant's own sentences (so
Whisper decodes template-aware), and Piper answering ``hermes/tts/say`` traffic on ALSA's ``null``
device, every request counted to its ``sayFinished``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from voiced.audio.source import AudioSource
from voiced.mqtt.hermes_topics import Topic

__all__ = ["LoopSource", "bench_soak"]

CHUNK = 1600  # 100 ms


class LoopSource(AudioSource):
    """A loop of clips (16 kHz float32), each followed by silence and then low noise, for ``hours``
    of audio time; no clock, so the pipeline sets the pace and nothing is dropped."""

    def __init__(self, clips: list[np.ndarray], hours: float, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        parts = []
        for clip in clips:
            parts += [clip, np.zeros(8000, np.float32), (rng.standard_normal(8000) * 0.002).astype(np.float32)]
        self.cycle = np.concatenate(parts)
        self.total = int(hours * 3600 * 16_000)

    @property
    def lossless(self) -> bool:
        return True

    def open(self) -> None:
        pass

    def chunks(self) -> Iterator[np.ndarray]:
        pos = 0
        n = len(self.cycle)
        while pos < self.total and not self.stop_event.is_set():
            start = pos % n
            chunk = self.cycle[start:start + CHUNK]
            if len(chunk) < CHUNK:
                chunk = np.concatenate([chunk, self.cycle[:CHUNK - len(chunk)]])
            pos += CHUNK
            self.stats.samples_out += CHUNK
            self.stats.chunks += 1
            yield chunk

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"loop of {len(self.cycle) / 16_000:.0f} s for {self.total / 16_000 / 3600:.2f} h"

    @property
    def cycle_seconds(self) -> float:
        return len(self.cycle) / 16_000


def _proc() -> dict[str, float]:
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    t = os.times()
    return {"rss_mb": round(int(fields["VmRSS"].split()[0]) / 1024, 2),
            "threads": int(fields["Threads"]), "fds": len(os.listdir("/proc/self/fd")),
            "cpu_s": round(t.user + t.system, 2)}


class _Counter:
    """Counts transcripts by sessionId. It shares the daemon's process, so it keeps 8 bytes per
    transcript (a hash in a numpy buffer), not a set of strings, lest its own growth (about 3 MB
    over 24 hours of audio) be read as the daemon's."""

    def __init__(self, port: int, site: str) -> None:
        self._hashes = np.zeros(1 << 16, np.int64)
        self._n = 0
        self.texts = 0
        self.intents = 0
        self.says_finished = 0
        self.lock = threading.Lock()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="soak-counter")
        self.client.on_connect = lambda c, *_: c.subscribe([(Topic.TEXT_CAPTURED, 1), (Topic.INTENT_ALL, 1),
                                                            (Topic.INTENT_NOT_RECOGNIZED, 1),
                                                            (Topic.TTS_SAY_FINISHED, 1)])
        self.ready = threading.Event()
        self.client.on_subscribe = lambda *_: self.ready.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        self.ready.wait(10)

    def _on_message(self, client: Any, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            if msg.topic == Topic.TEXT_CAPTURED:
                self.texts += 1
                if self._n == len(self._hashes):
                    self._hashes = np.concatenate([self._hashes, np.zeros_like(self._hashes)])
                session = json.loads(msg.payload).get("sessionId", "")
                self._hashes[self._n] = int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(),
                                                       "little", signed=True)
                self._n += 1
            elif msg.topic == Topic.TTS_SAY_FINISHED:
                self.says_finished += 1
            else:
                self.intents += 1

    def counts(self) -> tuple[int, int]:
        """Transcripts received and distinct sessions among them, at one moment."""
        with self.lock:
            return self.texts, int(len(np.unique(self._hashes[:self._n])))

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _replies(speech: Path) -> list[str]:
    """Texts to speak: the hifitts transcripts as printed (commas, capitals), real sentences of many lengths."""
    import csv

    with open(speech / "hifitts_6097_5min" / "transcripts.tsv", encoding="utf-8", newline="") as f:
        return [row["text_no_preprocessing"] for row in csv.DictReader(f, delimiter="\t")]


def _config(work: Path, port: int, asr_model: Path, vad_model: Path | None, builtin: bool,
            voice: Path | None) -> dict[str, Any]:
    intents: dict[str, Any] = {"templates": [str(work / "intents.yaml")]}
    if builtin:
        intents.update(builtin="home-assistant", lists={"name": ["kitchen light", "porch light", "ceiling fan"],
                                                        "area": ["kitchen", "living room", "garage"]})
    config: dict[str, Any] = {
        "site": {"id": "soak"},
        "vad": {"kind": "silero", "model": str(vad_model)} if vad_model else {"kind": "energy"},
        "asr": {"model": str(asr_model), "method": "greedy_search", "threads": 1},
        "intents": intents,
        "mqtt": {"host": "127.0.0.1", "port": port, "client_id": "soak-daemon"},
        "daemon": {"state_dir": str(work / "state"), "stats_interval_s": 30},
    }
    if voice is not None:
        # ALSA's null device takes audio at once; no tail, or the unpaced microphone would lose
        # minutes of audio to half-duplex muting per reply
        config.update(tts={"voice": str(voice), "tail_ms": 0}, playback={"device": "null"})
    return config


STOP_S = 30.0
"""How long the daemon's stages get to stop: one still inside ONNX Runtime when the process exits
aborts it ("terminate called without an active exception"), and a long utterance's last
decode on a busy machine took more than the daemon's default."""


def bench_soak(asr_model: Path, speech: Path, hours: float = 24.0, sample_s: float = 30.0,
               queries_per_s: float = 2.0, warmup_fraction: float = 0.1, vad_model: Path | None = None,
               builtin: bool = False, voice: Path | None = None, says_per_s: float = 0.2) -> dict[str, Any]:
    """``hours`` of audio through the daemon; see the module's docstring. ``vad_model``: Silero (else
    the energy VAD); ``builtin``: Home Assistant's sentences too; ``voice``: a Piper voice answering
    ``says_per_s`` ``hermes/tts/say`` requests a second."""
    from voiced.audio.wav import read_wav
    from voiced.bench.broker import Mosquitto
    from voiced.config import Config
    from voiced.pipeline import Daemon

    clips = [read_wav(p)[0][:, 0] for p in sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = Mosquitto(work)
        (work / "intents.yaml").write_text("language: en\nintents:\n  HassTurnOn:\n    data:\n"
                                           "      - sentences: ['turn on [the] {name}']\n"
                                           "lists:\n  name:\n    values: ['kitchen light', 'porch light']\n")
        config = Config.from_dict(_config(work, broker.port, asr_model, vad_model, builtin, voice))
        replies = _replies(speech) if voice is not None else []
        counter = _Counter(broker.port, "soak")
        daemon = Daemon(config)
        source = LoopSource(clips, hours)
        daemon.core.source = source
        daemon.start()
        sender: mqtt.Client | None = None
        try:
            sender = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="soak-sender")
            sender.connect("127.0.0.1", broker.port)
            sender.loop_start()
            samples: list[dict[str, float]] = []
            t0 = time.monotonic()
            queries, next_query, next_sample = 0, t0, t0
            says, next_say = 0, t0
            total_s = source.total / 16_000
            while True:
                now = time.monotonic()
                # windows heard while the daemon speaks are muted (half-duplex), heard all the same
                heard = (daemon.counters.get("windows") + daemon.counters.get("windows_muted")) * 0.1
                if now >= next_query:  # MQTT traffic meanwhile
                    sender.publish(Topic.NLU_QUERY, json.dumps({"input": "turn on the kitchen light", "siteId": "soak",
                                                                "id": str(queries)}), qos=1)
                    queries += 1
                    next_query += 1 / queries_per_s
                if replies and now >= next_say:
                    sender.publish(Topic.TTS_SAY, json.dumps({"text": replies[says % len(replies)], "siteId": "soak",
                                                              "id": f"say-{says}"}), qos=1)
                    says += 1
                    next_say += 1 / says_per_s
                if now >= next_sample or heard >= total_s - 0.2:
                    sample = {"wall_s": round(now - t0, 1), "audio_h": round(heard / 3600, 3), **_proc(),
                              "outbox": int(daemon.client.stats()["queued"])}
                    samples.append(sample)
                    print(json.dumps(sample), file=sys.stderr, flush=True)
                    next_sample += sample_s
                    if heard >= total_s - 0.2:
                        break
                time.sleep(0.05)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (daemon.client.stats()["queued"] or counter.texts
                                                   < daemon.counters.get("transcripts") or counter.says_finished < says):
                time.sleep(0.2)
            time.sleep(1.0)
            produced = daemon.counters.get("transcripts")
            # at one moment: the daemon's stop ends the utterance under way, and its transcript is
            # produced after this count (it once showed as a duplicate)
            received, delivered = counter.counts()
        finally:  # Ctrl-C or SIGTERM too: a stage left inside ONNX Runtime at exit aborts the process
            daemon.stop(timeout=STOP_S)
            if sender is not None:
                sender.loop_stop()
            counter.close()
            broker.close()
    warm = [s for s in samples if s["audio_h"] >= hours * warmup_fraction] or samples
    wall = samples[-1]["wall_s"] if samples else 0.0
    return {
        "asr_model": str(asr_model), "vad": "silero" if vad_model else "energy", "builtin_intents": builtin,
        "voice": str(voice) if voice else None, "audio_hours": round(total_s / 3600, 3), "wall_s": wall,
        "speed_x_realtime": round(total_s / wall, 1) if wall else None,
        "cpu_s": samples[-1]["cpu_s"] if samples else None,
        "rss_mb_after_warmup": warm[0]["rss_mb"], "rss_mb_end": samples[-1]["rss_mb"],
        "rss_growth_after_warmup_mb": round(samples[-1]["rss_mb"] - warm[0]["rss_mb"], 2),
        "rss_mb_max": max(s["rss_mb"] for s in samples),
        "fds_min_max": [min(s["fds"] for s in warm), max(s["fds"] for s in warm)],
        "threads_min_max": [min(s["threads"] for s in warm), max(s["threads"] for s in warm)],
        "outbox_max": max(s["outbox"] for s in samples),
        "transcripts_produced": produced, "transcripts_delivered": delivered,
        "transcripts_duplicated": received - delivered, "transcripts_lost": produced - delivered,
        "queries_sent": queries, "intent_answers": counter.intents,
        "says_sent": says, "says_finished": counter.says_finished,
        "samples": samples,
    }

"""``voiced bench chaos``: faults during a file-fed run with a real broker, and a count of what was lost.

``voiced run`` (a real process) transcribes real speech paced to the clock and publishes every
transcript (``hermes/asr/textCaptured``, one ``sessionId`` each) through its outbox, while a
recorder with a persistent session (QoS 1) collects them from a mosquitto that keeps its
state on disk. One phase per fault, each a fresh run on the same state directory:

- ``broker_restarts``: mosquitto stopped (SIGTERM: it finishes the packet at hand and saves its state)
  and restarted;
- ``broker_crashes``: mosquitto killed (SIGKILL) and restarted (it saves its state after every change
  here; a broker that acknowledged a message and crashed before saving it would lose it: QoS 1 makes
  the broker responsible from its PUBACK on);
- ``broker_stalls``: mosquitto frozen (SIGSTOP) for seconds, then SIGCONT;
- ``disk_full``: the outbox's file system (a small tmpfs; needs root) filled to the last block, then freed;
- ``daemon_kills``: the broker stopped for a few seconds, the daemon SIGKILLed meanwhile and restarted
  on the same state directory; what its outbox held at the kill (committed, not yet acknowledged)
  must arrive after the restart;
- ``disk_full_kills``: the broker stopped, the daemon restarted on its outbox's disk filled (it holds
  transcripts in memory and in its runtime directory, on another disk) and SIGKILLed once it holds
  one, restarted with the disk freed before or after; what it held must arrive.

Per phase: produced (the daemon's ``transcripts`` counter; for killed runs what they committed; in
``disk_full_kills`` every transcript the daemons' debug logs say they stored, held or not),
delivered (distinct sessionIds), duplicated (QoS 1 is at least once) and lost (goal: 0).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from voiced.bench.broker import Mosquitto
from voiced.bench.smalldisk import fill, mount_small
from voiced.errors import ConfigError
from voiced.mqtt.outbox import HELD_FILE, OUTBOX_FILE

__all__ = ["PHASES", "bench_chaos"]

PHASES = ("broker_restarts", "broker_crashes", "broker_stalls", "disk_full", "daemon_kills", "disk_full_kills")
_SMALL_DISK_PHASES = ("disk_full", "disk_full_kills")
MIN_SECONDS = 8.0
"""Audio per phase, at least: faults are spread from 3 s in to 4 s before its end."""
SITE = "chaos"
TEXT_TOPIC = "hermes/asr/textCaptured"


class _Recorder:
    """A persistent-session QoS 1 subscriber: textCaptured sessionIds and the daemon's stats."""

    def __init__(self, port: int) -> None:
        self.sessions: list[str] = []
        self.stats: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="chaos-recorder", clean_session=False)
        self.client.reconnect_delay_set(0.05, 0.5)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        if not self.subscribed.wait(10):
            raise RuntimeError("the recorder could not subscribe")

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not flags.session_present:
            client.subscribe([(TEXT_TOPIC, 1), (f"voiced/{SITE}/stats", 1)])

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            payload = json.loads(msg.payload)
        except ValueError:
            return
        with self.lock:
            if msg.topic == TEXT_TOPIC:
                self.sessions.append(payload.get("sessionId", ""))
            else:
                self.stats = payload

    def snapshot(self) -> tuple[list[str], dict[str, Any]]:
        with self.lock:
            return list(self.sessions), dict(self.stats)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _speech(speech: Path, seconds: float, work: Path) -> Path:
    """Real read speech from ../shared (hifitts), one second of silence between utterances."""
    from voiced.audio.wav import read_wav, write_wav

    parts, total = [], 0.0
    gap = np.zeros(16_000, np.float32)
    files = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))
    for path in files * 10:
        samples, _ = read_wav(path)
        parts += [samples[:, 0], gap]
        total += len(samples) / 16_000 + 1
        if total >= seconds:
            break
    out = work / f"speech-{int(seconds)}.wav"
    write_wav(out, np.concatenate([gap, *parts])[:, None], 16_000)
    return out


def _pending_sessions(outbox: Path) -> set[str]:
    """The textCaptured messages a killed daemon had committed but not yet seen acknowledged."""
    if not outbox.exists():
        return set()
    db = sqlite3.connect(outbox)
    try:
        rows = db.execute("SELECT payload FROM outbox WHERE topic = ?", (TEXT_TOPIC,)).fetchall()
    finally:
        db.close()
    return {json.loads(bytes(p)).get("sessionId", "") for (p,) in rows}


class _Run:
    def __init__(self, work: Path, state: Path, port: int, asr_model: Path, vad_model: Path | None) -> None:
        self.work, self.state, self.port = work, state, port
        self.runtime = work / "run"  # not on the small disk: as /run is not on the SD card
        self.asr_model, self.vad_model = asr_model, vad_model
        self.log = work / "voiced.log"
        self.proc: subprocess.Popen[bytes] | None = None
        """The daemon running now (killed on the way out, whatever ends the benchmark)."""

    def check_alive(self) -> None:
        """RuntimeError with the end of its log when the daemon ended by itself (a model that does not
        load): the benchmark waited for its stats for ever."""
        code = self.proc.poll() if self.proc is not None else None
        if code is not None and code != -signal.SIGKILL:
            tail = self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""
            raise RuntimeError(f"voiced run exited {code}:\n{tail}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def stored_texts(self, since: int) -> int:
        """textCaptured messages the daemons stored in their outboxes (file or memory) since log offset
        ``since``, as their debug logs say."""
        with open(self.log, "rb") as f:
            f.seek(since)
            return sum(1 for line in f if f"stored {TEXT_TOPIC} ".encode() in line)

    def start(self, audio: Path) -> subprocess.Popen[bytes]:
        vad = (f'kind = "silero"\nmodel = "{self.vad_model}"' if self.vad_model else 'kind = "energy"')
        conf = self.work / "voiced.toml"
        conf.write_text(f"""
[site]
id = "{SITE}"
[audio]
source = "file:{audio}"
realtime = true
[vad]
{vad}
[asr]
model = "{self.asr_model}"
method = "greedy_search"
[mqtt]
host = "127.0.0.1"
port = {self.port}
client_id = "chaos-daemon"
[daemon]
state_dir = "{self.state}"
runtime_dir = "{self.runtime}"
stats_interval_s = 1.0
""")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "voiced", "-vv", "run", "--config", str(conf)],
                                         stdout=log, stderr=subprocess.STDOUT, cwd=self.work)
        return self.proc


def _wait_done(rec: _Recorder, run: _Run, audio_s: float, timeout: float) -> dict[str, Any]:
    """Until the daemon has heard the whole file and its outbox is empty (as its stats say)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.check_alive()
        _, stats = rec.snapshot()
        heard = stats.get("counters", {}).get("windows", 0) * 0.1
        if heard >= audio_s - 1.0 and stats.get("mqtt", {}).get("queued", 1) == 0:
            time.sleep(2.0)  # the last messages reach the recorder
            return rec.snapshot()[1]
        time.sleep(0.5)
    return rec.snapshot()[1]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _phase(kind: str, faults: int, seconds: float, rng: random.Random, run: _Run, broker: Mosquitto,
           rec: _Recorder, audio: Path) -> dict[str, Any]:
    before = set(rec.snapshot()[0])
    log_from = run.log_size()
    events: list[dict[str, Any]] = []
    times = sorted(rng.uniform(3.0, seconds - 4.0) for _ in range(faults))
    proc = run.start(audio)
    t0 = time.monotonic()
    pending: set[str] = set()
    killed_delivered: set[str] = set()
    for at in times:
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        run.check_alive()
        if kind in ("broker_restarts", "broker_crashes"):
            sig = signal.SIGKILL if kind == "broker_crashes" else signal.SIGTERM
            down = rng.uniform(0.3, 2.5)
            broker.stop(sig)
            time.sleep(down)
            broker.start()
            events.append({"at_s": round(at, 1), "signal": signal.Signals(sig).name, "down_s": round(down, 2)})
        elif kind == "broker_stalls":
            stall = rng.uniform(1.0, 4.0)
            broker.signal(signal.SIGSTOP)
            time.sleep(stall)
            broker.signal(signal.SIGCONT)
            events.append({"at_s": round(at, 1), "stalled_s": round(stall, 2)})
        elif kind == "disk_full":
            full = rng.uniform(2.0, 5.0)
            ballast = fill(run.state)
            time.sleep(full)
            ballast.unlink()
            events.append({"at_s": round(at, 1), "full_s": round(full, 2)})
        elif kind == "daemon_kills":
            # the broker away first, so the outbox holds transcripts when the daemon dies
            broker.stop(signal.SIGTERM)
            time.sleep(rng.uniform(2.0, 5.0))
            proc.kill()
            proc.wait(10)
            time.sleep(0.5)  # what the broker had already forwarded reaches the recorder
            killed_delivered |= set(rec.snapshot()[0]) - before
            held = _pending_sessions(run.state / OUTBOX_FILE)
            pending |= held
            events.append({"at_s": round(at, 1), "outbox_held": len(held)})
            broker.start()
            proc = run.start(audio)  # the same file again: a fresh run on the same state directory
            t0 = time.monotonic()
        elif kind == "disk_full_kills":
            # The broker away, the daemon restarted on the full disk: it cannot open its outbox file
            # (SQLite needs room for the -shm index), so it holds every transcript in memory and in
            # the runtime directory; SIGKILLed once it holds one. (A disk filled under a running
            # daemon may still take its appends into the WAL's old pages: nothing would be held.)
            broker.stop(signal.SIGTERM)
            _stop(proc)
            ballast = fill(run.state)
            proc = run.start(audio)
            deadline = time.monotonic() + 30.0
            while not _pending_sessions(run.runtime / HELD_FILE) and time.monotonic() < deadline:
                time.sleep(0.2)
            proc.kill()
            proc.wait(10)
            held = _pending_sessions(run.runtime / HELD_FILE)
            free_first = rng.random() < 0.5
            if free_first:
                ballast.unlink()
            broker.start()
            proc = run.start(audio)
            t0 = time.monotonic()
            if not free_first:
                time.sleep(2.0)  # the restarted daemon starts on the full disk, from memory
                ballast.unlink()
            events.append({"at_s": round(at, 1), "held": len(held),
                           "disk_freed": "before the restart" if free_first else "after the restart"})
    stats = _wait_done(rec, run, _duration(audio), timeout=seconds + 120)
    _stop(proc)
    sessions = [s for s in rec.snapshot()[0] if s not in before]
    delivered = set(sessions)
    produced_last = int(stats.get("counters", {}).get("transcripts", 0))
    last_run = delivered - killed_delivered - pending
    committed = len(killed_delivered | pending) + produced_last
    lost = len(pending - delivered) + max(0, produced_last - len(last_run))
    if kind == "disk_full_kills":  # what was held leaves no trace on the outbox's disk: the logs count it
        committed = run.stored_texts(log_from)
        lost = max(0, committed - len(delivered))
    return {
        "faults": len(events), "events": events,
        "produced": committed, "delivered": len(delivered),
        "duplicated": len(sessions) - len(delivered),
        "lost": lost,
        "outbox_left": stats.get("mqtt", {}).get("queued", None),
        "outbox_write_errors": stats.get("mqtt", {}).get("write_errors", 0),
        "reconnects": stats.get("mqtt", {}).get("reconnects", 0),
    }


def _duration(audio: Path) -> float:
    from voiced.audio.wav import read_wav

    samples, rate = read_wav(audio)
    return len(samples) / rate


def bench_chaos(asr_model: Path, speech: Path, vad_model: Path | None = None, seconds: float = 120.0,
                faults: int = 20, phases: tuple[str, ...] = PHASES, seed: int = 0) -> dict[str, Any]:
    """Each phase: ``seconds`` of real speech with ``faults`` faults (a quarter as many daemon kills)."""
    unknown = [p for p in phases if p not in PHASES]
    if unknown:  # a typo ran no fault and reported nothing lost
        raise ConfigError("--phases", f"unknown {', '.join(unknown)} (known: {', '.join(PHASES)})")
    if seconds < MIN_SECONDS:
        raise ConfigError("--seconds", f"at least {MIN_SECONDS:g}: faults come from 3 s in to 4 s before the end")
    if not (speech / "hifitts_6097_5min" / "audio").is_dir():
        raise ConfigError("--speech", f"{speech} has no hifitts_6097_5min/audio (../shared/speech)")
    rng = random.Random(seed)
    results: dict[str, Any] = {"asr_model": str(asr_model), "seconds_per_phase": seconds, "seed": seed}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        state = work / "state"
        small = os.geteuid() == 0 and mount_small(state)
        broker: Mosquitto | None = None
        rec: _Recorder | None = None
        run: _Run | None = None
        try:
            broker = Mosquitto(work, persistent=True)
            rec = _Recorder(broker.port)
            audio = _speech(speech, seconds, work)
            run = _Run(work, state, broker.port, asr_model, vad_model)
            for kind in phases:
                if kind in _SMALL_DISK_PHASES and not small:
                    results[kind] = {"skipped": "needs root to mount a small tmpfs for the state directory"}
                    continue
                n = max(1, faults // 4) if kind in ("daemon_kills", "disk_full_kills") else faults
                results[kind] = _phase(kind, n, seconds, rng, run, broker, rec, audio)
                print(json.dumps({kind: {k: v for k, v in results[kind].items() if k != "events"}}),
                      file=sys.stderr, flush=True)
        finally:  # Ctrl-C, SIGTERM (see the bench CLI) or a failure: no daemon, broker or mount left behind
            if run is not None:
                run.kill()
            if rec is not None:
                rec.close()
            if broker is not None:
                broker.signal(signal.SIGCONT)  # stopped mid-stall, it would not hear the SIGTERM
                broker.stop()
            if small:
                subprocess.run(["umount", "-l", str(state)], capture_output=True)
    results["lost_total"] = sum(r.get("lost", 0) for r in results.values() if isinstance(r, dict))
    return results

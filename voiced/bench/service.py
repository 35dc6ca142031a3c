"""``voiced bench service``: cold start to READY=1, idle CPU on silence, peak RSS.

Runs ``voiced run`` as systemd would (a real AF_UNIX NOTIFY_SOCKET), with the full model
set and a real-time source of silence, and reads its CPU time and memory from /proc.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from voiced.bench.common import free_port, installed_env, proc_cpu_seconds, proc_peak_rss_mb

__all__ = ["bench_service", "bench_service_starts"]

def bench_service_starts(asr_model: Path, vad_model: Path, idle_seconds: float = 20.0,
                         starts: int = 5, voice: Path | None = None) -> dict[str, object]:
    """``starts`` cold starts one after another: each one's figures and the medians."""
    from voiced.bench.common import median

    runs = [bench_service(asr_model, vad_model, idle_seconds if i == 0 else 1.0, voice) for i in range(starts)]
    return {
        "starts": starts,
        "cold_start_to_ready_ms_p50": median([r["cold_start_to_ready_ms"] for r in runs]),
        "cold_start_to_ready_ms_each": [r["cold_start_to_ready_ms"] for r in runs],
        "cpu_s_until_ready_p50": median([r["cpu_s_until_ready"] for r in runs]),
        "first_run": runs[0],
    }


def bench_service(asr_model: Path, vad_model: Path, idle_seconds: float = 20.0,
                  voice: Path | None = None) -> dict[str, object]:
    """One cold start of ``voiced run`` with these models (``voice``: a Piper voice as well)."""
    from voiced.audio.wav import write_wav

    # the config lives in a temporary directory, against which relative paths would resolve
    asr_model, vad_model = Path(asr_model).resolve(), Path(vad_model).resolve()
    tts = f'[tts]\nvoice = "{Path(voice).resolve()}"\n' if voice is not None else ""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        silence = work / "silence.wav"
        # quiet room noise, not digital zeros: the energy gate must do its real job
        rng = np.random.default_rng(0)
        write_wav(silence, (rng.standard_normal(int(16_000 * (idle_seconds + 30))) * 10).astype(np.int16), 16_000)
        (work / "intents.yaml").write_text("language: en\nintents:\n  HassTurnOn:\n    data:\n"
                                           "      - sentences: ['turn on [the] {name}']\n")
        port = free_port()  # a closed port: no broker, as on a device that is offline
        (work / "voiced.toml").write_text(f"""
[audio]
source = "file:{silence}"
realtime = true
[vad]
kind = "silero"
model = "{vad_model}"
[asr]
model = "{asr_model}"
[intents]
templates = ["intents.yaml"]
{tts}[mqtt]
host = "127.0.0.1"
port = {port}
[daemon]
state_dir = "state"
""")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(work / "notify.sock"))
        notify.settimeout(0.2)
        # bytecode kept as an installed voiced has it (see installed_env): the first start writes it
        env = dict(installed_env(), NOTIFY_SOCKET=str(work / "notify.sock"))
        err = (work / "stderr.txt").open("wb")
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "voiced.cli", "run", "--config", str(work / "voiced.toml")],
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            ready_ms = _wait_ready(notify, proc, work / "stderr.txt", t0)
            start_cpu = proc_cpu_seconds(proc.pid)
            time.sleep(1.0)  # let the first windows settle
            cpu0, w0 = proc_cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle_seconds)
            cpu1, w1 = proc_cpu_seconds(proc.pid), time.monotonic()
            rss = proc_peak_rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
            notify.close()
            err.close()
    return {
        "cold_start_to_ready_ms": round(ready_ms),
        "cpu_s_until_ready": round(start_cpu, 2),
        "idle_cpu_percent_of_one_core": round(100 * (cpu1 - cpu0) / (w1 - w0), 2),
        "idle_seconds": idle_seconds,
        "peak_rss_mb": rss,
        "models": {"asr": str(asr_model), "vad": str(vad_model), "voice": str(voice) if voice is not None else None},
    }


def _wait_ready(notify: socket.socket, proc: subprocess.Popen, stderr: Path, t0: float, limit_s: float = 120.0) -> float:
    """Milliseconds from ``t0`` to READY=1; a daemon that exits first (a bad path, a bad model) is
    reported with the end of its stderr rather than waited for."""
    while time.monotonic() - t0 < limit_s:
        try:
            if b"READY=1" in notify.recv(65536):
                return (time.monotonic() - t0) * 1000
        except TimeoutError:
            pass
        if proc.poll() is not None:
            tail = stderr.read_bytes().decode(errors="replace")[-2000:]
            raise RuntimeError(f"voiced run exited {proc.returncode} before READY=1: {tail}")
    raise RuntimeError(f"voiced run sent no READY=1 within {limit_s:.0f} s")

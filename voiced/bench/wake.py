"""``voiced bench wake``: wake-word detections, false accepts and CPU, voiced beside the openwakeword package.

- ``detections``: each positive clip (``--positive``), padded by silence, and which labels fired
  at the default threshold, with the peak score;
- ``false_accepts``: every other WAV given (``--negative``: real speech), its hours of audio, the
  detections there and false accepts per hour at each threshold of ``--thresholds``, plus the
  peak score per head (the margin the default threshold keeps);
- ``cpu``: CPU seconds per hour of audio for 1 head and for 4 heads, 1 thread, voiced (100 ms
  windows, as the daemon feeds it) beside the ``openwakeword`` package (80 ms chunks, its own
  streaming loop) on the same audio, alternated within each of ``cpu_runs`` runs: medians, and
  the median of each run's ratio. voiced is measured with its streaming front end
  (``frontend.stream.onnx``, what the daemon loads when ``voiced-quantize wake-stream`` made it;
  made here in a temporary folder when the models folder has none and onnx is installed) and
  with the published models (``voiced_published_models``).
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from voiced.bench.common import machine
from voiced.errors import ConfigError

__all__ = ["bench_wake"]

WINDOW = 1600
ONE_HEAD = ["alexa_v0.1"]
FOUR_HEADS = ["alexa_v0.1", "hey_jarvis_v0.1", "hey_mycroft_v0.1", "hey_rhasspy_v0.1"]


def _read(path: Path) -> np.ndarray:
    from voiced.audio.wav import read_wav

    return read_wav(path)[0][:, 0]


@contextmanager
def _with_stream(folder: Path) -> Iterator[tuple[Path, str]]:
    """``folder``, or a temporary copy (links) with the streaming form added when it has none; and which form."""
    from voiced.wake.frontend import FRONTEND_STREAM

    if (folder / FRONTEND_STREAM).is_file():
        yield folder, "stream (in the models folder)"
        return
    try:
        from quantize.progress import set_quiet
        from quantize.wake_stream import write_stream
    except ImportError:
        yield folder, "published models (no frontend.stream.onnx, and onnx is not installed to make one)"
        return
    with tempfile.TemporaryDirectory(prefix="voiced-wake-") as tmp:
        for f in folder.glob("*.onnx"):
            (Path(tmp) / f.name).symlink_to(f.resolve())
        set_quiet(True)
        report = write_stream(tmp)
        yield Path(tmp), f"stream (made for this run; largest difference from the published models {report.max_abs_diff:.1e})"


def _voiced(folder: Path, heads: list[str], audio: np.ndarray, threshold: float,
            stream: bool = True) -> tuple[list, float, float]:
    from voiced.runtime.onnx import SessionOptions
    from voiced.wake import WakeConfig, WakeDetector, WakeModel

    detector = WakeDetector(WakeModel.load(folder, heads, options=SessionOptions(threads=1), stream=stream),
                            WakeConfig(threshold=threshold))
    stream = detector.create_stream()
    found, peak = [], 0.0
    t = time.process_time()
    for i in range(0, len(audio), WINDOW):
        found += list(stream.accept_waveform(audio[i:i + WINDOW]))
        for scores in stream.last_scores:
            peak = max(peak, *scores.values())
    return found, time.process_time() - t, peak


def _reference_cpu(folder: Path, heads: list[str], audio: np.ndarray) -> float:
    import onnxruntime
    from openwakeword.model import Model

    # the package gives its ONNX sessions onnxruntime's defaults; 1 intra-op thread as voiced
    options = onnxruntime.SessionOptions
    original = options.__init__

    def one_thread(self: Any) -> None:
        original(self)
        self.intra_op_num_threads = 1
        self.inter_op_num_threads = 1

    options.__init__ = one_thread  # type: ignore[method-assign]
    try:
        ref = Model(wakeword_models=[str(folder / f"{h}.onnx") for h in heads], inference_framework="onnx",
                    melspec_model_path=str(folder / "melspectrogram.onnx"),
                    embedding_model_path=str(folder / "embedding_model.onnx"))
    finally:
        options.__init__ = original  # type: ignore[method-assign]
    pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype(np.int16)
    t = time.process_time()
    for i in range(0, len(pcm) - 1279, 1280):
        ref.predict(pcm[i:i + 1280])
    return time.process_time() - t


def bench_wake(folder: Path, positives: Sequence[Path], negatives: Sequence[Path], threshold: float = 0.5,
               thresholds: Sequence[float] = (0.3, 0.5, 0.7), cpu_seconds: float = 300.0,
               cpu_runs: int = 3) -> dict[str, Any]:
    """Figures as the module docstring lists them; ``cpu_seconds`` of the negatives are used for CPU."""
    if not folder.is_dir():  # else the error named the temporary copy of it
        raise ConfigError("--models", f"{folder} is not a folder of openWakeWord models")
    with _with_stream(folder) as (models, form):
        report = _bench(models, positives, negatives, threshold, thresholds, cpu_seconds, cpu_runs)
    report["models"], report["embedding_form"] = str(folder), form
    return report


def _bench(folder: Path, positives: Sequence[Path], negatives: Sequence[Path], threshold: float,
           thresholds: Sequence[float], cpu_seconds: float, cpu_runs: int) -> dict[str, Any]:
    pad = np.zeros(16000, np.float32)
    report: dict[str, Any] = {"machine": machine(), "default_threshold": threshold}
    report["detections"] = {}
    for clip in positives:
        found, _, peak = _voiced(folder, FOUR_HEADS, np.concatenate([pad, pad, _read(clip), pad]), threshold)
        report["detections"][clip.name] = {"fired": [d.label for d in found], "peak_score": round(peak, 4)}
    audio = np.concatenate([np.concatenate([_read(f), pad]) for f in negatives]) if negatives else np.zeros(0)
    hours = len(audio) / 16000 / 3600
    fa: dict[str, Any] = {"files": len(negatives), "hours": round(hours, 4)}
    for t in thresholds:
        found, _, peak = _voiced(folder, FOUR_HEADS, audio, t)
        fa[f"threshold_{t}"] = {"false_accepts": len(found), "per_hour": round(len(found) / hours, 2) if hours else None,
                                "labels": sorted({d.label for d in found})}
        fa["peak_score_any_head"] = round(peak, 4)
    report["false_accepts"] = fa
    cpu_audio = audio[:int(cpu_seconds * 16000)]
    audio_h = len(cpu_audio) / 16000 / 3600
    if not len(cpu_audio):  # the CPU is timed on the negatives (it divided by zero without them)
        report["cpu"] = {"skipped": "no --negative audio to time"}
        return report
    report["cpu"] = {"audio_s": round(len(cpu_audio) / 16000, 1), "runs": cpu_runs}
    for name, heads in (("1_head", ONE_HEAD), ("4_heads", FOUR_HEADS)):
        contenders: dict[str, Callable[[], float]] = {
            "voiced": lambda heads=heads: _voiced(folder, heads, cpu_audio, threshold)[1],
            "voiced_published_models": lambda heads=heads: _voiced(folder, heads, cpu_audio, threshold, stream=False)[1],
            "openwakeword": lambda heads=heads: _reference_cpu(folder, heads, cpu_audio),
        }
        entry: dict[str, Any] = {}
        if importlib.util.find_spec("openwakeword") is None:
            entry["openwakeword"] = "not installed"
            del contenders["openwakeword"]
        runs: dict[str, list[float]] = {k: [] for k in contenders}
        for r in range(cpu_runs):
            order = list(contenders) if r % 2 == 0 else list(reversed(contenders))  # alternate: drift hits all alike
            for key in order:
                runs[key].append(contenders[key]() / audio_h)
        for key, values in runs.items():
            entry[f"{key}_cpu_s_per_hour"] = round(statistics.median(values), 1)
        if "openwakeword" in runs:
            for key in ("voiced", "voiced_published_models"):
                ratios = [ours / theirs for ours, theirs in zip(runs[key], runs["openwakeword"])]
                entry[f"ratio_{key}_vs_openwakeword"] = round(statistics.median(ratios), 3)
                entry[f"ratio_{key}_vs_openwakeword_per_run"] = [round(x, 3) for x in ratios]
        report["cpu"][name] = entry
    return report

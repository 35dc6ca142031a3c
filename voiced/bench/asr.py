"""Benchmarks that print JSON figures. Not tests: nothing here asserts a time.

``bench_asr`` measures voiced's recognizer and, in the same run on the same model files
and audio, sherpa-onnx's C++ decoder (``sherpa-onnx`` from the sherpa-onnx-bin package).
"""

from __future__ import annotations

import resource
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from voiced.audio.frames import SAMPLE_RATE, Windower
from voiced.bench.common import installed_env, measure_process, read_samples

__all__ = ["bench_asr", "bench_asr_long"]

T = TypeVar("T")


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 3) if values else 0.0


def _stream_figures(decode_window, finish, audio: list[np.ndarray], window_frames: int,
                    per_window_cpu: list[float] | None = None) -> dict[str, float]:
    """Per-window timing of one engine fed window by window, as the live loop feeds it: wall time
    (what a listener waits) and, in ``per_window_cpu``, this process's CPU time (what other jobs
    on the machine do not inflate)."""
    per_window: list[float] = []
    per_window_cpu = per_window_cpu if per_window_cpu is not None else []
    first_partial: list[float] = []
    final_delay: list[float] = []
    total = 0.0
    cpu0 = time.process_time()
    for samples in audio:
        got_partial = False
        for window in Windower(window_frames).windows([samples]):
            c0, t0 = time.process_time(), time.perf_counter()
            text = decode_window(window.samples)
            dt = time.perf_counter() - t0
            per_window.append(dt)
            per_window_cpu.append(time.process_time() - c0)
            total += dt
            if text and not got_partial:
                got_partial = True
                # live, the partial shows once its window has been heard and decoded
                first_partial.append(window.end + dt)
        t0 = time.perf_counter()
        finish()
        dt = time.perf_counter() - t0
        final_delay.append(dt)
        total += dt
    seconds = sum(len(a) for a in audio) / SAMPLE_RATE
    return {
        "audio_s": round(seconds, 2),
        "rtf": round(total / seconds, 4),
        "window_ms_p50": _pct(per_window, 50),
        "window_ms_p95": _pct(per_window, 95),
        "first_partial_s_p50": round(float(np.median(first_partial)), 3) if first_partial else None,
        "final_delay_ms_p50": _pct(final_delay, 50),
        "final_delay_ms_p95": _pct(final_delay, 95),
        "cpu_s": round(time.process_time() - cpu0, 3),
    }


def _timed(spent: dict[str, float], part: str, fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, adding the CPU time of each call to ``spent[part]``."""
    def call(*args: Any, **kwargs: Any) -> T:
        c0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[part] += time.thread_time() - c0
    return call


def _voiced_stream(model_dir: Path, threads: int, audio: list[np.ndarray], window_frames: int,
                   per_window_cpu: list[float] | None = None) -> dict[str, object]:
    """``_stream_figures`` of voiced's recognizer, with ``cpu_split_s``: where its CPU time went (the
    model's three networks, the features, and the search with its results around them)."""
    from voiced.asr.recognizer import Recognizer, RecognizerConfig

    rec = Recognizer.load(model_dir, RecognizerConfig(threads=threads))
    stream = rec.create_stream()
    networks = ("encoder", "decoder", "joiner")
    spent = dict.fromkeys(("features", *networks, "decode"), 0.0)
    model = rec.model  # the search calls these through the same object: timed on this instance only
    for part in networks:
        setattr(model, f"run_{part}", _timed(spent, part, getattr(model, f"run_{part}")))
    accept = _timed(spent, "features", stream.accept_waveform)

    def decode() -> str:
        rec.decode_all(stream)
        return stream.result.text

    timed_decode, timed_finish = _timed(spent, "decode", decode), _timed(spent, "decode", rec.finish)

    def window(samples: np.ndarray) -> str:
        accept(samples)
        return timed_decode()

    def finish() -> None:
        timed_finish(stream)
        stream.reset()

    figures: dict[str, object] = dict(_stream_figures(window, finish, audio, window_frames, per_window_cpu))
    figures["cpu_split_s"] = {
        **{part: round(spent[part], 3) for part in ("features", *networks)},
        "search_and_results": round(spent["decode"] - sum(spent[part] for part in networks), 3),
    }
    return figures


def _window_growth(model_dir: Path, threads: int, audio: np.ndarray, window_frames: int,
                   runs: int) -> tuple[list[float], list[float]]:
    """Mean per-window CPU ms of a stream at minute 0 of its utterance and of one in its last minute,
    per pass: both are fed the last minute of ``audio`` window by window, alternately (the other one
    first every other window), the late one after the rest of ``audio``. The same speech at the same
    moment on the machine: only the utterance's length differs. (Timing the first and the last
    minute of one pass compared other speech at other moments: on a shared machine that moved the
    ratio by +-40 % between passes.)"""
    from voiced.asr.recognizer import Recognizer, RecognizerConfig

    rec = Recognizer.load(model_dir, RecognizerConfig(threads=threads))
    minute = 60 * SAMPLE_RATE
    lead, tail = audio[:-minute], audio[-minute:]

    def feed(stream, samples: np.ndarray) -> float:
        c0 = time.process_time()
        stream.accept_waveform(samples)
        rec.decode_all(stream)
        _ = stream.result.text  # what the live loop reads after every window
        return time.process_time() - c0

    early_ms, late_ms = [], []
    for _ in range(runs):
        late = rec.create_stream()
        for window in Windower(window_frames).windows([lead]):
            feed(late, window.samples)
        early = rec.create_stream()
        cpu = {"early": 0.0, "late": 0.0}
        windows = list(Windower(window_frames).windows([tail]))
        for i, window in enumerate(windows):
            order = (("early", early), ("late", late)) if i % 2 == 0 else (("late", late), ("early", early))
            for name, stream in order:
                cpu[name] += feed(stream, window.samples)
        early_ms.append(cpu["early"] / len(windows) * 1000)
        late_ms.append(cpu["late"] / len(windows) * 1000)
    return early_ms, late_ms


def _sherpa_stream(files, threads: int, audio: list[np.ndarray], window_frames: int, tail_ms: int) -> dict[str, float]:
    import sherpa_onnx

    rec = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(files.tokens), encoder=str(files.encoder), decoder=str(files.decoder),
        joiner=str(files.joiner), num_threads=threads, decoding_method="greedy_search",
    )
    holder = [rec.create_stream()]

    def window(samples: np.ndarray) -> str:
        s = holder[0]
        s.accept_waveform(SAMPLE_RATE, samples)
        while rec.is_ready(s):
            rec.decode_stream(s)
        return rec.get_result(s)

    def finish() -> None:
        s = holder[0]
        s.accept_waveform(SAMPLE_RATE, np.zeros(tail_ms * SAMPLE_RATE // 1000, np.float32))
        s.input_finished()
        while rec.is_ready(s):
            rec.decode_stream(s)
        holder[0] = rec.create_stream()

    return _stream_figures(window, finish, audio, window_frames)


def bench_asr(model_dir: Path, files: Sequence[Path], threads: int = 1, reference: bool = True,
              window_frames: int = 10, tail_padding_ms: int = 800) -> dict[str, object]:
    """Figures for voiced and sherpa-onnx side by side; ratios are voiced / sherpa-onnx."""
    from voiced.asr.model import ModelFiles

    model_files = ModelFiles.find(model_dir)
    audio = read_samples(files)
    report: dict[str, object] = {
        "model": str(model_dir),
        "encoder": model_files.encoder.name,
        "files": len(files),
        "threads": threads,
        "window_frames": window_frames,
    }
    cmd = [sys.executable, "-m", "voiced.cli", "transcribe", "--vad", "none", "--threads", str(threads),
           "--tail-padding-ms", str(tail_padding_ms), "--asr-model", str(model_dir), *map(str, files)]
    env = installed_env()
    measure_process(cmd, env)  # untimed: files in the page cache, bytecode and optimized graphs kept
    voiced_proc = measure_process(cmd, env)
    report["voiced"] = {"process": voiced_proc, "stream": _voiced_stream(model_dir, threads, audio, window_frames)}
    exe = shutil.which("sherpa-onnx") or str(Path(sys.executable).with_name("sherpa-onnx"))
    if reference and Path(exe).is_file():
        ref_cmd = [exe, f"--tokens={model_files.tokens}", f"--encoder={model_files.encoder}",
                   f"--decoder={model_files.decoder}", f"--joiner={model_files.joiner}",
                   f"--num-threads={threads}", "--decoding-method=greedy_search", *map(str, files)]
        measure_process(ref_cmd)
        sherpa_proc = measure_process(ref_cmd)
        report["sherpa_onnx"] = {
            "process": sherpa_proc,
            "stream": _sherpa_stream(model_files, threads, audio, window_frames, tail_padding_ms),
        }
        report["ratio_cpu_voiced_over_sherpa"] = round(voiced_proc["cpu_s"] / max(sherpa_proc["cpu_s"], 1e-9), 3)
        report["ratio_rtf_voiced_over_sherpa"] = round(
            report["voiced"]["stream"]["rtf"] / max(report["sherpa_onnx"]["stream"]["rtf"], 1e-9), 3)
    elif reference:
        report["sherpa_onnx"] = "not installed (pip install sherpa-onnx sherpa-onnx-bin)"
    report["bench_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return report


def bench_asr_long(model_dir: Path, files: Sequence[Path], threads: int = 1, runs: int = 3,
                   window_frames: int = 10, tail_padding_ms: int = 800) -> dict[str, object]:
    """One long stream (the files joined): whole-process CPU of ``voiced transcribe --vad none`` and of
    sherpa-onnx's C++ binary, alternately ``runs`` times after one untimed run of each (ratio of medians
    and median of ratios), and voiced's per-window CPU time at minute 0 and in the last minute of one
    utterance (``_window_growth``, ``runs`` passes; the median of the passes' ratios)."""
    import tempfile

    from voiced.asr.model import ModelFiles
    from voiced.audio.wav import write_wav
    from voiced.bench.common import median

    model_files = ModelFiles.find(model_dir)
    audio = np.concatenate(read_samples(files))
    with tempfile.TemporaryDirectory() as tmp:
        long = Path(tmp) / "long.wav"
        write_wav(long, audio[:, None], SAMPLE_RATE)
        exe = shutil.which("sherpa-onnx") or str(Path(sys.executable).with_name("sherpa-onnx"))
        ours_cmd = [sys.executable, "-m", "voiced.cli", "transcribe", "--vad", "none", "--threads", str(threads),
                    "--tail-padding-ms", str(tail_padding_ms), "--asr-model", str(model_dir), str(long)]
        ref_cmd = [exe, f"--tokens={model_files.tokens}", f"--encoder={model_files.encoder}",
                   f"--decoder={model_files.decoder}", f"--joiner={model_files.joiner}",
                   f"--num-threads={threads}", "--decoding-method=greedy_search", str(long)]
        env = installed_env()
        # One untimed run of each first: the model files are in the page cache for both, and voiced's
        # bytecode and optimized graphs (voiced.runtime.graph_cache) are kept, as after any earlier start.
        measure_process(ours_cmd, env)
        measure_process(ref_cmd)
        ours, ref = [], []
        for _ in range(runs):
            ours.append(measure_process(ours_cmd, env)["cpu_s"])
            ref.append(measure_process(ref_cmd)["cpu_s"])
    stream = _voiced_stream(model_dir, threads, [audio], window_frames)
    early, late = _window_growth(model_dir, threads, audio, window_frames, max(1, runs))
    return {
        "model": str(model_dir), "encoder": model_files.encoder.name, "audio_s": round(len(audio) / SAMPLE_RATE, 1),
        "threads": threads, "runs": runs,
        "voiced_cpu_s": ours, "sherpa_onnx_cpu_s": ref,
        "ratio_of_medians": round(median(ours) / median(ref), 3),
        "median_of_ratios": round(median([a / b for a, b in zip(ours, ref)]), 3),
        "window_cpu_ms_minute_0": [round(ms, 3) for ms in early],
        "window_cpu_ms_last_minute": [round(ms, 3) for ms in late],
        "last_over_first": round(median([b / a for a, b in zip(early, late)]), 3),
        "stream": stream,
    }

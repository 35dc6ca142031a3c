"""``voiced bench tts``: how soon a Piper voice starts talking, and how fast it synthesizes. Prints JSON.

For each text, with ONNX Runtime on ``threads`` threads (default 1):

- ``streamed``: ``voice.synthesize(text)`` consumed as the speaker consumes it. ``first_audio_s``
  is the time from the call (phonemization included) to the first chunk: the latency a
  listener hears. ``total_s`` is the time to the last chunk; ``rtf`` is total_s / audio_s.
- ``one_call``: the whole text's phoneme ids as one model input (one BOS/EOS around all its
  sentences) in one model call (split voices: the encoder, then one decoder call over all
  frames): what a TTS without streaming does before any sound comes out.
- ``first_audio_vs_one_call``: streamed first_audio_s / one_call total_s.

Each figure is the median of ``repeats`` runs after one warm-up run. Nothing here asserts
a time. ``--memory``: RSS kept and CPU with and without each sentence's memory given back
(``voiced.bench.tts_memory``). Realistic-size voices for machines without real weights:
``python -m tests.tts.voicegen OUT --kind vits --size medium [--split] --config VOICE.onnx.json``.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from voiced.bench.common import cpu_model, median

__all__ = ["TEXTS", "bench_tts", "bench_voice"]

TEXTS: dict[str, str] = {
    "short": "Turn on the kitchen lights.",
    "three_sentences": ("The weather today is mostly sunny, with a high of twenty two degrees. In the evening, "
                        "clouds will move in from the west. Tomorrow, expect light rain in the morning."),
    "long": ("Here is your morning briefing. It is Tuesday, the fourth of March, and the time is seven fifteen. "
             "Outside it is nine degrees and cloudy, with rain expected around noon. You have three meetings "
             "today; the first one starts at nine thirty in the small conference room. The dishwasher finished "
             "its cycle overnight, and the front door is locked. Your package from the hardware store should "
             "arrive this afternoon. Have a good day!"),
}


def _streamed(voice: Any, text: str) -> tuple[float, float, float, int]:
    """(time to first chunk, time to last, seconds of audio, chunks) of one synthesize() run."""
    start = time.perf_counter()
    first, audio_s, chunks = None, 0.0, 0
    for chunk in voice.synthesize(text):
        if first is None:
            first = time.perf_counter() - start
        audio_s += chunk.duration
        chunks += 1
    return first or 0.0, time.perf_counter() - start, audio_s, chunks


def _one_call_ids(voice: Any, text: str) -> list[int]:
    from voiced.tts.phonemes import phonemes_to_ids

    phonemes: list[str] = []
    for sentence in voice.phonemize(text):
        if phonemes and sentence:
            phonemes.append(" ")
        phonemes.extend(sentence)
    return phonemes_to_ids(phonemes, voice.config.phoneme_id_map, voice.config.phoneme_map)


def _one_call(voice: Any, ids: list[int]) -> tuple[float, float]:
    start = time.perf_counter()
    audio = voice.synthesize_ids(ids)
    return time.perf_counter() - start, len(audio) / voice.sample_rate


def bench_voice(path: Path, threads: int = 1, repeats: int = 3,
                texts: Mapping[str, str] = TEXTS, reference: bool = False,
                asr_model: Path | None = None) -> dict[str, Any]:
    """Figures for one voice (see the module docstring); ``reference``: piper-tts side by side."""
    from voiced.runtime.onnx import SessionOptions
    from voiced.tts.config import VoiceSettings
    from voiced.tts.voice import PiperVoice

    settings = VoiceSettings(session=SessionOptions(threads=threads))
    start = time.perf_counter()
    voice = PiperVoice.load(path, settings=settings)
    load_s = time.perf_counter() - start
    out: dict[str, Any] = {
        "voice": str(path), "sample_rate": voice.sample_rate, "load_s": round(load_s, 3),
        "decoder": (f"split: chunks of {settings.chunk_frames} frames, {settings.chunk_padding} padding"
                    if voice.streaming else "whole model"),
        "texts": {},
    }
    ref = None
    if reference:
        from voiced.bench import tts_reference

        ref = tts_reference.load_piper(Path(path), threads)
    for name, text in texts.items():
        ids = _one_call_ids(voice, text)
        _streamed(voice, text)  # warm-up: first runs allocate
        _one_call(voice, ids)
        runs = [_streamed(voice, text) for _ in range(repeats)]
        calls = [_one_call(voice, ids) for _ in range(repeats)]
        first, total = median([r[0] for r in runs]), median([r[1] for r in runs])
        audio_s, one_call_s, one_audio_s = runs[0][2], median([c[0] for c in calls]), calls[0][1]
        out["texts"][name] = {
            "chars": len(text),
            "sentences": len(voice.sentences(text)),
            "streamed": {"first_audio_s": first, "total_s": total, "audio_s": round(audio_s, 3),
                         "chunks": runs[0][3], "rtf": round(total / audio_s, 4) if audio_s else None},
            "one_call": {"total_s": one_call_s, "audio_s": round(one_audio_s, 3),
                         "rtf": round(one_call_s / one_audio_s, 4) if one_audio_s else None},
            "first_audio_vs_one_call": round(first / one_call_s, 3) if one_call_s else None,
        }
        if ref is not None:
            theirs = tts_reference.piper_text_figures(ref, text, repeats)
            out["texts"][name]["piper_tts"] = theirs
            out["texts"][name]["first_audio_vs_piper_tts"] = round(first / theirs["first_audio_s"], 3)
            out["texts"][name]["rtf_vs_piper_tts"] = round(total / theirs["total_s"], 3)
    if ref is not None:
        out["processes"] = {name: tts_reference.processes(Path(path), text, threads) for name, text in texts.items()}
    if asr_model is not None:
        from voiced.bench import tts_reference

        out["round_trip"] = tts_reference.round_trip(Path(path), asr_model, threads=threads)
    return out


def bench_tts(voices: Sequence[Path], threads: int = 1, repeats: int = 3,
              texts: Mapping[str, str] = TEXTS, reference: bool = False,
              asr_model: Path | None = None, memory_rounds: int = 0) -> dict[str, Any]:
    """Figures for each voice, with the machine they were taken on; ``memory_rounds``: also what each
    voice keeps in RSS with and without giving every sentence's memory back
    (``voiced.bench.tts_memory``), that many rounds."""
    import onnxruntime

    out = {
        "machine": {"cpu": cpu_model(), "python": platform.python_version(),
                    "onnxruntime": onnxruntime.__version__, "threads": threads, "repeats": repeats},
        "date": time.strftime("%Y-%m-%d"),
        "voices": [bench_voice(Path(v), threads, repeats, texts, reference, asr_model) for v in voices],
    }
    if memory_rounds:
        from voiced.bench.tts_memory import bench_tts_memory

        out["memory"] = [bench_tts_memory(Path(v), rounds=memory_rounds, threads=threads) for v in voices]
    return out

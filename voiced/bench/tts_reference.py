"""The reference side of ``voiced bench tts``: piper-tts 1.8 on the same voice, and the round trip through ASR.

- ``piper_tts`` per text: piper-tts's own ``PiperVoice.synthesize`` (one chunk per sentence)
  on an ONNX Runtime session with the same thread count: first audio, total, RTF.
- ``processes``: whole-process CPU seconds and peak RSS of ``voiced say --output`` and of the
  same synthesis through piper-tts, each in its own process (loading included).
- ``round_trip``: the voice's speech (its default noise) for :data:`SENTENCES`, from voiced and
  from piper-tts, transcribed by voiced's Whisper recognizer; WER of both against the text.

piper-tts is a reference, imported only here (the ``test`` extra installs it).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from voiced.bench.common import measure_process, median

__all__ = ["SENTENCES", "load_piper", "piper_streamed", "processes", "round_trip"]

SENTENCES = (
    "Turn on the kitchen light, please.",
    "Open the front door.",
    "It is 7:45 in the morning and 21 degrees outside.",
    "Set a timer for 15 minutes.",
    "Dr. Smith lives at 221B Baker St. in London.",
    "Is the garage door closed?",
    "What's the weather like tomorrow in New York?",
    "Call +1 (555) 123-4567, then e-mail joe@example.com.",
    "The meeting moved from 3 p.m. to 4:30 p.m. on Friday, March 3rd.",
    "I paid $3.50 for 2 coffees, i.e. $1.75 each!",
    "Wait... what?! No -- really?",
    "NASA, the FBI and IKEA all use acronyms; so does the U.S.A.",
    "Thirty-three thousand people attended in 1999.",
    "Please don't forget: the dishwasher's cycle ends at 10.",
    "Café, naïve, résumé and façade are borrowed words.",
    "Brightness is at 100%, volume at 35%.",
    "Never mind.",
    "Good night!",
    "The door to the cellar is locked, and the alarm is armed.",
    "Here is your morning briefing. It is Tuesday, the fourth of March, and the time is seven fifteen. "
    "Outside it is nine degrees and cloudy, with rain expected around noon. You have three meetings today; "
    "the first one starts at nine thirty in the small conference room. Have a good day!",
    "Line one\nLine two\n\nA new paragraph here.",
    "Is it 19:45 already? Yes. Then lock the doors, close the blinds and turn off the lights in the living room.",
)
"""A varied set (numbers, abbreviations, punctuation, questions, a paragraph) for equality and round trips."""


def load_piper(path: Path, threads: int) -> Any:
    """piper-tts's PiperVoice on a session with ``threads`` intra-op threads (its loader takes all cores)."""
    import onnxruntime
    from piper.config import PiperConfig
    from piper.voice import PiperVoice as Reference

    config_path = Path(f"{path}.json")
    import json

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    return Reference(config=config, session=session)


def piper_streamed(ref: Any, text: str) -> tuple[float, float, float]:
    """(time to first chunk, time to last, seconds of audio) of one piper-tts synthesize() run."""
    start = time.perf_counter()
    first, samples = None, 0
    for chunk in ref.synthesize(text):
        if first is None:
            first = time.perf_counter() - start
        samples += len(chunk.audio_float_array)
    return first or 0.0, time.perf_counter() - start, samples / ref.config.sample_rate


def piper_text_figures(ref: Any, text: str, repeats: int) -> dict[str, Any]:
    piper_streamed(ref, text)  # warm-up
    runs = [piper_streamed(ref, text) for _ in range(repeats)]
    first, total, audio_s = median([r[0] for r in runs]), median([r[1] for r in runs]), runs[0][2]
    return {"first_audio_s": first, "total_s": total, "audio_s": round(audio_s, 3),
            "rtf": round(total / audio_s, 4) if audio_s else None}


def processes(path: Path, text: str, threads: int) -> dict[str, Any]:
    """Whole-process CPU and peak RSS: voiced say --output vs piper-tts, same text, same threads."""
    with tempfile.TemporaryDirectory(prefix="voiced-bench-tts-") as tmp:
        ours = measure_process([sys.executable, "-m", "voiced", "say", "--voice", str(path), "--threads", str(threads),
                                "--output", f"{tmp}/voiced.wav", text])
        ref = measure_process([sys.executable, "-m", "voiced.bench.tts_reference", str(path), str(threads),
                               f"{tmp}/piper.wav", text])
    return {"voiced_say": ours, "piper_tts": ref,
            "cpu_ratio_voiced_vs_piper_tts": round(ours["cpu_s"] / ref["cpu_s"], 3) if ref["cpu_s"] else None,
            "rss_ratio_voiced_vs_piper_tts": round(ours["peak_rss_mb"] / ref["peak_rss_mb"], 3)}


def round_trip(path: Path, asr_model: Path, texts: Sequence[str] = SENTENCES, threads: int = 1) -> dict[str, Any]:
    """WER of Whisper on voiced's and piper-tts's speech of ``texts`` (each voice's default noise)."""
    import soxr

    from voiced.asr.loader import load_recognizer
    from voiced.asr.wer import NORMALIZER, wer
    from voiced.tts.voice import PiperVoice

    ours, ref = PiperVoice.load(path), load_piper(path, threads)
    asr: Any = load_recognizer(asr_model)

    def heard(pcm: np.ndarray, rate: int) -> str:
        audio = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, 16000).astype(np.float32)
        stream = asr.create_stream()
        stream.accept_waveform(audio)
        return asr.finish(stream).text

    pairs: dict[str, list[tuple[str, str]]] = {"voiced": [], "piper_tts": []}
    for text in texts:
        mine = np.concatenate([c.samples for c in ours.synthesize(text)])
        theirs = np.concatenate([c.audio_int16_array for c in ref.synthesize(text)])
        pairs["voiced"].append((text, heard(mine, ours.sample_rate)))
        pairs["piper_tts"].append((text, heard(theirs, ref.config.sample_rate)))
    figures: dict[str, Any] = {"asr_model": str(asr_model), "sentences": len(texts), "wer_normalizer": NORMALIZER}
    for name, p in pairs.items():
        figures[f"{name}_wer_percent"] = wer(p)
    figures["wer_difference"] = round(figures["voiced_wer_percent"] - figures["piper_tts_wer_percent"], 2)
    figures["examples"] = [{"text": t, "voiced": a[1], "piper_tts": b[1]}
                           for t, a, b in zip(texts[:3], pairs["voiced"], pairs["piper_tts"])]
    return figures


if __name__ == "__main__":  # one piper-tts synthesis to a WAV, for the whole-process figures
    from voiced.audio.wav import write_wav

    voice_path, n_threads, out, words = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], " ".join(sys.argv[4:])
    reference = load_piper(voice_path, n_threads)
    pcm = np.concatenate([c.audio_int16_array for c in reference.synthesize(words)])
    write_wav(out, (pcm.astype(np.float32) / 32768.0)[:, None], reference.config.sample_rate)

"""Hours of realistic speech without a wake word, for false accepts per hour.

The real Piper voice (joe) reads public-domain text (the LibriVox audiobook sentences of the
hifitts set and the Tale of Two Cities / Beckett lines of misc_en in ../shared) and Home
Assistant commands (hassil's sampler over the built-in English sentences: the speech a voice
assistant hears most), each time at another pace and with the voice's own variation, one
second of quiet room noise between sentences. Sentences holding a wake word (or a word close
to one) are left out. The audio is cached (it costs about 0.075 s of CPU per second).
"""

from __future__ import annotations

import csv
import hashlib
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["WAKE_WORDS", "generated_negatives", "negative_texts", "score_negatives"]

WAKE_WORDS = re.compile(r"\b(alexa|alexis|jarvis|mycroft|rhasspy|raspy|nabu)\b", re.IGNORECASE)
THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def negative_texts(speech: Path, commands: int = 400, seed: int = 0) -> list[str]:
    """Public-domain read sentences and sampled Home Assistant commands, without wake words."""
    texts: list[str] = []
    for tsv, column in ((speech / "hifitts_6097_5min" / "transcripts.tsv", "text_no_preprocessing"),
                        (speech / "misc_en" / "transcripts.tsv", "text")):
        if tsv.exists():
            with open(tsv, encoding="utf-8") as f:
                texts += [row[column] for row in csv.DictReader(f, delimiter="\t") if row.get(column)]
    if commands:
        from hassil.sample import sample_intents

        from voiced.bench.commands import _intents

        pool = sorted({text for _, text in sample_intents(_intents().templates, max_sentences_per_intent=60,
                                                          exclude_sentences_with_wildcards=True)})
        random.Random(seed).shuffle(pool)
        texts += pool[:commands]
    return [t for t in texts if not WAKE_WORDS.search(t)]


def generated_negatives(voice_path: Path, speech: Path, hours: float, cache: Path | None = None,
                        seed: int = 0) -> tuple[np.ndarray, dict[str, Any]]:
    """``hours`` of 16 kHz speech (float32) and how it was made; cached in ``cache`` when given."""
    import soxr

    from voiced.tts import PiperVoice, SynthesisOptions

    texts = negative_texts(speech, seed=seed)
    key = hashlib.sha256(f"{voice_path.name}|{hours}|{seed}|{len(texts)}".encode()).hexdigest()[:12]
    info: dict[str, Any] = {"voice": voice_path.name, "sentences_in_pool": len(texts), "seed": seed,
                            "texts": "hifitts (LibriVox) + misc_en transcripts, Home Assistant commands (hassil sampler)"}
    cached = cache / f"negatives-{key}.npy" if cache is not None else None
    if cached is not None and cached.exists():
        audio = np.load(cached)
        return audio, {**info, "cached": str(cached), "hours": round(len(audio) / 16000 / 3600, 3)}
    voice = PiperVoice.load(voice_path)
    rng = np.random.default_rng(seed)
    pieces: list[np.ndarray] = []
    total, target = 0, int(hours * 3600 * 16000)
    started = time.process_time()
    order = list(range(len(texts)))
    i = 0
    while total < target:
        if i % len(order) == 0:
            rng.shuffle(order)
        text = texts[order[i % len(order)]]
        i += 1
        options = SynthesisOptions(length_scale=float(rng.uniform(0.8, 1.3)), noise_scale=float(rng.uniform(0.3, 0.9)),
                                   noise_w=float(rng.uniform(0.5, 1.0)))
        pcm = np.concatenate([c.samples for c in voice.synthesize(text, options)]).astype(np.float32) / 32768
        speech16 = soxr.resample(pcm, voice.sample_rate, 16000).astype(np.float32) * float(rng.uniform(0.3, 1.0))
        gap = (rng.standard_normal(16000) * 0.002).astype(np.float32)
        pieces += [speech16, gap]
        total += len(speech16) + len(gap)
        if i % 200 == 0:
            print(f"negatives: {total / 16000 / 3600:.2f} of {hours} h", file=sys.stderr, flush=True)
    audio = np.concatenate(pieces)
    info.update({"sentences_spoken": i, "hours": round(len(audio) / 16000 / 3600, 3),
                 "synthesis_cpu_s": round(time.process_time() - started, 1)})
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        np.save(cached, audio)
    return audio, info


def _fires(frames: list[float], threshold: float, refractory_frames: int, warmup: int) -> int:
    """Detections in a score trace by the detector's rule (patience 1): over the threshold, then quiet."""
    count, quiet_until = 0, -1
    for n, score in enumerate(frames):
        if n < warmup or n < quiet_until:
            continue
        if score >= threshold:
            count += 1
            quiet_until = n + refractory_frames
    return count


def score_negatives(folder: Path, heads: list[str], audio: np.ndarray) -> dict[str, Any]:
    """False accepts of each head on ``audio``: at voiced's defaults (the daemon's own detector), per
    threshold (the same rule over the score trace), and the score distribution."""
    from voiced.runtime.onnx import SessionOptions
    from voiced.wake import WakeConfig, WakeDetector, WakeModel

    config = WakeConfig()
    detector = WakeDetector(WakeModel.load(folder, heads, options=SessionOptions(threads=1)), config)
    stream = detector.create_stream()
    traces: dict[str, list[float]] = {label: [] for label in detector.labels}
    found: dict[str, int] = dict.fromkeys(detector.labels, 0)
    for i in range(0, len(audio), 1600):
        for d in stream.accept_waveform(audio[i:i + 1600]):
            found[d.label] += 1
        for scores in stream.last_scores:
            for label, score in scores.items():
                traces[label].append(score)
    hours = len(audio) / 16000 / 3600
    refractory = int(round(config.refractory_s / 0.08))
    out: dict[str, Any] = {"hours": round(hours, 3), "default_threshold": config.threshold,
                           "patience": config.patience, "refractory_s": config.refractory_s, "heads": {}}
    for label, trace in traces.items():
        scores = np.array(trace)
        out["heads"][label] = {
            "false_accepts": found[label], "per_hour": round(found[label] / hours, 3),
            "per_hour_by_threshold": {str(t): round(_fires(trace, t, refractory, config.warmup_frames) / hours, 3)
                                      for t in THRESHOLDS},
            "score_p50": round(float(np.percentile(scores, 50)), 5), "score_p99": round(float(np.percentile(scores, 99)), 5),
            "score_p9999": round(float(np.percentile(scores, 99.99)), 4), "score_max": round(float(scores.max()), 4),
        }
    return out

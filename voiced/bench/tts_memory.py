"""``voiced bench tts --memory``: what a Piper voice keeps in RSS, and what giving it back costs.

ONNX Runtime's arena keeps what a sentence grew it by, unless the sentence is longer than
``release_after_phonemes`` (``[tts]``, or the hardware profile's) or started while another was
running. For each value compared
(default 150, the usual default, and 1, every sentence), a fresh child process with the voice
loaded that way synthesizes:

- ``replies``: ten short replies of a voice assistant, three times, one after another (as the
  Hermes speaker does): CPU seconds, and RSS after them;
- ``pairs``: ``pairs`` pairs of sentences of 1-30 words (seeded), the two of a pair at once (as
  two Wyoming workers do): CPU seconds, and RSS after each fifth (the highest of those too: a
  sentence over the bound gives back all the arena holds, so RSS at one moment can mislead) and
  at the end.

Children for the values alternate, ``rounds`` times, so the values are compared side by side
on the same machine load; each figure is reported as the median and the range over the rounds,
with CPU as a ratio to the first value's median. Prints nothing itself (``voiced bench tts``
prints the JSON).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from voiced.bench.common import median, proc_peak_rss_mb, proc_rss_mb

__all__ = ["REPLIES", "bench_tts_memory", "synthesize_in_pairs"]

REPLIES = (
    "Turned on the kitchen light.", "The living room is now at fifty percent.",
    "It is twenty one degrees in the bedroom.",
    "Tomorrow will be cloudy with a high of eighteen degrees and a light wind from the west.", "Okay.",
    "The garage door is closed.", "I could not find a device called office lamp.",
    "Your timer for ten minutes has started.", "Playing music in the kitchen.",
    "The front door was unlocked at half past seven this morning, and it has been open for three minutes now.",
)
_WORDS = ("the kitchen light turn on off please set brightness to fifty percent living room what is "
          "weather tomorrow").split()


def _sentences(pairs: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 30))) + "." for _ in range(2 * pairs)]


def synthesize_in_pairs(voice: Any, texts: Sequence[str], options: Any = None) -> Iterator[int]:
    """Synthesize ``texts`` two at a time (the first with the second, and so on), as two Wyoming
    workers do; yields how many pairs are done after each."""
    def say(text: str) -> None:
        for _ in voice.synthesize(text, options):
            pass

    for n, pair in enumerate(zip(texts[::2], texts[1::2]), 1):
        both = [threading.Thread(target=say, args=(t,)) for t in pair]
        for t in both:
            t.start()
        for t in both:
            t.join()
        yield n


def _child(voice_path: str, release: int, threads: int, pairs: int, seed: int) -> dict[str, Any]:
    from voiced.runtime.onnx import SessionOptions
    from voiced.tts.config import VoiceSettings
    from voiced.tts.voice import PiperVoice

    voice = PiperVoice.load(voice_path, settings=VoiceSettings(session=SessionOptions(threads=threads),
                                                               release_after_phonemes=release))
    pid = os.getpid()

    def say(text: str) -> None:
        for _ in voice.synthesize(text):
            pass

    say("Hello.")  # first-run allocations are not what this measures
    out: dict[str, Any] = {"rss_mb_loaded": round(proc_rss_mb(pid), 1)}
    start = time.process_time()
    for _ in range(3):
        for reply in REPLIES:
            say(reply)
    out["replies"] = {"cpu_s": round(time.process_time() - start, 3), "rss_mb": round(proc_rss_mb(pid), 1)}
    samples = []
    start = time.process_time()
    for done in synthesize_in_pairs(voice, _sentences(pairs, seed)):
        if done % max(1, pairs // 5) == 0:
            samples.append(round(proc_rss_mb(pid), 1))
    out["pairs"] = {"cpu_s": round(time.process_time() - start, 3), "rss_mb": round(proc_rss_mb(pid), 1),
                    "rss_mb_samples": samples}
    out["peak_rss_mb"] = proc_peak_rss_mb(pid)
    return out


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": median(values, 3), "min": min(values), "max": max(values)}


def bench_tts_memory(voice: Path, releases: Sequence[int] = (150, 1), rounds: int = 3, pairs: int = 60,
                     threads: int = 1, seed: int = 1) -> dict[str, Any]:
    """Each ``releases`` value in its own child process, alternating, ``rounds`` times (see the module docstring)."""
    if not releases or rounds < 1 or pairs < 1:
        raise ValueError("releases must not be empty; rounds and pairs must be at least 1")
    runs: dict[int, list[dict[str, Any]]] = {r: [] for r in releases}
    for n in range(rounds):
        for release in releases:
            print(f"voiced bench tts --memory: round {n + 1}/{rounds}, release_after_phonemes = {release}",
                  file=sys.stderr, flush=True)
            cmd = [sys.executable, "-m", "voiced.bench.tts_memory", str(voice), str(release), str(threads), str(pairs),
                   str(seed)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                raise RuntimeError(f"the synthesis child exited {done.returncode}: {done.stderr[-2000:]}")
            runs[release].append(json.loads(done.stdout))
    first = median([r["replies"]["cpu_s"] for r in runs[releases[0]]], 3)
    first_pairs = median([r["pairs"]["cpu_s"] for r in runs[releases[0]]], 3)
    figures: dict[str, Any] = {}
    for release, got in runs.items():
        replies_cpu = [r["replies"]["cpu_s"] for r in got]
        pairs_cpu = [r["pairs"]["cpu_s"] for r in got]
        figures[str(release)] = {
            "replies": {"cpu_s": _spread(replies_cpu), "cpu_vs_first": round(median(replies_cpu, 3) / first, 3),
                        "rss_mb": _spread([r["replies"]["rss_mb"] for r in got])},
            "pairs": {"cpu_s": _spread(pairs_cpu), "cpu_vs_first": round(median(pairs_cpu, 3) / first_pairs, 3),
                      "rss_mb": _spread([r["pairs"]["rss_mb"] for r in got]),
                      "rss_mb_highest": _spread([max(r["pairs"]["rss_mb_samples"]) for r in got]),
                      "rss_mb_samples": [r["pairs"]["rss_mb_samples"] for r in got]},
            "rss_mb_loaded": _spread([r["rss_mb_loaded"] for r in got]),
            "peak_rss_mb": _spread([r["peak_rss_mb"] for r in got if r["peak_rss_mb"] is not None] or [0.0]),
        }
    return {"voice": str(voice), "rounds": rounds, "pairs": pairs, "seed": seed, "threads": threads,
            "replies": len(REPLIES) * 3, "release_after_phonemes": figures}


if __name__ == "__main__":  # the child: VOICE RELEASE THREADS PAIRS SEED
    path, release_arg, threads_arg, pairs_arg, seed_arg = sys.argv[1:6]
    print(json.dumps(_child(path, int(release_arg), int(threads_arg), int(pairs_arg), int(seed_arg))))

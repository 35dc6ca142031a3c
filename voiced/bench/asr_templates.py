"""``voiced bench asr-templates``: what template-aware transducer decoding costs and changes, as JSON.

The daemon's case: a streaming transducer with modified beam search, Home Assistant's built-in
English sentences with ``--names`` device names and ``--areas`` areas (``voiced bench intents``'
set), ``[asr] template_decoding`` on. Two figures:

- cost: per-window decode time (100 ms windows, as the listen stage feeds them; all windows,
  and those in which an encoder chunk ran) and the final result's time, with and without the
  sentence beam, on the first ``--timing-files`` files, taking turns file by file so a busy
  machine slows all alike, ``--runs`` times;
- changes: on every file, how often the result is not the free transcript, at the default
  margin and at others. The free beam runs unchanged beside the sentence beam, so one decode
  gives both transcripts (checked on the timing files against a decode without templates).

Both with the daemon's settings and without the sentence beam's prune bound.

Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voiced.bench.common import read_samples, stats

__all__ = ["MARGINS", "bench_asr_templates"]

MARGINS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)
"""Margins (nats per token) the changes are counted at, beside the configured one."""


def _decode(rec: Any, samples: Any) -> tuple[Any, Any, list[tuple[float, bool]], float]:
    """(result, stream, (seconds, an encoder chunk ran) per window, final seconds), fed as the
    listen stage feeds it."""
    from voiced.audio.frames import Windower

    stream = rec.create_stream()
    windows = []
    for window in Windower(10).windows([samples]):
        t = time.perf_counter()
        before = stream.processed_frames
        stream.accept_waveform(window.samples)
        rec.decode_all(stream)
        windows.append((time.perf_counter() - t, stream.processed_frames > before))
    t = time.perf_counter()
    result = rec.finish(stream)
    return result, stream, windows, time.perf_counter() - t


def bench_asr_templates(asr_model: Path, files: Sequence[Path], *, timing_files: int = 8, runs: int = 3,
                        names: int = 5, areas: int = 3, margin: float | None = None, threads: int = 1) -> dict[str, Any]:
    from voiced.asr.recognizer import Recognizer, RecognizerConfig
    from voiced.asr.search import SearchMethod
    from voiced.asr.sentence_context import TemplateSearch
    from voiced.audio.frames import SAMPLE_RATE
    from voiced.bench.intents import _sections
    from voiced.intents import IntentRecognizer

    with tempfile.TemporaryDirectory(prefix="voiced-bench-asr-templates-") as tmp:
        intents = IntentRecognizer.from_section(_sections(Path(tmp), "en", names, areas)["builtin"])
    t = time.perf_counter()
    space = intents.sentence_space()
    compile_s = time.perf_counter() - t
    config = RecognizerConfig(method=SearchMethod.MODIFIED_BEAM, threads=threads)
    free = Recognizer.load(asr_model, config)
    engines = {"free": free}
    prepare_ms = {}
    # the daemon's settings, and the same without the prune bound (what the bound saves, and that
    # the margin alone keeps read speech)
    if margin is None:  # the daemon's default ([asr] template_margin)
        margin = TemplateSearch().margin
    for name, settings in (("templates", TemplateSearch(margin=margin)),
                           ("templates_unbounded", TemplateSearch(margin=margin, prune=10_000.0))):
        engines[name] = Recognizer(free.model, config)  # the same loaded model
        t = time.perf_counter()
        engines[name].use_templates(space, settings)
        prepare_ms[name] = round((time.perf_counter() - t) * 1e3, 1)

    audio = read_samples(files)
    timed = audio[:timing_files]
    windows: dict[str, list[tuple[float, bool]]] = {name: [] for name in engines}
    finals: dict[str, list[float]] = {name: [] for name in engines}
    free_equal = True
    for _ in range(runs):
        for samples in timed:
            texts = {}
            for name, rec in engines.items():
                result, stream, w, f = _decode(rec, samples)
                windows[name] += w
                finals[name].append(f)
                choice = rec.choose(stream)
                texts[name] = result.text if choice is None else free.model.tokens.text(choice.free.tokens)
            free_equal &= len(set(texts.values())) == 1

    changes: dict[str, Any] = {}
    for name in ("templates", "templates_unbounded"):
        rec = engines[name]
        changed: dict[str, int] = {f"{m:g}": 0 for m in sorted({*MARGINS, margin})}
        reached = 0
        examples = []
        for path, samples in zip(files, audio):
            result, stream, _, _ = _decode(rec, samples)
            choice = rec.choose(stream)
            reached += choice.sentence is not None
            for key in changed:
                changed[key] += choice.with_margin(float(key)).from_templates
            if result.from_templates and len(examples) < 5:
                examples.append({"file": path.name, "free": rec.model.tokens.text(choice.free.tokens),
                                 "result": result.text})
        changes[name] = {"whole_sentence_reached": reached, "changed_by_margin": changed, "changed_examples": examples}
    seconds = sum(len(a) for a in timed) / SAMPLE_RATE * runs
    return {
        "model": str(asr_model), "files": len(files), "timing_files": len(timed), "runs": runs,
        "names": names, "areas": areas, "margin": margin,
        "sentence_space": {"states": space.state_count, "compile_ms": round(compile_s * 1e3, 1),
                           "prepare_ms": prepare_ms},
        "window_ms": {k: stats([s for s, _ in v], 1e3) for k, v in windows.items()},
        "decoding_window_ms": {k: stats([s for s, ran in v if ran], 1e3) for k, v in windows.items()},
        "final_ms": {k: stats(v, 1e3) for k, v in finals.items()},
        "rtf": {k: round((sum(s for s, _ in windows[k]) + sum(finals[k])) / seconds, 4) for k in windows},
        "free_transcript_unchanged_on_timing_files": free_equal,
        "changes": changes,
    }

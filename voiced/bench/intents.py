"""``voiced bench intents``: intent recognition time on Home Assistant's built-in sentences, as JSON.

Recognizers, loaded as the daemon loads them (``IntentRecognizer.from_section``):

- ``builtin``: ``builtin = "home-assistant"`` for ``--language`` with 50 device names,
  10 areas (``--names``, ``--areas``), 2 floors and a ``site_area``: the set a new user
  gets without a template file;
- ``templates``: a small user template file of lighting intents, for a side-by-side ratio.

Each run feeds every utterance once to each recognizer, taking turns utterance by
utterance so a busy machine slows both alike; per-utterance p50/p95/max come per run and
the figures are the medians over ``--runs`` runs. ``cold_first_ms`` is the first call
after loading (which already warmed hassil up). The utterance set mixes commands the
built-in set matches (lights, areas, brightness, colours, timers, questions, never mind)
with texts it must reject (chatter, near misses, long transcripts). With ``--asr-model DIR`` and WAV files, the recognizer's
modified beam search also decodes them with no hotwords, with the bounded hotwords
(``[asr] max_hotwords``) and with the whole vocabulary, in turns, for the hotword cost.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voiced.bench.common import median, read_samples, stats
from voiced.intentconfig import BuiltinSet, IntentsSection, SlotLists
from voiced.intents import MAX_HOTWORDS, IntentRecognizer

__all__ = ["AREAS", "NAMES", "UTTERANCES", "bench_intents"]

_ROOMS = ("kitchen", "porch", "desk", "ceiling", "bedside", "hallway", "garden", "garage", "office", "reading")
_DEVICES = ("light", "lamp", "fan", "switch", "heater")
NAMES = tuple(f"{room} {device}" for room in _ROOMS for device in _DEVICES)
"""50 device names, as a home's [intents.lists] name would list them."""
AREAS = ("kitchen", "living room", "bedroom", "bathroom", "office", "garage", "hallway", "garden", "basement",
         "attic")
"""10 areas."""
_ORDINALS = ("", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _more(base: Sequence[str], n: int) -> list[str]:
    """``n`` distinct phrases: ``base`` first, then "second kitchen light", "third …" and so on."""
    out = [f"{o} {b}".strip() for o in _ORDINALS for b in base][:n]
    if len(out) < n:
        raise ValueError(f"at most {len(_ORDINALS) * len(base)} phrases, asked for {n}")
    return out

MATCHING = (
    "turn on the kitchen light", "turn off the porch lamp", "switch on the garage heater",
    "please turn on the hallway fan", "turn on the lights in the living room", "turn off the bedroom lights",
    "turn on the lights", "turn off all the lights upstairs", "set the desk lamp brightness to 30 percent",
    "set the brightness in the bedroom to fifty percent", "set brightness to 40 percent",
    "turn the reading light red", "make the kitchen light blue", "set a timer for 5 minutes",
    "start a 10 minute timer", "set a timer for 1 hour and 30 minutes", "cancel the timer",
    "cancel all timers", "how much time is left on my timer", "add 5 minutes to my timer",
    "in 10 minutes turn off the kitchen light", "is the kitchen light on", "which lights are on",
    "are any lights on in the garage", "what's the state of the office fan", "what's the temperature",
    "what time is it", "what is today's date", "what's the weather", "never mind", "nevermind",
    "add milk to my shopping list", "open the garage door", "pause the timer", "what's the temperature in the attic",
    "play some jazz in the living room",
)
NOT_MATCHING = (
    "make me a sandwich", "tell me a joke", "turn on the garden hose", "the", "turn", "on",
    "what did you say", "we should go shopping tomorrow if the weather is nice and the car is fixed by then",
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore",
    "the kitchen light was on all night and nobody noticed until the morning",
    "could you remind me to call my mother when i get home tonight", "switch the television to channel four",
)
UTTERANCES = MATCHING + NOT_MATCHING

TEMPLATES = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["turn on [the] {name}", "(turn|switch) on [the] lights in [the] {area}"]
  HassTurnOff:
    data:
      - sentences: ["turn off [the] {name}", "(turn|switch) off [the] lights in [the] {area}"]
  HassLightSet:
    data:
      - sentences: ["set [the] {area} lights to {brightness} percent"]
        slots: {domain: light}
lists:
  brightness:
    range: {from: 0, to: 100}
"""


def _sections(work: Path, language: str, names: int = len(NAMES), areas: int = len(AREAS)) -> dict[str, IntentsSection]:
    (work / "lights.yaml").write_text(TEMPLATES, encoding="utf-8")
    lists = SlotLists.from_config({"name": _more(NAMES, names), "area": _more(AREAS, areas),
                                   "floor": ["upstairs", "downstairs"]}, "lists")
    return {
        "builtin": IntentsSection(builtin=BuiltinSet.HOME_ASSISTANT, language=language, lists=lists,
                                  site_area=AREAS[0]),
        "templates": IntentsSection(templates=(str(work / "lights.yaml"),), lists=lists),
    }


def _recognition(sections: dict[str, IntentsSection], utterances: Sequence[str], runs: int) -> dict[str, Any]:
    per_run: dict[str, list[dict[str, float]]] = {name: [] for name in sections}
    loads: dict[str, list[float]] = {name: [] for name in sections}
    cold: dict[str, list[float]] = {name: [] for name in sections}
    matched: dict[str, int] = {}
    for _ in range(runs):
        recognizers = {}
        for name, section in sections.items():
            t = time.perf_counter()
            recognizers[name] = IntentRecognizer.from_section(section)
            loads[name].append(time.perf_counter() - t)
            t = time.perf_counter()
            recognizers[name].recognize(utterances[0])
            cold[name].append(time.perf_counter() - t)
        samples: dict[str, list[float]] = {name: [] for name in sections}
        for text in utterances:  # in turns: both see the same moments of a busy machine
            for name, recognizer in recognizers.items():
                t = time.perf_counter()
                result = recognizer.recognize(text)
                samples[name].append(time.perf_counter() - t)
                if len(per_run[name]) == 0 and result is not None:
                    matched[name] = matched.get(name, 0) + 1
        for name in sections:
            per_run[name].append(stats(samples[name], 1e3))
    out: dict[str, Any] = {}
    for name, recognizer in recognizers.items():
        out[name] = {
            "intents": len(recognizer.intent_names),
            "load_ms": round(median(loads[name]) * 1e3, 1),
            "cold_first_ms": round(median(cold[name]) * 1e3, 2),
            "per_utterance_ms": {k: round(statistics.median(r[k] for r in per_run[name]), 3)
                                 for k in ("median", "p95", "max")},
            "matched": f"{matched.get(name, 0)}/{len(utterances)}",
        }
    b, s = out["builtin"]["per_utterance_ms"], out["templates"]["per_utterance_ms"]
    out["ratio_builtin_over_templates"] = {k: round(b[k] / s[k], 2) for k in ("median", "p95")}
    return out


def _hotwords(recognizer: IntentRecognizer, model: Path, files: Sequence[Path], runs: int, threads: int,
              limit: int) -> dict[str, Any]:
    """Beam search over the same audio with no, bounded and unbounded hotwords, in turns."""
    from voiced.asr.recognizer import Recognizer, RecognizerConfig
    from voiced.asr.search import SearchMethod
    from voiced.audio.frames import SAMPLE_RATE, Windower

    audio = read_samples(files)
    seconds = sum(len(a) for a in audio) / SAMPLE_RATE
    lists = {"none": [], "bounded": recognizer.hotwords(limit), "all": recognizer.vocabulary()}
    engines: dict[str, Recognizer] = {}
    build: dict[str, float] = {}
    for name, words in lists.items():
        t = time.perf_counter()
        engines[name] = Recognizer.load(model, RecognizerConfig(method=SearchMethod.MODIFIED_BEAM,
                                                                hotwords=tuple(words), threads=threads))
        build[name] = time.perf_counter() - t
    totals: dict[str, list[float]] = {name: [] for name in lists}
    windows: dict[str, list[float]] = {name: [] for name in lists}
    texts: dict[str, list[str]] = {name: [] for name in lists}
    for _ in range(runs):
        for samples in audio:
            for name, engine in engines.items():
                stream = engine.create_stream()
                total = 0.0
                for window in Windower(10).windows([samples]):
                    t = time.perf_counter()
                    stream.accept_waveform(window.samples)
                    engine.decode_all(stream)
                    dt = time.perf_counter() - t
                    windows[name].append(dt)
                    total += dt
                t = time.perf_counter()
                result = engine.finish(stream)
                total += time.perf_counter() - t
                totals[name].append(total)
                texts[name].append(result.text)
    out: dict[str, Any] = {"audio_s": round(seconds, 2), "files": len(files), "max_hotwords": limit}
    for name, words in lists.items():
        rtf = sum(totals[name]) / (seconds * runs)
        out[name] = {"phrases": len(words), "load_ms": round(build[name] * 1e3, 1), "rtf": round(rtf, 4),
                     "window_ms": stats(windows[name], 1e3)}
    for name in ("bounded", "all"):
        out[f"rtf_ratio_{name}_over_none"] = round(out[name]["rtf"] / out["none"]["rtf"], 3)
        out[f"same_text_{name}_as_none"] = sum(a == b for a, b in zip(texts[name], texts["none"])) / len(texts["none"])
    return out


def bench_intents(*, language: str = "en", runs: int = 5, names: int = len(NAMES), areas: int = len(AREAS),
                  asr_model: Path | None = None, files: Sequence[Path] = (), threads: int = 1,
                  max_hotwords: int = MAX_HOTWORDS) -> dict[str, Any]:
    """The figures; hotword figures only with an ``asr_model`` and ``files``."""
    with tempfile.TemporaryDirectory(prefix="voiced-bench-intents-") as tmp:
        sections = _sections(Path(tmp), language, names, areas)
        figures: dict[str, Any] = {
            "names": names, "areas": areas,
            "utterances": {"matching": len(MATCHING), "not_matching": len(NOT_MATCHING)}, "runs": runs,
            "recognition": _recognition(sections, UTTERANCES, runs),
        }
        if asr_model is not None and files:
            builtin = IntentRecognizer.from_section(sections["builtin"])
            figures["hotwords"] = _hotwords(builtin, asr_model, files, runs, threads, max_hotwords)
    return figures

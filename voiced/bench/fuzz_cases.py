"""What ``voiced bench fuzz`` feeds the file loaders: Hypothesis strategies for each kind of file
(mutated real configs, WAVs, templates, token tables, voice configs, ONNX models and outbox files) and the
seeded runner that writes each case to a file and classifies what the loader did with it.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from voiced.bench.fuzz_files import (
    Outcome,
    Tally,
    check,
    load_config,
    load_intents,
    load_outbox,
    load_silero,
    load_tokens,
    load_voice_config,
    load_wake_head,
    load_wav,
    mutate_bytes,
    outbox_file,
    wav_header,
)

__all__ = ["CASE_TIMEOUT_S", "FILE_KINDS", "MODEL_KINDS", "config_sweep", "file_cases", "fuzz_files", "json_values",
           "run_case", "settle_constant_pool"]

CASE_TIMEOUT_S = 20
"""A case that takes longer is a hang."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
"""Any JSON-like value (NaN, huge integers and lone surrogates included)."""


def file_cases(kind: str, speech: Path | None = None, models: Path | None = None) -> st.SearchStrategy[Any]:
    """Bytes of one mutated file of ``kind``, or for big files a function that makes them: Hypothesis
    keeps every value it generated (2 MB per mutated model; RSS grew 1.2 MB a case), but only the
    small recipe when the value is a function."""
    edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)
    cuts = st.none() | st.integers(0, 400)
    if kind in ("silero", "wake_head"):
        if models is None:
            raise ValueError(f"fuzzing {kind} needs the real models (--models)")
        oww = models / "openwakeword"
        own = (models / "silero_vad_v5" / "silero_vad.onnx" if kind == "silero" else oww / "alexa_v0.1.onnx").read_bytes()
        others = [p.read_bytes() for p in (oww / "melspectrogram.onnx", oww / "hey_mycroft_v0.1.onnx",
                                           models / "silero_vad_v5" / "silero_vad.onnx") if p.read_bytes() != own]
        far = st.lists(st.tuples(st.integers(0, len(own) - 1), st.integers(0, 255)), min_size=1, max_size=40)
        return (st.tuples(far, st.none() | st.integers(0, len(own))).map(lambda e: partial(mutate_bytes, own, e[0], e[1]))
                | st.sampled_from(others)  # a real model of another role
                | st.binary(max_size=500))
    if kind == "config":
        from voiced.bench.fuzz_config import mutations, render

        raw = st.binary(max_size=300) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))
        return mutations().map(render) | raw
    if kind == "wav":
        real = (speech / "jfk" / "jfk.wav").read_bytes()[:48_044] if speech else wav_header(16000, 1, 16, 1, 3200) + bytes(3200)
        headers = st.builds(
            lambda rate, ch, bits, tag, data, fmt, body: wav_header(rate, ch, bits, tag, data, fmt) + body,
            st.one_of(st.integers(0, 2_000_000), st.sampled_from([1, 8000, 16000, 44100, 48000, 1_000_000])),
            st.integers(0, 70_000), st.sampled_from([0, 1, 8, 12, 16, 24, 32, 64, 65535]),
            st.sampled_from([0, 1, 2, 3, 0x55, 0xFFFE, 0xFFFF]), st.integers(0, 2**32 - 1),
            st.sampled_from([0, 2, 14, 16, 18, 40, 4096]), st.binary(max_size=4000))
        return headers | st.tuples(edits, cuts).map(lambda e: partial(mutate_bytes, real, e[0], e[1] and e[1] * 100))
    if kind == "intents":
        valid = ("language: en\nintents:\n  HassTurnOn:\n    data:\n      - sentences: ['turn on [the] {name}']\n"
                 "lists:\n  name:\n    values: ['kitchen light']\n")
        return (st.tuples(edits, cuts).map(lambda e: mutate_bytes(valid.encode(), e[0], e[1]))
                | json_values.map(lambda v: json.dumps({"language": "en", "intents": v}).encode())
                | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
    if kind == "tokens":
        valid = "<blk> 0\n<sos/eos> 1\n<unk> 2\n▁THE 3\nS 4\n"
        lines = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.integers(-5, 10), st.text(max_size=3))),
                         max_size=8).map(lambda rows: "".join(f"{a} {b}\n" for a, b in rows).encode("utf-8", "surrogatepass"))
        return lines | st.tuples(edits, cuts).map(lambda e: mutate_bytes(valid.encode(), e[0], e[1])) | st.binary(max_size=200)
    if kind == "voice_config":
        base = {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"},
                "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
                "phoneme_type": "espeak", "num_speakers": 1, "speaker_id_map": {},
                "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [14]}}
        def mutate(m: tuple[str, Any]) -> bytes:
            doc = json.loads(json.dumps(base))
            section, _, key = m[0].partition(".")
            if key:
                doc.setdefault(section, {})
                if isinstance(doc[section], dict):
                    doc[section][key] = m[1]
            else:
                doc[section] = m[1]
            return json.dumps(doc, allow_nan=True).encode()
        paths = st.sampled_from(["audio.sample_rate", "espeak.voice", "inference.noise_scale", "inference.length_scale",
                                 "phoneme_type", "num_speakers", "speaker_id_map", "phoneme_id_map", "audio",
                                 "phoneme_id_map.a", "language.code"])
        return st.tuples(paths, json_values).map(mutate) | st.binary(max_size=200)
    if kind == "outbox":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            real = outbox_file(Path(tmp))
        far = st.lists(st.tuples(st.integers(0, len(real) - 1), st.integers(0, 255)), min_size=1, max_size=40)
        # whole pages wiped to 0xff, as a failing SD card leaves them
        pages = st.lists(st.integers(1, len(real) // 4096 - 1), min_size=1, max_size=4)
        wiped = pages.map(lambda ps: mutate_bytes(real, [(p * 4096 + i, 0xFF) for p in ps for i in range(4096)], None))
        flipped = st.tuples(far, st.none() | st.integers(0, len(real))).map(lambda e: mutate_bytes(real, e[0], e[1]))
        return flipped | wiped
    raise ValueError(f"unknown file kind {kind!r}")


FILE_KINDS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "config": ("voiced.toml", load_config), "wav": ("case.wav", load_wav), "intents": ("intents.yaml", load_intents),
    "tokens": ("tokens.txt", load_tokens), "voice_config": ("voice.onnx.json", load_voice_config),
    "silero": ("silero_vad.onnx", load_silero), "wake_head": ("alexa_v0.1.onnx", load_wake_head),
    "outbox": ("outbox.sqlite3", load_outbox),
}
MODEL_KINDS = ("silero", "wake_head")
"""Kinds that need ../shared/models."""


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def config_names() -> tuple[str, ...]:
    """What a config error may name instead of the file: any key or section."""
    from voiced.bench.fuzz_config import KEYS

    return tuple(".".join(p[:i]) for p in KEYS for i in range(1, len(p) + 1))


def run_case(kind: str, path: Path, data: bytes) -> tuple[Outcome, str]:
    """Write ``data`` to ``path`` and hand it to the loader of ``kind``, with a time limit."""
    path.write_bytes(data)
    load = FILE_KINDS[kind][1]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        return check(load, path, config_names() if kind == "config" else ())
    except _Timeout:
        return Outcome.FAILURE, f"no answer within {CASE_TIMEOUT_S} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def settle_constant_pool() -> None:
    """Import every module of voiced and quantize, so that a seed's cases depend on the code alone.

    Hypothesis also draws values from the constants of the project's modules loaded at the time
    (``hypothesis.internal.conjecture.providers``, since 6.131), and looks again whenever a module
    is loaded: a module a case imported lazily changed the cases after it. A seed's cases then
    depended on what had run before: pytest's other tests in the same worker, or, for a run resumed
    after a crash, on the skipped cases, which load nothing."""
    import importlib
    import pkgutil

    for name in ("voiced", "quantize"):
        try:
            package = importlib.import_module(name)
        except ImportError:  # quantize is not installed beside voiced everywhere
            continue
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name.endswith(".__main__"):
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional dependency missing: no case can load it either
                pass


def fuzz_files(kind: str, n: int, workdir: Path, run_seed: int = 0, speech: Path | None = None,
               strict: bool = False, models: Path | None = None, skip: int = 0,
               on_case: Callable[[int, str, str, str], None] | None = None) -> Tally:
    """``n`` cases of ``kind``; ``strict`` raises on the first failure (Hypothesis then shrinks it).

    ``skip``: generate but do not load the first cases (a run resumed after a crash; the same
    seed generates the same cases). ``on_case(i, phase, detail, case)`` is called with "start"
    before and the outcome after case ``i``, so a watcher in another process knows which case
    killed it.
    """
    name = FILE_KINDS[kind][0]
    tally = Tally()
    path = workdir / name
    index = {"i": -1}

    if kind == "wake_head" and models is not None:  # the front end beside the mutated head, as in a real folder
        for front in ("melspectrogram.onnx", "embedding_model.onnx"):
            (workdir / front).write_bytes((models / "openwakeword" / front).read_bytes())

    settle_constant_pool()

    @seed(run_seed)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(file_cases(kind, speech, models))
    def one(data: bytes | Callable[[], bytes]) -> None:
        data = data() if callable(data) else data
        index["i"] += 1
        if index["i"] < skip:
            return
        if on_case:
            on_case(index["i"], "start", "", "")
        outcome, detail = run_case(kind, path, data)
        tally.add(outcome, detail, repr(data[:300]))
        if on_case:
            on_case(index["i"], outcome.value, detail, repr(data[:300]))
        if strict and outcome in (Outcome.FAILURE, Outcome.UNNAMED_ERROR):
            raise AssertionError(f"{kind}: {outcome.value}: {detail}")

    one()
    return tally


def config_sweep(workdir: Path) -> Tally:
    """Every config key with every edge value of its type (no sampling: a fixed list of ~2,300)."""
    from voiced.bench.fuzz_config import render, sweep

    tally = Tally()
    path = workdir / FILE_KINDS["config"][0]
    for mutation in sweep():
        outcome, detail = run_case("config", path, render(mutation))
        tally.add(outcome, detail, f"{'.'.join(mutation[0])} = {mutation[1]!r}"[:300])
    return tally

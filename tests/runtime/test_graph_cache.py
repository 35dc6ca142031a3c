"""The optimized-graph cache: a model is optimized once, later loads run the kept graph, same outputs."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.modelgen.transducer import make_transducer
from voiced.runtime.graph_cache import MAX_ENTRIES, SUFFIX, GraphCache, default_graph_cache
from voiced.runtime.onnx import SessionOptions, create_session


@pytest.fixture(scope="module", params=["zipformer2", "lstm"])
def encoder(request, tmp_path_factory) -> Path:
    out = make_transducer(tmp_path_factory.mktemp(request.param), request.param, int8=True)
    return out / "encoder.int8.onnx"


def _feeds(session, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        dtype = np.int64 if i.type == "tensor(int64)" else np.float32
        feeds[i.name] = (rng.standard_normal(shape) if dtype == np.float32 else np.zeros(shape)).astype(dtype)
    return feeds


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob(f"*{SUFFIX}"))


def test_second_load_runs_the_kept_graph_with_identical_outputs(encoder: Path, tmp_path: Path, caplog) -> None:
    cache = tmp_path / "cache"
    plain = create_session(encoder, SessionOptions())
    first = create_session(encoder, SessionOptions(graph_cache=cache))
    assert len(_entries(cache)) == 1, "the first load keeps its optimized graph"
    with caplog.at_level(logging.DEBUG, logger="voiced.runtime.onnx"):
        second = create_session(encoder, SessionOptions(graph_cache=cache))
    assert "optimized graph from" in caplog.text
    assert len(_entries(cache)) == 1
    meta = plain.get_modelmeta().custom_metadata_map
    assert second.get_modelmeta().custom_metadata_map == meta, "the metadata the loader reads survives"
    assert [i.name for i in second.get_inputs()] == [i.name for i in plain.get_inputs()]
    feeds = _feeds(plain, np.random.default_rng(0))
    want = plain.run(None, feeds)
    for session in (first, second):
        for got, ref in zip(session.run(None, feeds), want):
            np.testing.assert_array_equal(got, ref)


def test_a_damaged_entry_is_replaced_not_fatal(encoder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    create_session(encoder, SessionOptions(graph_cache=cache))
    (entry,) = _entries(cache)
    entry.write_bytes(b"not a graph")
    session = create_session(encoder, SessionOptions(graph_cache=cache))
    assert session.get_modelmeta().custom_metadata_map
    assert _entries(cache) == [entry] and entry.stat().st_size > 100, "optimized again and kept"


def test_a_changed_model_gets_a_new_entry(tmp_path: Path) -> None:
    model = make_transducer(tmp_path / "m", "lstm") / "joiner.onnx"
    cache = tmp_path / "cache"
    create_session(model, SessionOptions(graph_cache=cache))
    before = _entries(cache)
    data = model.read_bytes()
    model.write_bytes(data)  # same bytes, new mtime/ctime: the key must not trust an old entry
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 10**9))
    create_session(model, SessionOptions(graph_cache=cache))
    assert len(_entries(cache)) == 2 and before[0] in _entries(cache)


def test_no_cache_without_optimization_or_a_writable_directory(tmp_path: Path) -> None:
    model = make_transducer(tmp_path / "m", "lstm") / "decoder.onnx"
    cache = tmp_path / "cache"
    create_session(model, SessionOptions(optimize=False, graph_cache=cache))
    assert not cache.exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    create_session(model, SessionOptions(graph_cache=blocker / "cache"))  # cannot mkdir: loads anyway


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    cache = GraphCache(tmp_path)
    for k in range(MAX_ENTRIES + 3):
        temp = tmp_path / f".t{k}"
        temp.write_bytes(b"x")
        os.utime(temp, ns=(k * 10**9, k * 10**9))
        cache.commit(temp, tmp_path / f"m{k}{SUFFIX}")
    kept = {p.name for p in _entries(tmp_path)}
    assert len(kept) == MAX_ENTRIES and f"m{MAX_ENTRIES + 2}{SUFFIX}" in kept and f"m0{SUFFIX}" not in kept



def test_graphs_in_use_are_kept_when_the_clock_is_behind_the_caches(tmp_path: Path) -> None:
    """A Pi without RTC starts at 1970 or fake-hwclock's old time: the graphs it uses must not look
    older than stale ones (other models, older onnxruntimes) written when the clock was right, or
    every start prunes one in use and optimizes it again. The entries here are stamped a year
    ahead of the real clock, which is the same as this start's clock being a year behind."""
    day = 86400 * 10**9
    right = time.time_ns() + 365 * day  # the clock when the cache was filled
    for k in range(10):
        stale = tmp_path / f"stale{k}{SUFFIX}"
        stale.write_bytes(b"x")
        os.utime(stale, ns=(right - (30 + k) * day,) * 2)
    in_use = [tmp_path / f"model{k}{SUFFIX}" for k in range(7)]
    for entry in in_use[:6]:  # last used by a start whose clock was behind too
        entry.write_bytes(b"x")
        os.utime(entry, ns=(right - 60 * day,) * 2)
    assert len(in_use) + 10 > MAX_ENTRIES
    cache = GraphCache(tmp_path)
    for start in range(3):
        optimized = []
        for entry in in_use:
            if not cache.hit(entry):  # what create_session does: optimize, write, commit
                optimized.append(entry.name)
                temp = cache.writable_temp(entry)
                assert temp is not None
                temp.write_bytes(b"y")  # mtime: this start's clock
                cache.commit(temp, entry)
        assert optimized == ([in_use[6].name] if start == 0 else []), (start, optimized)
        assert all(entry.exists() for entry in in_use)
    assert len(_entries(tmp_path)) == MAX_ENTRIES


def test_default_directory(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHE_DIRECTORY", f"{tmp_path}/a:{tmp_path}/b")
    assert default_graph_cache() == tmp_path / "a" / "onnx"
    monkeypatch.delenv("CACHE_DIRECTORY")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_graph_cache() == tmp_path / "x" / "voiced" / "onnx"

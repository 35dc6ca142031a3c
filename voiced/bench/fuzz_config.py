"""Config fuzzing from the schema: every key of :class:`voiced.config.Config`, found by walking its
dataclasses (so a key added later is fuzzed without touching this file), given wrong types,
out-of-range and odd values, and unknown keys beside it at every level.

:func:`sweep` is the deterministic part (every key x every edge value of its type);
:func:`mutations` the Hypothesis strategy (a random key, a random value).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from voiced.bench.fuzz_files import VALID_CONFIG, config_text, toml_value

__all__ = ["KEYS", "Mutation", "accepted_nonsense", "edge_values", "mutations", "render", "sweep"]

Mutation = tuple[tuple[str, ...], Any]
"""A key path (``("vad", "endpoint", "onset_threshold")``) and the value it is given."""

_UNKNOWN = object()


def _schema(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.name == "path":
            continue
        hint = hints[f.name]
        # types that parse their own table (named lists) are fuzzed as a whole, not walked
        if dataclasses.is_dataclass(hint) and not callable(getattr(hint, "from_config", None)):
            yield from _schema(hint, prefix + (f.name,))
        else:
            yield prefix + (f.name,), hint


def _keys() -> dict[tuple[str, ...], Any]:
    from voiced.config import Config

    return dict(_schema(Config))


KEYS: dict[tuple[str, ...], Any] = _keys()
"""Every key path of the config file and its annotation."""

_NUMBERS = [0, -1, 1, -(2**63), 2**63 - 1, 10**30, 0.5, -0.0, 1e308, -1e308, math.inf, -math.inf, math.nan]
_STRINGS = ["", " ", "/", "a/b", "+", "#", "\u0000", "\ud800", "\u202e\ufeff", "é" * 3, "x" * 20_000, "~", "..",
            "/nonexistent/file", "-1", "true"]
_WRONG = [True, "1", [1], {"a": 1}, [], {}, 1.5]


def edge_values(hint: Any) -> list[Any]:
    """Values worth trying for a key of type ``hint``: wrong types and the edges of its own type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for a in args:
            if a is not type(None):
                out += [v for v in edge_values(a) if not any(v is o or (v == o and type(v) is type(o)) for o in out)]
        return out
    if origin in (tuple, list):
        item = edge_values(args[0] if args else str)
        return ["single", [], [[]], [{}], item[:6], [item[0]] * 300] + [[v] for v in item]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        first = next(iter(hint)).value
        return [first.upper() if isinstance(first, str) else first, "", "nope", 0, None, [first]] + _WRONG
    if hint is bool:
        return [0, 1, "true", "yes", None, [True]]
    if hint in (int, float):
        return _NUMBERS + ["1", True, [1], {}]
    if hint in (str, Path):
        return _STRINGS + [0, 1.5, False, [], {}]
    return _NUMBERS[:4] + _STRINGS[:6] + _WRONG  # a type that parses itself (named lists)


def render(m: Mutation) -> bytes:
    """A valid config with one key (maybe unknown, maybe a whole table) set to a value; ``None``
    leaves the key out (TOML has no null), which tests its default beside the other keys."""
    config: dict[str, Any] = {s: dict(k) for s, k in VALID_CONFIG.items()}
    path, value = m
    if len(path) == 1:  # a whole section: not a table, or an unknown one
        config.pop(path[0], None)
        text = config_text(config) + f"{json.dumps(path[0])} = {toml_value(value)}\n"
        return text.encode("utf-8", "surrogatepass")
    table: Any = config
    for part in path[:-1]:
        nxt = table.get(part)
        if not isinstance(nxt, dict):
            nxt = table[part] = {}
        table = nxt
    if value is None:
        table.pop(path[-1], None)
    else:
        table[path[-1]] = value
    return config_text(config).encode("utf-8", "surrogatepass")


def sweep() -> Iterator[Mutation]:
    """Every key with every edge value of its type, and an unknown key beside it, in a fixed order."""
    tables = sorted({p[:-1] for p in KEYS if len(p) > 1})
    for path, hint in KEYS.items():
        for value in edge_values(hint):
            yield path, value
    for table in tables:
        yield table + ("no_such_key",), 1
        yield table + ("",), 1
    yield ("no_such_section",), {"a": 1}
    for section in sorted({p[0] for p in KEYS}):
        yield (section,), 1  # a section that is not a table
        yield (section,), ["a"]


def mutations() -> st.SearchStrategy[Mutation]:
    """A random key (or a new one beside them) and a random value (odd JSON-like values included)."""
    from voiced.bench.fuzz_cases import json_values

    known = sorted(KEYS)
    typed = st.sampled_from(known).flatmap(lambda p: st.tuples(st.just(p), st.sampled_from(edge_values(KEYS[p]))))
    anything = st.tuples(st.sampled_from(known), json_values.filter(lambda v: v is not None))
    tables = sorted({p[:-1] for p in KEYS if len(p) > 1})
    unknown = st.tuples(st.sampled_from(tables), st.text(min_size=1, max_size=8)).filter(
        lambda t: t[0] + (t[1].replace("-", "_"),) not in KEYS).map(lambda t: (t[0] + (t[1],), 1))
    return typed | anything | unknown


def accepted_nonsense(config: object) -> str | None:
    """A value no key should load with (NaN or an infinity; a NUL in text); None when there is none."""
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            found = accepted_nonsense(value)
            if found:
                return f"{f.name}.{found}"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{f.name} = {value}"
        elif isinstance(value, (str, Path)) and "\0" in str(value):
            return f"{f.name} holds a NUL"
        elif isinstance(value, tuple) and any(isinstance(v, float) and not math.isfinite(v) for v in value):
            return f"{f.name} holds {value}"
    return None

"""Turning TOML tables into frozen dataclasses, with errors that name the key and the file.

Every config section is a frozen dataclass; :func:`section_from_dict` fills one from a
table, converting by the field's annotation (bool, int, float, str, Path, Enum, tuples, tables
of name = value, optional values, nested dataclasses, types with a ``from_config`` classmethod) and refusing
unknown keys, so a typo is reported instead of silently ignored.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from voiced.errors import ConfigError

__all__ = ["read_toml", "section_from_dict"]

T = TypeVar("T")


def read_toml(path: Path, key: str) -> dict[str, Any]:
    """Parse TOML file ``path``; every failure is a ConfigError naming ``key`` and the file."""
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) is not part of the TOML
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise ConfigError(key, "file not found", str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(key, f"cannot read: {exc}", str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(key, f"not valid TOML: {exc}", str(path)) from None


def section_from_dict(cls: type[T], data: Mapping[str, Any], prefix: str, source: str | None = None) -> T:
    """Build dataclass ``cls`` from ``data``; ``prefix`` is the TOML table name used in errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(prefix or "config", f"must be a table, got {type(data).__name__}", source)
    dot = f"{prefix}." if prefix else ""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{dot}{key}", f"unknown key (known: {known})", source)
        kwargs[name] = _convert(value, hints[name], f"{dot}{key}", source)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        key = exc.key if "." in exc.key else f"{dot}{exc.key}"
        raise ConfigError(key, exc.problem, exc.source or source) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(prefix or "config", str(exc), source) from None
    except OSError as exc:
        # a section's check of a file it names (a name too long for the file system, say)
        name = str(exc.filename or "")
        name = name if len(name) <= 120 else name[:60] + "..." + name[-40:]
        raise ConfigError(prefix or "config", f"cannot check {name!r}: {exc.strerror}", source) from None


def _convert(value: Any, hint: Any, key: str, source: str | None) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(value, option, key, source)
            except ConfigError as exc:
                errors.append(exc.problem)
        raise ConfigError(key, "; ".join(errors), source)
    if origin in (tuple, list):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"must be a list, got {value!r}", source)
        item = args[0] if args else Any
        return tuple(_convert(v, item, f"{key}[{i}]", source) for i, v in enumerate(value))
    if origin is dict:  # a table of name = value (e.g. one threshold per wake word)
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"must be a table (name = value), got {value!r}", source)
        return {str(k): _convert(v, args[1], f"{key}.{k}", source) for k, v in value.items()}
    if hint is Any:
        return value
    if isinstance(hint, type) and callable(getattr(hint, "from_config", None)):
        # A type that parses its own table (e.g. named lists): from_config(value, key, source).
        return hint.from_config(value, key, source)
    if dataclasses.is_dataclass(hint):
        return section_from_dict(hint, value, key, source)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in hint)
            raise ConfigError(key, f"must be one of {choices}, got {value!r}", source) from None
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {value!r}", source)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"must be an integer (a whole number), got {value!r}", source)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be a number, got {value!r}", source)
        # TOML has nan and inf; no setting means them, and nan passes every range check
        if not math.isfinite(value):
            raise ConfigError(key, f"must be a finite number, got {value!r}", source)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"must be a string, got {value!r}", source)
        if "\0" in value:  # no name, host, device or topic holds one; C libraries stop reading there
            raise ConfigError(key, "must not contain a NUL character", source)
        return value
    if hint is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"must be a path string, got {value!r}", source)
        if "\0" in value:
            raise ConfigError(key, "must not contain a NUL character", source)
        return Path(value).expanduser()
    raise ConfigError(key, f"unsupported setting type {hint!r}", source)

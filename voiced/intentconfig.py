"""The ``[intents]`` section: template files, the built-in sentence set, and the names it needs.

Kept apart from ``voiced.intents`` so reading the config never imports hassil, and apart
from ``voiced.config`` so ``voiced.intents`` can use it without an import circle.

List entries (``[intents.lists]`` and list files) are either a plain phrase or a table as
in hassil's list files::

    [intents.lists]
    name = ["kitchen light", { in = "telly", out = "living room tv", context = { domain = "media_player" } }]
    area = ["kitchen", "living room"]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from voiced.errors import ConfigError
from voiced.yamlfile import load_yaml

__all__ = ["BuiltinSet", "IntentsSection", "ListValue", "SlotLists"]

_ENTRY_KEYS = frozenset({"in", "out", "context"})


class BuiltinSet(Enum):
    """Sentence sets voiced can load without a template file."""

    NONE = "none"
    """Only the user's template files."""
    HOME_ASSISTANT = "home-assistant"
    """Home Assistant's own sentences (the ``home-assistant-intents`` package) for ``language``."""


@dataclass(frozen=True)
class ListValue:
    """One value of a slot list: what is said, what the slot gets, and its context."""

    text: str
    """The phrase as spoken (hassil's ``in``); matched without case or punctuation."""
    value: str
    """The slot value (hassil's ``out``); the phrase itself unless given."""
    context: Mapping[str, Any] = field(default_factory=dict)
    """hassil context, e.g. ``{"domain": "light"}``: only sentences for that domain take this name."""

    @property
    def domain(self) -> str | None:
        """The Home Assistant domain of a name (``light``, ``lock``…), or None when not given."""
        domain = self.context.get("domain")
        return domain if isinstance(domain, str) else None

    def as_tuple(self) -> tuple[str, str, dict[str, Any]]:
        """``(in, out, context)`` as ``hassil.TextSlotList.from_tuples`` takes it."""
        return (self.text, self.value, dict(self.context))


def parse_list_values(raw: Any, key: str, source: str | None) -> tuple[ListValue, ...]:
    """The entries of one list; a ConfigError names ``key[i]`` and ``source`` for a bad one."""
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise ConfigError(key, f"must be a list of phrases, got {raw!r}", source)
    values: list[ListValue] = []
    for i, entry in enumerate(raw):
        where = f"{key}[{i}]"
        if isinstance(entry, str):
            text, out, context = entry, entry, {}
        elif isinstance(entry, Mapping):
            unknown = set(entry) - _ENTRY_KEYS
            if unknown:
                raise ConfigError(where, f"unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                                  "(known: in, out, context)", source)
            text, out, context = entry.get("in"), entry.get("out", entry.get("in")), entry.get("context", {})
            if not isinstance(out, str):
                raise ConfigError(where, f"'out' must be text, got {out!r}", source)
            if not isinstance(context, Mapping):
                raise ConfigError(where, f"'context' must be a table, got {context!r}", source)
        else:
            raise ConfigError(where, f"must be a phrase or a table with 'in', got {entry!r}", source)
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(where, f"the phrase must be non-empty text, got {text!r}", source)
        values.append(ListValue(" ".join(text.split()), out.strip(), dict(context)))
    return tuple(values)


@dataclass(frozen=True)
class SlotLists:
    """Named slot lists given in the config or in list files (list name → values)."""

    lists: Mapping[str, tuple[ListValue, ...]] = field(default_factory=dict)
    """List name (``name``, ``area``, ``floor``…) → its values, in the order given."""

    @classmethod
    def from_config(cls, raw: Any, key: str, source: str | None = None) -> SlotLists:
        """From the ``[intents.lists]`` table (``key`` is its name in errors)."""
        if not isinstance(raw, Mapping):
            raise ConfigError(key, f"must be a table of lists (name = [...]), got {raw!r}", source)
        lists: dict[str, tuple[ListValue, ...]] = {}
        for name, values in raw.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ConfigError(f"{key}.{name}", "a list name is letters, digits and '_'", source)
            lists[name] = parse_list_values(values, f"{key}.{name}", source)
        return cls(lists)

    @classmethod
    def from_file(cls, path: str | Path) -> SlotLists:
        """A YAML list file: a mapping of list name → entries, as ``[intents.lists]`` holds them."""
        source = str(path)
        try:
            with open(path, encoding="utf-8") as f:
                data = load_yaml(f)
        except OSError as exc:
            raise ConfigError("intents.list_files", f"cannot read {path}: {exc.strerror}", source) from None
        except UnicodeDecodeError as exc:
            raise ConfigError("intents.list_files", f"{path} is not UTF-8 text: {exc}", source) from None
        except yaml.YAMLError as exc:
            raise ConfigError("intents.list_files", f"{path} is not valid YAML: {exc}", source) from None
        if not isinstance(data, Mapping):
            raise ConfigError("intents.list_files", f"{path} must map list names to lists (name: [...])", source)
        return cls.from_config(data, "lists", source)

    def updated(self, other: SlotLists) -> SlotLists:
        """These lists with ``other``'s replacing any of the same name."""
        return SlotLists({**self.lists, **other.lists})

    def __bool__(self) -> bool:
        return bool(self.lists)


@dataclass(frozen=True)
class IntentsSection:
    """Where sentences come from. With no templates and ``builtin = "none"`` intents are off:
    transcripts are still published, and every query is answered with intentNotRecognized."""

    templates: tuple[str, ...] = ()
    """hassil YAML files, folders or glob patterns (relative paths are relative to the config file)."""
    builtin: BuiltinSet = BuiltinSet.NONE
    """``home-assistant``: Home Assistant's own sentences for ``language``, merged under the templates; ``none``."""
    language: str | None = None
    """Language of the built-in set (default ``en``); when set, the template files must be in it too."""
    lists: SlotLists = field(default_factory=SlotLists)
    """[intents.lists]: ``name = [...]``, ``area = [...]``, ``floor = [...]``…; replaces lists of the same name."""
    list_files: tuple[str, ...] = ()
    """YAML files of lists (``name: [...]``), read in order; ``[intents.lists]`` wins over them."""
    site_area: str | None = None
    """The area this device stands in: sentences that name no area ("turn on the lights") use it."""
    exclude: tuple[str, ...] = ()
    """Built-in intents to leave out, e.g. ``["HassBroadcast", "HassShoppingListAddItem"]``."""

    def __post_init__(self) -> None:
        if self.language is not None and not self.language.strip():
            raise ConfigError("language", "must be a language code such as 'en', got an empty string")
        if self.exclude and self.builtin is BuiltinSet.NONE:
            raise ConfigError("exclude", "leaves out built-in intents: set builtin = 'home-assistant' too")
        if self.site_area is not None and not self.site_area.strip():
            raise ConfigError("site_area", "must be an area name, got an empty string")

    @property
    def enabled(self) -> bool:
        """False when there is nothing to recognize intents with (transcription only)."""
        return bool(self.templates) or self.builtin is not BuiltinSet.NONE

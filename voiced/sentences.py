"""Where sentences come from: template files, Home Assistant's built-in set, and the config's lists.

:func:`assemble` merges them into one hassil document; :func:`compile_sentences` turns that
into hassil ``Intents`` ready to match. The merge, from lowest to highest priority:

1. the built-in set (``[intents] builtin = "home-assistant"``), minus ``exclude``;
2. the user's template files, which win over it:
   - intents: a file's data blocks join the built-in blocks of the same intent, and when a
     user sentence and a built-in sentence both match a text, the user's intent is chosen
     (the preference Home Assistant gives its ``custom_sentences``);
   - ``lists`` and ``expansion_rules``: a file's list or rule replaces the built-in one of
     the same name (a replaced rule changes the built-in sentences that use it too);
   - ``skip_words`` are added;
3. list files (``list_files``, in order), then ``[intents.lists]``: each replaces the list of
   the same name, values taken literally (no template syntax, as Home Assistant feeds names).

A list that sentences use and nothing fills is a wildcard (matches any text) when one of
the user's files uses it, and otherwise empty: the built-in sentences needing it are off.
Each such list is logged once per load, as a warning when built-in sentences lose it.

Home Assistant's sentences for a device name require the name's domain (``turn on {name}``
only for lights, switches, fans…; ``unlock {name}`` only for locks). A name given with
``context = {domain = "lock"}`` takes only the sentences of its domain; a name without one
takes every name sentence, and Home Assistant decides what it is when it handles the intent.
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from voiced.errors import ConfigError
from voiced.intentconfig import BuiltinSet, IntentsSection, SlotLists
from voiced.yamlfile import load_yaml

if TYPE_CHECKING:
    from hassil import Intents
    from hassil.expression import Expression

__all__ = ["USER_SENTENCE", "Sentences", "assemble", "compile_sentences", "expand_paths", "walk"]

log = logging.getLogger(__name__)

USER_SENTENCE = "voiced_user_sentence"
"""Metadata key on every data block of a user file: recognition prefers results carrying it."""

DEFAULT_LANGUAGE = "en"

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class Sentences:
    """One merged hassil document and where its parts came from."""

    data: dict[str, Any]
    """The hassil document (``language``, ``intents``, ``lists``, ``expansion_rules``, ``skip_words``)."""
    files: tuple[Path, ...]
    """The user's template files, in load order."""
    builtin: BuiltinSet
    """The built-in set merged under them."""
    literal_lists: frozenset[str]
    """Lists from ``[intents.lists]`` or list files: their phrases are text, never templates."""
    user_lists: frozenset[str]
    """Lists defined by the user's template files."""
    source: str | None
    """The config file, for messages."""

    @property
    def language(self) -> str:
        return str(self.data["language"])


def assemble(section: IntentsSection, source: str | None = None) -> Sentences:
    """Merge the built-in set, the template files and the lists of ``section``; nothing compiled yet.

    Raises ConfigError naming the key and the file for anything wrong in them.
    """
    files = expand_paths(section.templates) if section.templates else ()
    user = _merge_user_files(files)
    if section.builtin is BuiltinSet.NONE and section.language is None and "language" not in user:
        raise ConfigError("language", "no template file sets the language (or set [intents] language)",
                          ", ".join(map(str, files)))
    language = section.language or user.get("language") or DEFAULT_LANGUAGE
    if "language" in user and _base_language(user["language"]) != _base_language(language):
        raise ConfigError("language", f"template files are in {user['language']!r}, [intents] says {language!r}",
                          ", ".join(map(str, files)))
    language = user.get("language", language)  # "en" files under language = "en-US"
    if section.builtin is BuiltinSet.HOME_ASSISTANT:
        data = _home_assistant(language, section.exclude, source)
        language = data["language"]  # the variant found: "en" for "en-US"
        for name, body in (user.get("intents") or {}).items():
            data["intents"].setdefault(name, {"data": []})["data"].extend(body["data"])
        data["lists"].update(user.get("lists") or {})
        data["expansion_rules"].update(user.get("expansion_rules") or {})
        data["skip_words"] = list(dict.fromkeys([*data.get("skip_words", []), *(user.get("skip_words") or [])]))
    else:
        data = {**user, "intents": dict(user.get("intents") or {}), "lists": dict(user.get("lists") or {}),
                "expansion_rules": dict(user.get("expansion_rules") or {})}
    data["language"] = language
    lists = SlotLists()
    for path in section.list_files:
        lists = lists.updated(SlotLists.from_file(path))
    lists = lists.updated(section.lists)
    for name, values in lists.lists.items():
        data["lists"][name] = {"values": [{"in": v.text, "out": v.value, "context": dict(v.context)} for v in values]}
    return Sentences(data, files, section.builtin, frozenset(lists.lists), frozenset(user.get("lists") or {}), source)


def compile_sentences(sentences: Sentences) -> tuple[Intents, dict[str, Any]]:
    """hassil Intents from a merged document: unfilled lists settled, names filtered by domain;
    and the document with the unfilled lists settled (wildcard or empty), as matched.

    Raises ConfigError for templates hassil cannot take (an undefined rule, a bad list).
    """
    from hassil import Intents
    from hassil.parser import ParseError

    data = sentences.data
    where = ", ".join(map(str, sentences.files)) or sentences.source
    try:
        _check_ranges(data)
        intents = Intents.from_dict(_without_values(data, sentences.literal_lists))
        unfilled = _unfilled_lists(intents)
        if unfilled:
            lists = dict(data["lists"])
            for name, used_by_user in sorted(unfilled.items()):
                if used_by_user:
                    log.info("list {%s} is used by templates but defined nowhere: it matches any text", name)
                    lists[name] = {"wildcard": True}
                else:
                    log.warning("list {%s} is empty: the built-in sentences that use it are off "
                                "(fill it with [intents.lists] %s = [...])", name, name)
                    lists[name] = {"values": []}
            # Rebuilt rather than patched: hassil orders wildcard sentences at construction.
            data = {**data, "lists": lists}
            intents = Intents.from_dict(_without_values(data, sentences.literal_lists))
    except ConfigError as exc:
        raise ConfigError(exc.key, exc.problem, where) from None
    except (KeyError, TypeError, ValueError, AttributeError, ParseError, AssertionError, IndexError) as exc:
        # a list value from the config is parsed as a template here first ("k(tchen light")
        raise ConfigError("intents", f"malformed templates: {exc!r}", where) from None
    _literal_lists(intents, data, sentences.literal_lists)
    _names_by_domain(intents)
    return intents, data


MAX_RANGE_VALUES = 10_000
"""Numbers one range list may hold: hassil spells each one out in words at the first number said
in words (0..10**9 grew without bound; 0..100,000 took 22 s and 500 MB)."""


def _without_values(data: dict, literal: Iterable[str]) -> dict:
    """``data`` with the config's lists empty: hassil parses every list value as a template ("TV
    (den" failed as a group never closed); ``_literal_lists`` puts them back as plain text."""
    names = set(literal)
    return {**data, "lists": {name: {"values": []} if name in names else spec for name, spec in data["lists"].items()}}


def _check_ranges(data: dict) -> None:
    """A range list hassil would refuse with a bare AssertionError ("start cannot be greater than
    stop"), or one too large to spell out, said with the list's name."""
    lists = data.get("lists")
    for name, spec in (lists.items() if isinstance(lists, dict) else ()):
        bounds = spec.get("range") if isinstance(spec, dict) else None
        if not (isinstance(bounds, dict) and isinstance(bounds.get("from"), (int, float))
                and isinstance(bounds.get("to"), (int, float))):
            continue
        start, stop, step = bounds["from"], bounds["to"], bounds.get("step", 1)
        if start > stop:
            raise ConfigError(f"lists.{name}.range", f"from {start} is greater than to {stop}")
        if isinstance(step, (int, float)) and step > 0 and (stop - start) / step + 1 > MAX_RANGE_VALUES:
            raise ConfigError(f"lists.{name}.range", f"{start}..{stop} holds {int((stop - start) / step) + 1:,} "
                              f"numbers; at most {MAX_RANGE_VALUES:,} (each is spelled out in words), or use a "
                              "wildcard list")


# -- sources --------------------------------------------------------------------------------------


def _base_language(code: str) -> str:
    """``en`` for ``en``, ``en-US`` and ``en_US``."""
    return str(code).replace("_", "-").split("-")[0].lower()


def _home_assistant(language: str, exclude: Iterable[str], source: str | None) -> dict[str, Any]:
    """Home Assistant's sentences for ``language`` (``en-US`` falls back to ``en``), without responses."""
    try:
        import home_assistant_intents as hai
    except ImportError:  # a dependency; missing only in a broken install
        raise ConfigError("intents.builtin", "the home-assistant-intents package is not installed "
                          "(pip install home-assistant-intents)", source) from None
    data = None
    for variant in dict.fromkeys((language, language.replace("_", "-"), _base_language(language))):
        data = hai.get_intents(variant)
        if data is not None:
            break
    if data is None:
        raise ConfigError("intents.language", f"home-assistant-intents has no sentences for {language!r} "
                          f"(it has: {', '.join(hai.get_languages())})", source)
    data.pop("responses", None)  # spoken answers are Home Assistant's job, not voiced's
    unknown = sorted(set(exclude) - set(data["intents"]))
    if unknown:
        raise ConfigError("intents.exclude", f"not built-in intents: {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(data['intents']))})", source)
    for name in exclude:
        del data["intents"][name]
    data.setdefault("lists", {})
    data.setdefault("expansion_rules", {})
    return data


def _merge_user_files(files: tuple[Path, ...]) -> dict[str, Any]:
    """The template files merged in order (later files extend earlier ones), each block marked as the user's."""
    from hassil import merge_dict

    merged: dict[str, Any] = {}
    for path in files:
        data = read_template_file(path)
        if "language" in merged and "language" in data and data["language"] != merged["language"]:
            raise ConfigError("language", f"{data['language']!r} differs from {merged['language']!r}", str(path))
        for body in (data.get("intents") or {}).values():
            for block in body["data"]:
                block["metadata"] = {**(block.get("metadata") or {}), USER_SENTENCE: True}
        merge_dict(merged, data)
    return merged


def expand_paths(patterns: Iterable[str]) -> tuple[Path, ...]:
    """Template files from paths, folders (their ``*.yaml``/``*.yml``) and glob patterns."""
    files: list[Path] = []
    for pattern in patterns:
        if _GLOB_CHARS & set(pattern):
            matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
            if not matches:
                raise ConfigError("intents", f"no template file matches {pattern}", pattern)
            files.extend(matches)
        elif Path(pattern).is_dir():
            files.extend(sorted(Path(pattern).glob("*.yaml")) + sorted(Path(pattern).glob("*.yml")))
        elif Path(pattern).is_file():
            files.append(Path(pattern))
        else:
            raise ConfigError("intents", f"template file {pattern} does not exist", pattern)
    return tuple(dict.fromkeys(files))


_BLOCK_MAPPINGS = ("slots", "requires_context", "excludes_context", "metadata", "lists", "expansion_rules")
"""The keys of a template block that hold a mapping (name: value) when present."""


def read_template_file(path: Path) -> dict[str, Any]:
    """One template file, parsed and checked, so errors can name it."""
    from hassil import parse_sentence
    from hassil.parser import ParseError

    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = load_yaml(f)
    except OSError as exc:
        raise ConfigError("intents", f"cannot read {path}: {exc.strerror}", source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError("intents", f"{path} is not UTF-8 text: {exc}", source) from None
    except yaml.YAMLError as exc:
        raise ConfigError("intents", f"{path} is not valid YAML: {exc}", source) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("intents", f"{path} must hold a mapping at the top level", source)
    for section in ("intents", "lists", "expansion_rules"):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(section, "must be a mapping", source)
    skip_words = data.get("skip_words", [])
    if not isinstance(skip_words, list) or not all(isinstance(w, str) for w in skip_words):
        raise ConfigError("skip_words", "must be a list of words", source)
    templates: list[tuple[str, str]] = [(f"expansion_rules.{k}", v) for k, v in data.get("expansion_rules", {}).items()]
    for name, body in data.get("intents", {}).items():
        if not isinstance(name, str):  # YAML 1.1 reads On, Off, Yes, No as booleans, 1 as a number
            raise ConfigError(f"intents.{name}", f"an intent name must be text, YAML read this one as {name!r}: "
                              "put it in quotes", source)
        blocks = body.get("data") if isinstance(body, dict) else None
        if not isinstance(blocks, list):
            raise ConfigError(f"intents.{name}", "needs a list under 'data'", source)
        for i, block in enumerate(blocks):
            sentences = block.get("sentences") if isinstance(block, dict) else None
            if not isinstance(sentences, list):
                raise ConfigError(f"intents.{name}.data[{i}]", "needs a list under 'sentences'", source)
            for key in _BLOCK_MAPPINGS:  # hassil reads them as mappings at the first match, not at load
                if not isinstance(block.get(key, {}), dict):
                    raise ConfigError(f"intents.{name}.data[{i}].{key}", "must be a mapping", source)
            templates += [(f"intents.{name}.data[{i}].sentences", s) for s in sentences]
    for name, body in data.get("lists", {}).items():  # a value's "in" text is a template to hassil too
        if not isinstance(body, dict) or not {"values", "range", "wildcard"} & body.keys():
            raise ConfigError(f"lists.{name}", "must be a mapping with values, range or wildcard", source)
        values = body.get("values", [])
        if not isinstance(values, list):
            raise ConfigError(f"lists.{name}.values", "must be a list", source)
        if "range" in body and not isinstance(body["range"], dict):
            raise ConfigError(f"lists.{name}.range", "must be a mapping with from and to", source)
        for i, value in enumerate(values):
            if isinstance(value, dict) and "in" not in value:
                raise ConfigError(f"lists.{name}.values[{i}]", "needs 'in' (what is said)", source)
            text = value.get("in") if isinstance(value, dict) else value
            if isinstance(text, str):
                templates.append((f"lists.{name}.values[{i}]", text))
    for key, template in templates:
        if not isinstance(template, str):
            raise ConfigError(key, f"must be text, got {template!r}", source)
        try:
            parse_sentence(template, keep_text=True)
        except (ParseError, AssertionError, ValueError, IndexError) as exc:  # hassil asserts on some input ("[]")
            raise ConfigError(key, f"template {template!r} does not parse: {exc!r}", source) from None
    return data


# -- after hassil parsed it ----------------------------------------------------------------------------


def _unfilled_lists(intents: Intents) -> dict[str, bool]:
    """Lists the sentences use that nothing defines → whether a user sentence uses it.

    Also checks every expansion rule a sentence uses exists.
    """
    from hassil.expression import ListReference, RuleReference

    missing: dict[str, bool] = {}
    for intent in intents.intents.values():
        for data in intent.data:
            rules = {**intents.expansion_rules, **data.expansion_rules}
            known = set(intents.slot_lists) | set(data.slot_lists)
            by_user = bool((data.metadata or {}).get(USER_SENTENCE))
            for sentence in data.sentences:
                for ref in walk(sentence.expression, rules, set()):
                    if isinstance(ref, RuleReference) and ref.rule_name not in rules:
                        raise ConfigError(
                            f"intents.{intent.name}", f"template {sentence.text!r} uses undefined rule <{ref.rule_name}>"
                        )
                    if isinstance(ref, ListReference) and not ref.is_inline_range and ref.list_name not in known:
                        missing[ref.list_name] = missing.get(ref.list_name, False) or by_user
    return missing


def _literal_lists(intents: Intents, data: Mapping[str, Any], names: Iterable[str]) -> None:
    """Config lists as literal phrases: "TV (den)" is a name, not a template with a group."""
    from hassil import TextSlotList

    for name in names:
        values = data["lists"][name]["values"]
        intents.slot_lists[name] = TextSlotList.from_tuples(
            [(v["in"], v["out"], v["context"]) for v in values], allow_template=False, name=name)


def _names_by_domain(intents: Intents) -> None:
    """Give each block that requires a domain its own ``name`` list: the names of that domain
    and the names with no domain. The context check would otherwise refuse names without one."""
    from hassil import TextSlotList, WildcardSlotList

    names = intents.slot_lists.get("name")
    if not isinstance(names, (TextSlotList, WildcardSlotList)):
        return
    cache: dict[frozenset[str], TextSlotList] = {}
    for intent in intents.intents.values():
        for data in intent.data:
            wanted = (data.requires_context or {}).get("domain")
            if wanted is None or "name" in data.slot_lists:
                continue
            domains = frozenset([wanted] if isinstance(wanted, str) else wanted)
            if isinstance(names, TextSlotList):
                if domains not in cache:
                    cache[domains] = TextSlotList(name="name", values=[
                        v for v in names.values if (v.context or {}).get("domain") in (None, *domains)])
                data.slot_lists["name"] = cache[domains]
            data.requires_context.pop("domain")  # IntentData is frozen; its dict is not


def walk(expr: Expression, rules: Mapping[str, Any], active: set[str] | tuple[str, ...]) -> Iterator[Expression]:
    """Every expression under ``expr``, expanding rules. A rule that refers to itself, directly or
    through others, is a ConfigError: hassil's matcher and the sentence automaton would recurse
    until Python's stack runs out (a traceback at the first query, or a daemon killed by a reload)."""
    from hassil.expression import Group, RuleReference

    path = tuple(active)
    yield expr
    if isinstance(expr, Group):
        for item in expr.items:
            yield from walk(item, rules, path)
    elif isinstance(expr, RuleReference) and expr.rule_name in rules:
        if expr.rule_name in path:
            loop = " -> ".join(f"<{name}>" for name in (*path[path.index(expr.rule_name):], expr.rule_name))
            raise ConfigError(f"expansion_rules.{expr.rule_name}", f"refers to itself ({loop})")
        yield from walk(rules[expr.rule_name].expression, rules, (*path, expr.rule_name))

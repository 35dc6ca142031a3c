"""Transcripts → intents with hassil templates (Home Assistant's sentence format).

Template files are YAML as in Home Assistant's ``intents`` repository::

    language: en
    intents:
      HassTurnOn:
        data:
          - sentences: ["turn on [the] {name}"]
    lists:
      area:
        values: [{in: "living room", out: living_room}, kitchen]
    expansion_rules:
      the: "[the]"

A list referenced by a template but defined in no file becomes a wildcard, so
``turn on [the] {name}`` works without a list of every device name. Matching ignores
case and punctuation, since ASR output is often upper-case without punctuation.
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from voiced.errors import ConfigError

if TYPE_CHECKING:  # hassil is imported where it is used: nothing heavy at import time
    from hassil import Intents, RecognizeResult
    from hassil.expression import Expression

__all__ = ["Intent", "IntentRecognizer", "IntentSource", "Slot", "SlotKind"]

log = logging.getLogger(__name__)

_GLOB_CHARS = frozenset("*?[")


class IntentSource(Enum):
    """Which recognizer produced an intent."""

    TEMPLATE = "template"
    """A hassil sentence template matched."""
    LLM = "llm"
    """The local language model chose the intent."""
    CLOUD = "cloud"
    """The cloud fallback chose the intent."""


class SlotKind(Enum):
    """Where a slot value came from."""

    LIST = "list"
    """A value of a ``values`` list (``value`` is the list's ``out``)."""
    NUMBER = "number"
    """A number of a ``range`` list (``value`` is an int or float)."""
    WILDCARD = "wildcard"
    """Free text matched by a wildcard list (``value`` is the text without punctuation)."""
    FIXED = "fixed"
    """A value the template's ``slots:`` sets; it is not in the input text."""


@dataclass(frozen=True)
class Slot:
    """One named value of an intent."""

    name: str
    """Slot name (``{area:room}`` → ``room``)."""
    entity: str
    """Name of the list the value came from (``{area:room}`` → ``area``)."""
    raw_value: str
    """The words of the input text that matched, as they were written."""
    value: Any
    """The normalized value: a list's ``out``, a number, or the cleaned wildcard text."""
    kind: SlotKind
    """Where the value came from."""
    start: int | None
    """Index of the first character of ``raw_value`` in the input text (None for FIXED)."""
    end: int | None
    """Index just after the last character of ``raw_value`` (None for FIXED)."""


@dataclass(frozen=True)
class Intent:
    """What an utterance asks for."""

    name: str
    """Intent name, e.g. ``HassTurnOn``."""
    text: str
    """The input text, unchanged; slot ranges index into it."""
    slots: tuple[Slot, ...]
    """Slots in order of appearance; FIXED slots last."""
    confidence: float
    """How sure the recognizer is, in [0, 1]; a template match is 1.0."""
    source: IntentSource = IntentSource.TEMPLATE
    """Which recognizer produced it."""

    def slot(self, name: str) -> Slot | None:
        """The first slot called ``name``, or None."""
        return next((s for s in self.slots if s.name == name), None)

    @property
    def slot_values(self) -> dict[str, Any]:
        """Slot name → normalized value (the first one when a name repeats)."""
        values: dict[str, Any] = {}
        for s in self.slots:
            values.setdefault(s.name, s.value)
        return values


class IntentRecognizer:
    """Loaded templates; ``recognize`` is thread-safe (nothing changes after load)."""

    def __init__(self, intents: Intents, patterns: tuple[str, ...], files: tuple[Path, ...]) -> None:
        self._intents = intents
        self.patterns = patterns
        """The paths or glob patterns this recognizer was loaded from."""
        self.files = files
        """The template files, in load order."""

    @classmethod
    def load(cls, paths: Sequence[str | Path]) -> IntentRecognizer:
        """Load template files, directories (their ``*.yaml``) or glob patterns.

        Later files extend earlier ones (intents, lists and rules merge by name).
        Raises ConfigError naming the file for a missing file, bad YAML, a wrong
        structure, a template that does not parse or an undefined expansion rule.
        """
        from hassil import Intents, merge_dict

        patterns = tuple(str(p) for p in paths)
        files = _expand(patterns)
        merged: dict[str, Any] = {}
        for path in files:
            data = _read_file(path)
            if "language" in merged and "language" in data and data["language"] != merged["language"]:
                raise ConfigError("language", f"{data['language']!r} differs from {merged['language']!r}", str(path))
            merge_dict(merged, data)
        if "language" not in merged:
            raise ConfigError("language", "no template file sets the language", ", ".join(map(str, files)))
        merged.setdefault("intents", {})
        try:
            intents = Intents.from_dict(merged)
            undefined = sorted(_undefined_lists(intents))
            if undefined:
                for name in undefined:
                    log.info("list {%s} is used by templates but defined nowhere: it matches any text", name)
                lists = dict(merged.get("lists") or {})
                lists.update({name: {"wildcard": True} for name in undefined})
                # Rebuilt rather than patched: hassil orders wildcard sentences at construction.
                intents = Intents.from_dict({**merged, "lists": lists})
        except ConfigError as exc:
            raise ConfigError(exc.key, exc.problem, ", ".join(map(str, files))) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError("intents", f"malformed templates: {exc!r}", ", ".join(map(str, files))) from None
        log.info("loaded %d intents from %d template files", len(intents.intents), len(files))
        return cls(intents, patterns, files)

    def reload(self) -> IntentRecognizer:
        """Load the same paths again (a new recognizer; this one is unchanged)."""
        return IntentRecognizer.load(self.patterns)

    @property
    def language(self) -> str:
        """The templates' language code."""
        return str(self._intents.language)

    @property
    def templates(self) -> Intents:
        """The parsed hassil templates (intents, lists, rules), e.g. for the LLM's schema."""
        return self._intents

    @property
    def intent_names(self) -> tuple[str, ...]:
        """Every intent the templates can produce, sorted."""
        return tuple(sorted(self._intents.intents))

    def recognize(self, text: str) -> Intent | None:
        """The best matching intent for ``text``, or None when no template matches."""
        from hassil import recognize_best

        if not text.strip():
            return None
        result = recognize_best(text, self._intents)
        if result is None:
            return None
        return Intent(
            name=result.intent.name,
            text=text,
            slots=tuple(self._slots(result)),
            confidence=1.0,
            source=IntentSource.TEMPLATE,
        )

    def vocabulary(self) -> list[str]:
        """Words of the templates and phrases of the list values, lower-case, each once.

        Meant as hotwords for the recognizer: the words the templates expect.
        """
        from hassil import TextSlotList
        from hassil.expression import TextChunk

        seen: dict[str, None] = {}
        rules = self._intents.expansion_rules
        for intent in self._intents.intents.values():
            for data in intent.data:
                local = {**rules, **data.expansion_rules}
                for sentence in data.sentences:
                    for chunk in _text_chunks(sentence.expression, local, set()):
                        for word in chunk.split():
                            seen.setdefault(word, None)
        for slot_list in self._intents.slot_lists.values():
            if isinstance(slot_list, TextSlotList):
                for value in slot_list.values:
                    chunks = list(_text_chunks(value.text_in, rules, set()))
                    if isinstance(value.text_in, TextChunk):
                        chunks = [" ".join(chunks)]  # a plain value is one phrase: "living room"
                    else:
                        chunks = [w for c in chunks for w in c.split()]  # a template's words, not a fake phrase
                    for phrase in chunks:
                        if phrase:
                            seen.setdefault(phrase, None)
        return list(seen)

    def _slots(self, result: RecognizeResult) -> Iterator[Slot]:
        from hassil import RangeSlotList, WildcardSlotList

        lists = dict(self._intents.slot_lists)
        lists.update(result.intent_data.slot_lists)
        entity_of = _list_names_by_slot(result, self._intents.expansion_rules)
        fixed: list[Slot] = []
        for e in result.entities_list:
            if e.text_span is None:
                # Set by the template's ``slots:``, not matched in the text.
                fixed.append(Slot(e.name, e.name, str(e.value), e.value, SlotKind.FIXED, None, None))
                continue
            start, end = e.text_span
            entity = entity_of.get(e.name, e.name)
            slot_list = lists.get(entity)
            value: Any = e.value
            if e.is_wildcard or isinstance(slot_list, WildcardSlotList):
                kind, value = SlotKind.WILDCARD, e.text_clean
            elif isinstance(slot_list, RangeSlotList) or isinstance(value, (int, float)):
                kind = SlotKind.NUMBER
                if isinstance(value, float) and value.is_integer():
                    value = int(value)  # "21" comes back as 21.0, "twenty one" as 21
            else:
                kind = SlotKind.LIST
            yield Slot(e.name, entity, result.original_text[start:end], value, kind, start, end)
        yield from fixed


def _expand(patterns: tuple[str, ...]) -> tuple[Path, ...]:
    if not patterns:
        raise ConfigError("intents", "no template files given")
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


def _read_file(path: Path) -> dict[str, Any]:
    """One template file, parsed and checked, so errors can name it."""
    from hassil import parse_sentence
    from hassil.parser import ParseError

    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError("intents", f"cannot read {path}: {exc.strerror}", source) from None
    except yaml.YAMLError as exc:
        raise ConfigError("intents", f"{path} is not valid YAML: {exc}", source) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("intents", f"{path} must hold a mapping at the top level", source)
    for section in ("intents", "lists", "expansion_rules"):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(section, "must be a mapping", source)
    templates: list[tuple[str, str]] = [(f"expansion_rules.{k}", v) for k, v in data.get("expansion_rules", {}).items()]
    for name, body in data.get("intents", {}).items():
        blocks = body.get("data") if isinstance(body, dict) else None
        if not isinstance(blocks, list):
            raise ConfigError(f"intents.{name}", "needs a list under 'data'", source)
        for i, block in enumerate(blocks):
            sentences = block.get("sentences") if isinstance(block, dict) else None
            if not isinstance(sentences, list):
                raise ConfigError(f"intents.{name}.data[{i}]", "needs a list under 'sentences'", source)
            templates += [(f"intents.{name}.data[{i}].sentences", s) for s in sentences]
    for key, template in templates:
        if not isinstance(template, str):
            raise ConfigError(key, f"must be text, got {template!r}", source)
        try:
            parse_sentence(template, keep_text=True)
        except (ParseError, AssertionError, ValueError, IndexError) as exc:  # hassil asserts on some input ("[]")
            raise ConfigError(key, f"template {template!r} does not parse: {exc!r}", source) from None
    return data


def _undefined_lists(intents: Intents) -> set[str]:
    """Lists the templates use that no file defines; also checks expansion rules exist."""
    from hassil.expression import ListReference, RuleReference

    missing: set[str] = set()
    for intent in intents.intents.values():
        for data in intent.data:
            rules = {**intents.expansion_rules, **data.expansion_rules}
            known = set(intents.slot_lists) | set(data.slot_lists)
            for sentence in data.sentences:
                for ref in _walk(sentence.expression, rules, set()):
                    if isinstance(ref, RuleReference) and ref.rule_name not in rules:
                        raise ConfigError(
                            f"intents.{intent.name}", f"template {sentence.text!r} uses undefined rule <{ref.rule_name}>"
                        )
                    if isinstance(ref, ListReference) and not ref.is_inline_range and ref.list_name not in known:
                        missing.add(ref.list_name)
    return missing


def _walk(expr: Expression, rules: Mapping[str, Any], active: set[str]) -> Iterator[Expression]:
    """Every expression under ``expr``, expanding rules (each once per path, so cycles end)."""
    from hassil.expression import Group, RuleReference

    yield expr
    if isinstance(expr, Group):
        for item in expr.items:
            yield from _walk(item, rules, active)
    elif isinstance(expr, RuleReference) and expr.rule_name in rules and expr.rule_name not in active:
        yield from _walk(rules[expr.rule_name].expression, rules, active | {expr.rule_name})


def _text_chunks(expr: Expression, rules: Mapping[str, Any], active: set[str]) -> Iterator[str]:
    from hassil.expression import TextChunk
    from hassil.util import remove_punctuation

    for e in _walk(expr, rules, active):
        if isinstance(e, TextChunk):
            text = remove_punctuation(e.text).strip().lower()
            if text:
                yield text


def _list_names_by_slot(result: RecognizeResult, rules: Mapping[str, Any]) -> dict[str, str]:
    """Slot name → list name in the matched template (``{area:room}`` → room: area)."""
    from hassil.expression import ListReference

    sentence = result.intent_sentence
    if sentence is None:
        return {}
    merged = {**rules, **result.intent_data.expansion_rules}
    return {
        ref.slot_name: ref.list_name for ref in _walk(sentence.expression, merged, set()) if isinstance(ref, ListReference)
    }

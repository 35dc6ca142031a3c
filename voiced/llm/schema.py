"""The answer's JSON schema, and the check every answer passes before it becomes an Intent.

An answer is ``{"intent": NAME, "slots": {SLOT: VALUE, ...}}`` for a known intent, or
``{"intent": null, "slots": {}}`` when nothing fits. The schema constrains generation
(onnxruntime-genai's guidance); :func:`parse_answer` checks the same rules again in
Python, so whatever the runtime emits, only a valid answer is published.

Wildcard slots take a run of the utterance's own words: the schema enumerates those runs,
so the model cannot invent a device name the user did not say.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from voiced.intents import Intent, IntentSource, Slot, SlotKind
from voiced.llm.catalog import IntentCatalog, IntentSpec, ListValue, SlotDomain

__all__ = ["LLM_CONFIDENCE", "AnswerKind", "ParsedAnswer", "answer_schema", "parse_answer", "wildcard_spans"]

LLM_CONFIDENCE = 0.5
"""Confidence of every LLM intent: below a template match (1.0), so consumers can tell them apart."""
MAX_SPAN_WORDS = 8
"""Longest run of words a wildcard slot can take."""
MAX_ENUM_NUMBERS = 512
"""A stepped range with more numbers than this is bounded instead of enumerated."""

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")  # words without surrounding punctuation


class AnswerKind(Enum):
    INTENT = "intent"
    """A known intent with valid slots."""
    NONE = "none"
    """The model said no intent fits."""
    INVALID = "invalid"
    """Not a valid answer (bad JSON, unknown intent, slot or value, cut short)."""


@dataclass(frozen=True)
class ParsedAnswer:
    kind: AnswerKind
    intent: Intent | None = None
    problem: str | None = None
    """Why an INVALID answer was refused."""


def wildcard_spans(text: str, max_words: int = MAX_SPAN_WORDS) -> tuple[str, ...]:
    """Every run of up to ``max_words`` consecutive words of ``text``, punctuation stripped, each once."""
    words = _WORD.findall(text)
    spans = (" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, min(i + max_words, len(words)) + 1))
    return tuple(dict.fromkeys(spans))


def answer_schema(catalog: IntentCatalog, text: str) -> dict[str, Any]:
    """The JSON schema of every valid answer to ``text`` (wildcards depend on its words)."""
    spans = wildcard_spans(text)
    branches = [_intent_schema(spec, spans) for spec in catalog.intents]
    branches.append(_object({"intent": {"type": "null"}, "slots": _object({})}, ["intent", "slots"]))
    return {
        "anyOf": branches,
        # llguidance options: one fixed layout keeps answers short and leaves the model no
        # room to wander in whitespace until max_new_tokens.
        "x-guidance": {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "},
    }


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _intent_schema(spec: IntentSpec, spans: tuple[str, ...]) -> dict[str, Any]:
    slots: dict[str, Any] = {}
    for slot in spec.slots:
        options = [s for s in (_domain_schema(d, spans) for d in slot.domains) if s is not None]
        if options:
            slots[slot.name] = options[0] if len(options) == 1 else {"anyOf": options}
    return _object({"intent": {"const": spec.name}, "slots": _object(slots)}, ["intent", "slots"])


def _domain_schema(domain: SlotDomain, spans: tuple[str, ...]) -> dict[str, Any] | None:
    if domain.kind is SlotKind.WILDCARD:
        return {"enum": list(spans)} if spans else None
    if domain.kind is SlotKind.LIST:
        return {"enum": [v.value for v in domain.values]} if domain.values else None
    r = domain.numbers
    if r is None:
        return None
    if r.step > 1 and not r.fractions and (r.stop - r.start) // r.step < MAX_ENUM_NUMBERS:
        return {"enum": list(range(r.start, r.stop + 1, r.step))}
    # Off-step numbers and fractions that the bounds let through are refused by parse_answer.
    return {"type": "number" if r.fractions else "integer", "minimum": r.start, "maximum": r.stop}


def parse_answer(raw: str, catalog: IntentCatalog, text: str) -> ParsedAnswer:
    """Check the model's ``raw`` answer to ``text`` against ``catalog``; a valid one becomes an Intent."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _invalid(f"not JSON ({exc.msg} at {exc.pos})")
    except RecursionError:
        return _invalid("nested too deeply")
    if not isinstance(data, dict) or set(data) != {"intent", "slots"}:
        return _invalid('not an object with exactly "intent" and "slots"')
    name, values = data["intent"], data["slots"]
    if not isinstance(values, dict):
        return _invalid('"slots" is not an object')
    if name is None:
        return ParsedAnswer(AnswerKind.NONE) if not values else _invalid("slots given without an intent")
    spec = catalog.get(name) if isinstance(name, str) else None
    if spec is None:
        return _invalid(f"unknown intent {name!r}")
    spans = set(wildcard_spans(text))
    slots: list[Slot] = []
    for slot_name, value in values.items():
        slot_spec = spec.slot(slot_name)
        if slot_spec is None:
            return _invalid(f"intent {name} has no slot {slot_name!r}")
        slot = next((s for d in slot_spec.domains if (s := _slot(slot_name, d, value, text, spans))), None)
        if slot is None:
            return _invalid(f"{value!r} is not a value of slot {slot_name!r}")
        slots.append(slot)
    slots.sort(key=lambda s: (s.start is None, s.start or 0))  # in order of appearance, as templates give them
    slots += [Slot(k, k, str(v), v, SlotKind.FIXED, None, None) for k, v in spec.fixed if k not in values]
    intent = Intent(name=name, text=text, slots=tuple(slots), confidence=LLM_CONFIDENCE, source=IntentSource.LLM)
    return ParsedAnswer(AnswerKind.INTENT, intent)


def _invalid(problem: str) -> ParsedAnswer:
    return ParsedAnswer(AnswerKind.INVALID, problem=problem)


def _slot(name: str, domain: SlotDomain, value: Any, text: str, spans: set[str]) -> Slot | None:
    """The slot for ``value`` when ``domain`` allows it; positions only where the text says it."""
    if domain.kind is SlotKind.WILDCARD:
        if not isinstance(value, str) or value not in spans:
            return None
        return _located(name, domain, value, value, text, [value])
    if domain.kind is SlotKind.LIST:
        match = _list_value(domain.values, value)
        if match is None:
            return None
        return _located(name, domain, value, str(value), text, list(match.phrases) + [str(value)])
    if domain.numbers is None or not domain.numbers.accepts(value):
        return None
    spoken = int(value) if float(value).is_integer() else value
    return _located(name, domain, domain.numbers.normalized(spoken), str(spoken), text, [str(spoken)])


def _list_value(values: tuple[ListValue, ...], value: Any) -> ListValue | None:
    # JSON true must not pass for 1, nor 1 for 1.0's list entry of another type
    return next((v for v in values if type(v.value) is type(value) and v.value == value), None)


def _located(name: str, domain: SlotDomain, value: Any, fallback: str, text: str, phrases: list[str]) -> Slot:
    """A slot whose raw text and range come from the first phrase found in ``text``."""
    for phrase in phrases:
        words = _WORD.findall(phrase)
        if not words:
            continue
        found = re.search(r"(?<!\w)" + r"\W+".join(map(re.escape, words)) + r"(?!\w)", text, re.IGNORECASE)
        if found:
            return Slot(name, domain.entity, found.group(0), value, domain.kind, found.start(), found.end())
    return Slot(name, domain.entity, fallback, value, domain.kind, None, None)

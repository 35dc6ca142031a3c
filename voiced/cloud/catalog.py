"""What the cloud may answer: the known intents, their slots and the values each slot takes.

Built from the same hassil document the local recognizer matches with (its public
``data``: template files, built-in set, config lists), so the cloud chooses among exactly
the intents the templates define, and its answer is checked against them: an unknown intent, an unknown slot or a value outside a
slot's list means "no intent", never a made-up one.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from voiced.cloud.errors import CloudError, CloudErrorKind
from voiced.intents import Intent, IntentRecognizer, IntentSource, Slot, SlotKind

__all__ = ["IntentCatalog", "IntentSpec", "SlotSpec"]

log = logging.getLogger(__name__)

_LIST_REF = re.compile(r"\{([^{}:]+)(?::([^{}]+))?\}")
_RULE_REF = re.compile(r"<([^<>]+)>")
PROMPT_VALUES = 200
"""Values of one list shown to the model, at most; validation still accepts all of them."""


@dataclass(frozen=True)
class SlotSpec:
    """One slot an intent's templates can fill."""

    name: str
    """Slot name (``{area:room}`` → ``room``)."""
    list_name: str
    """List it takes values from (``{area:room}`` → ``area``)."""
    kind: SlotKind
    """LIST, NUMBER or WILDCARD."""
    values: tuple[tuple[str, Any], ...] = ()
    """For LIST: (spoken text, value) pairs; the value is what the slot carries."""
    low: float | None = None
    """For NUMBER: smallest value, when known."""
    high: float | None = None
    """For NUMBER: largest value, when known."""

    def normalize(self, value: Any) -> Any | None:
        """The slot's value for what the model answered, or None when it is not allowed."""
        if isinstance(value, bool) or value is None:
            return None
        if self.kind is SlotKind.NUMBER:
            try:
                number = float(value)
            except (TypeError, ValueError):
                return None
            if math.isnan(number) or (self.low is not None and number < self.low) \
                    or (self.high is not None and number > self.high):
                return None
            return int(number) if number.is_integer() else number
        if not isinstance(value, (str, int, float)):
            return None
        text = str(value).strip()
        if self.kind is SlotKind.WILDCARD:
            return text or None
        folded = text.casefold()
        for spoken, out in self.values:
            if folded in (str(out).casefold(), spoken.casefold()):
                return out
        return None

    def describe(self) -> Any:
        if self.kind is SlotKind.NUMBER:
            bounds = "" if self.low is None else f" from {self.low:g} to {self.high:g}"
            return f"number{bounds}"
        if self.kind is SlotKind.WILDCARD:
            return "free text from the sentence"
        return list(dict.fromkeys(str(out) for _, out in self.values))[:PROMPT_VALUES]


@dataclass(frozen=True)
class IntentSpec:
    """One intent and the slots its templates use."""

    name: str
    slots: tuple[SlotSpec, ...] = ()
    fixed: tuple[tuple[str, Any], ...] = ()
    """Slots every template of the intent sets (hassil ``slots:``), added to a cloud answer."""
    open_slots: bool = False
    """Slots are not known (built from names only): any slot is accepted as free text."""

    def slot(self, name: str) -> SlotSpec | None:
        return next((s for s in self.slots if s.name == name), None)


@dataclass(frozen=True)
class IntentCatalog:
    """The intents the cloud may choose from; immutable, so it is shared between threads."""

    intents: tuple[IntentSpec, ...]
    language: str | None = None
    _by_name: dict[str, IntentSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {i.name: i for i in self.intents})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    @classmethod
    def from_names(cls, names: Iterable[str], language: str | None = None) -> IntentCatalog:
        """Intents without slot knowledge: slots come back as free text."""
        return cls(tuple(IntentSpec(n, open_slots=True) for n in sorted(set(names))), language)

    @classmethod
    def from_recognizer(cls, recognizer: IntentRecognizer) -> IntentCatalog:
        """The intents, slots and lists the recognizer matches with (files, built-in set, config lists)."""
        catalog = cls.from_templates([recognizer.data], recognizer.language)
        missing = set(recognizer.intent_names) - set(catalog.names)
        if missing:  # cannot happen with the same files; stay usable if it does
            catalog = cls(catalog.intents + cls.from_names(missing).intents, catalog.language)
        return catalog

    @classmethod
    def from_templates(cls, docs: Iterable[Mapping[str, Any]], language: str | None = None) -> IntentCatalog:
        """From parsed hassil YAML documents (later ones extend earlier ones, as in hassil)."""
        lists: dict[str, Any] = {}
        rules: dict[str, str] = {}
        intents: dict[str, list[Mapping[str, Any]]] = {}
        for doc in docs:
            lists.update(doc.get("lists") or {})
            rules.update(doc.get("expansion_rules") or {})
            for name, body in (doc.get("intents") or {}).items():
                intents.setdefault(name, []).extend(body.get("data") or [])
            language = language or doc.get("language")
        specs = [_intent_spec(name, blocks, lists, rules) for name, blocks in sorted(intents.items())]
        return cls(tuple(specs), language)

    def restricted(self, names: Iterable[str] | None) -> IntentCatalog:
        """Only the intents in ``names`` (a Hermes ``intentFilter``); all when None."""
        if names is None:
            return self
        keep = set(names)
        return replace(self, intents=tuple(i for i in self.intents if i.name in keep))

    def describe(self) -> dict[str, dict[str, Any]]:
        """Intent → slot → allowed values, as shown to the model."""
        return {i.name: ({s.name: s.describe() for s in i.slots} if not i.open_slots else {"*": "free text"})
                for i in self.intents}

    def interpret(self, answer: Any, text: str) -> Intent | None:
        """The model's ``{"intent": name|null, "slots": {...}}`` as an Intent, or None.

        Raises CloudError(MALFORMED) when the answer does not have that shape; an unknown
        intent, slot or value gives None (logged by name, never with the text).
        """
        if not isinstance(answer, Mapping) or "intent" not in answer:
            raise CloudError(CloudErrorKind.MALFORMED, "the answer is not an object with an 'intent' key")
        name, raw_slots = answer["intent"], answer.get("slots")
        raw_slots = {} if raw_slots is None else raw_slots
        if name is None:
            return None
        if not isinstance(name, str) or not isinstance(raw_slots, Mapping):
            raise CloudError(CloudErrorKind.MALFORMED, "'intent' must be a string or null and 'slots' an object")
        spec = self._by_name.get(name)
        if spec is None:
            log.info("cloud chose an intent that is not known (or filtered out): rejected")
            return None
        slots: list[Slot] = []
        for slot_name, value in raw_slots.items():
            slot = self._slot(spec, str(slot_name), value, text)
            if slot is None:
                log.info("cloud gave slot %r of %s a value it cannot take: intent rejected", slot_name, name)
                return None
            slots.append(slot)
        slots.sort(key=lambda s: (s.start is None, s.start or 0))
        given = {s.name for s in slots}
        slots += [Slot(k, k, str(v), v, SlotKind.FIXED, None, None) for k, v in spec.fixed if k not in given]
        confidence = answer.get("confidence", 1.0)
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
            confidence = 1.0
        return Intent(name=name, text=text, slots=tuple(slots), confidence=float(confidence), source=IntentSource.CLOUD)

    def _slot(self, spec: IntentSpec, name: str, value: Any, text: str) -> Slot | None:
        slot_spec = spec.slot(name)
        if slot_spec is None:
            if not spec.open_slots:
                return None
            slot_spec = SlotSpec(name, name, SlotKind.WILDCARD)
        normalized = slot_spec.normalize(value)
        if normalized is None:
            return None
        spoken = [str(value)] + [s for s, out in slot_spec.values if out == normalized]
        start, end = _find(text, spoken)
        raw = text[start:end] if start is not None and end is not None else str(value)
        return Slot(name, slot_spec.list_name, raw, normalized, slot_spec.kind, start, end)


def _intent_spec(name: str, blocks: list[Mapping[str, Any]], lists: Mapping[str, Any],
                 rules: Mapping[str, str]) -> IntentSpec:
    slots: dict[str, SlotSpec] = {}
    fixed: dict[str, Any] | None = None
    for block in blocks:
        local_lists = {**lists, **(block.get("lists") or {})}
        local_rules = {**rules, **(block.get("expansion_rules") or {})}
        for sentence in block.get("sentences") or []:
            for list_name, slot_name in _list_refs(str(sentence), local_rules, set()):
                slots.setdefault(slot_name, _slot_spec(slot_name, list_name, local_lists.get(list_name)))
        block_fixed = dict(block.get("slots") or {})
        # Only what every template sets is certain when the cloud cannot say which one it matched.
        fixed = block_fixed if fixed is None else {k: v for k, v in fixed.items() if block_fixed.get(k) == v}
    fixed_items = tuple((k, v) for k, v in (fixed or {}).items() if k not in slots)
    return IntentSpec(name, tuple(slots.values()), fixed_items)


def _list_refs(template: str, rules: Mapping[str, str], active: set[str]) -> Iterable[tuple[str, str]]:
    for m in _LIST_REF.finditer(template):
        list_name = m.group(1).strip()
        yield list_name, (m.group(2) or list_name).strip()
    for m in _RULE_REF.finditer(template):
        rule = m.group(1).strip()
        if rule in rules and rule not in active:  # each rule once per path, so cycles end
            yield from _list_refs(str(rules[rule]), rules, active | {rule})


def _slot_spec(slot_name: str, list_name: str, body: Any) -> SlotSpec:
    if not isinstance(body, Mapping) or body.get("wildcard"):
        return SlotSpec(slot_name, list_name, SlotKind.WILDCARD)  # undefined lists match any text, as locally
    if "range" in body:
        r = body["range"] or {}
        scaled = r.get("multiplier") is not None
        return SlotSpec(slot_name, list_name, SlotKind.NUMBER,
                        low=None if scaled else float(r.get("from", 0)), high=None if scaled else float(r.get("to", 0)))
    values: list[tuple[str, Any]] = []
    for v in body.get("values") or []:
        if isinstance(v, Mapping):
            spoken = str(v.get("in", ""))
            values.append((spoken, v.get("out") if v.get("out") is not None else spoken))
        else:
            values.append((str(v), str(v)))
    return SlotSpec(slot_name, list_name, SlotKind.LIST, tuple(values))


def _find(text: str, candidates: list[str]) -> tuple[int | None, int | None]:
    folded = text.lower()
    if len(folded) != len(text):  # a few characters change length when lowered: no offsets then
        return None, None
    for candidate in candidates:
        c = candidate.strip().lower()
        if c and not set("()[]|{}<>") & set(c):
            i = folded.find(c)
            if i >= 0:
                return i, i + len(c)
    return None, None

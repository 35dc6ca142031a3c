"""What the LLM may answer: the templates' intents, their slots and each slot's values.

Built from the loaded hassil templates, so the LLM's answers use exactly the names and
normalized values a template match would publish: a ``values`` list gives its ``out``
values, a ``range`` list its numbers, a wildcard list any words of the utterance.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from voiced.intents import IntentRecognizer, SlotKind, _walk

if TYPE_CHECKING:
    from hassil import Intents
    from hassil.expression import Expression
    from hassil.intents import RangeSlotList, TextSlotList

__all__ = ["IntentCatalog", "IntentSpec", "ListValue", "NumberRange", "SlotDomain", "SlotSpec"]

log = logging.getLogger(__name__)

MAX_PHRASES = 16
"""Phrases kept per list value (``(bed|sleeping) room`` has two); they only help the prompt and slot positions."""
MAX_EXAMPLES = 2
"""Template sentences per intent shown to the model as examples."""

_JSON_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class ListValue:
    """One value of a ``values`` list."""

    value: Any
    """The normalized value (the list's ``out``), a JSON scalar."""
    phrases: tuple[str, ...]
    """Words that say it (``living room``), lower-case; may be empty."""


@dataclass(frozen=True)
class NumberRange:
    """The numbers of a ``range`` list, as spoken (before hassil's multiplier)."""

    start: int
    stop: int
    step: int = 1
    fractions: tuple[float, ...] = ()
    """Fractions allowed after each integer (hassil's ``halves``/``tenths``); empty: integers only."""
    multiplier: float | None = None
    """Factor hassil applies to the spoken number (``range: {multiplier: 0.01}``)."""

    def accepts(self, number: Any) -> bool:
        """True for a number of this range (not a bool)."""
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return False
        if not self.start <= number <= self.stop:
            return False
        whole = int(number // 1)
        rest = round(number - whole, 6)
        if (whole - self.start) % self.step:
            return False
        return rest == 0 or rest in {round(f, 6) for f in self.fractions}

    def normalized(self, number: float) -> float:
        """The slot value a template match gives for the spoken ``number``."""
        value = number * self.multiplier if self.multiplier is not None else number
        return int(value) if isinstance(value, float) and value.is_integer() else value


@dataclass(frozen=True)
class SlotDomain:
    """Where one slot's value may come from: one list of the templates."""

    entity: str
    """The list's name (``{area:room}`` → ``area``)."""
    kind: SlotKind
    """LIST, NUMBER or WILDCARD."""
    values: tuple[ListValue, ...] = ()
    """The values of a LIST."""
    numbers: NumberRange | None = None
    """The range of a NUMBER."""


@dataclass(frozen=True)
class SlotSpec:
    """One slot an intent's templates can fill."""

    name: str
    domains: tuple[SlotDomain, ...]
    """Usually one; more when templates put different lists into the same slot name."""


@dataclass(frozen=True)
class IntentSpec:
    """One intent, as the LLM sees it."""

    name: str
    slots: tuple[SlotSpec, ...]
    """Slots in order of first appearance in the templates."""
    fixed: tuple[tuple[str, Any], ...]
    """Template ``slots:`` every data block of the intent sets alike; added to every LLM answer."""
    examples: tuple[str, ...]
    """A few template sentences (``turn on [the] {name}``)."""

    def slot(self, name: str) -> SlotSpec | None:
        return next((s for s in self.slots if s.name == name), None)


@dataclass(frozen=True)
class IntentCatalog:
    """Every intent the templates can produce, sorted by name."""

    intents: tuple[IntentSpec, ...]
    language: str

    @classmethod
    def from_recognizer(cls, recognizer: IntentRecognizer) -> IntentCatalog:
        """The catalog of a loaded recognizer (lists it left undefined are wildcards there)."""
        # IntentRecognizer has no public accessor for its hassil Intents yet.
        return cls.from_hassil(recognizer.templates)

    @classmethod
    def from_hassil(cls, intents: Intents) -> IntentCatalog:
        specs = [_intent_spec(name, intents) for name in sorted(intents.intents)]
        return cls(tuple(specs), str(intents.language))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.intents)

    def get(self, name: str) -> IntentSpec | None:
        return next((i for i in self.intents if i.name == name), None)

    def restricted(self, names: Iterable[str] | None) -> IntentCatalog:
        """Only the intents in ``names`` (a Hermes ``intentFilter``); None keeps all."""
        if names is None:
            return self
        keep = set(names)
        return IntentCatalog(tuple(i for i in self.intents if i.name in keep), self.language)

    @property
    def has_wildcards(self) -> bool:
        return any(d.kind is SlotKind.WILDCARD for i in self.intents for s in i.slots for d in s.domains)


def _intent_spec(name: str, intents: Intents) -> IntentSpec:
    from hassil import RangeSlotList, TextSlotList, WildcardSlotList
    from hassil.expression import ListReference

    intent = intents.intents[name]
    domains: dict[str, dict[str, SlotDomain]] = {}  # slot name → entity → domain, in order of appearance
    examples: list[str] = []
    for data in intent.data:
        rules = {**intents.expansion_rules, **data.expansion_rules}
        lists = {**intents.slot_lists, **data.slot_lists}
        for sentence in data.sentences:
            if sentence.text and len(examples) < MAX_EXAMPLES:
                examples.append(sentence.text)
            for ref in _walk(sentence.expression, rules, set()):
                if not isinstance(ref, ListReference) or ref.is_capture:
                    continue
                per_slot = domains.setdefault(ref.slot_name, {})
                if ref.list_name in per_slot:
                    continue
                inline = ref.get_inline_range() if ref.is_inline_range else None
                if inline is not None:
                    start, stop, step = inline
                    per_slot[ref.list_name] = SlotDomain(ref.list_name, SlotKind.NUMBER, numbers=NumberRange(start, stop, step))
                    continue
                slot_list = lists.get(ref.list_name)
                if ref.list_name in data.wildcard_list_names or isinstance(slot_list, WildcardSlotList):
                    per_slot[ref.list_name] = SlotDomain(ref.list_name, SlotKind.WILDCARD)
                elif isinstance(slot_list, RangeSlotList):
                    per_slot[ref.list_name] = SlotDomain(ref.list_name, SlotKind.NUMBER, numbers=_number_range(slot_list))
                elif isinstance(slot_list, TextSlotList):
                    per_slot[ref.list_name] = SlotDomain(ref.list_name, SlotKind.LIST, values=tuple(_list_values(slot_list)))
                else:
                    log.debug("intent %s: list {%s} has no usable definition; slot %s left out", name, ref.list_name, ref.slot_name)
    slots = tuple(SlotSpec(slot, tuple(d.values())) for slot, d in domains.items() if d)
    return IntentSpec(name, slots, _common_fixed(intent.data), tuple(examples))


def _number_range(slot_list: RangeSlotList) -> NumberRange:
    from hassil.intents import RangeFractionType

    fractions = tuple(RangeFractionType.get_fractions(slot_list.fraction_type)) if slot_list.fraction_type else ()
    return NumberRange(slot_list.start, slot_list.stop, slot_list.step, fractions, slot_list.multiplier)


def _list_values(slot_list: TextSlotList) -> Iterator[ListValue]:
    """The list's distinct ``out`` values with the phrases that say each."""
    from hassil.expression import TextChunk

    phrases: dict[Any, list[str]] = {}
    for item in slot_list.values:
        said = _phrases(item.text_in)
        value = item.value_out
        if value is None and isinstance(item.text_in, TextChunk):
            value = item.text_in.text.strip()  # ``{in: kitchen}`` without ``out`` gives its text
        if value is None or not isinstance(value, _JSON_SCALARS):
            log.debug("list {%s}: value %r cannot be answered by the LLM; left out", slot_list.name, value)
            continue
        known = phrases.setdefault(_key(value), [])
        known.extend(p for p in said if p not in known)
    for key, said in phrases.items():
        yield ListValue(key[1], tuple(said[:MAX_PHRASES]))


def _key(value: Any) -> tuple[type, Any]:
    # True == 1 in Python; the type keeps JSON's true and 1 apart.
    return (type(value), value)


def _phrases(expr: Expression) -> list[str]:
    """The texts a small value template can say, lower-case (empty when it refers to lists or rules)."""
    from hassil.expression import Alternative, Group, Permutation, TextChunk

    def expand(e: Expression) -> list[str] | None:
        if isinstance(e, TextChunk):
            return [e.text]
        if isinstance(e, Alternative):
            out: list[str] = [""] if e.is_optional else []
            for item in e.items:
                sub = expand(item)
                if sub is None:
                    return None
                out.extend(sub)
            return out[:MAX_PHRASES]
        if isinstance(e, Group):  # Sequence, and Permutation in its written order
            if isinstance(e, Permutation):
                log.debug("permutation in a list value: phrases kept in written order only")
            combos = [""]
            for item in e.items:
                sub = expand(item)
                if sub is None:
                    return None
                combos = [a + b for a, b in itertools.islice(itertools.product(combos, sub), MAX_PHRASES)]
            return combos
        return None

    said = expand(expr) or []
    return list(dict.fromkeys(p for p in (" ".join(s.split()).lower() for s in said) if p))


def _common_fixed(blocks: Iterable[Any]) -> tuple[tuple[str, Any], ...]:
    """Fixed slots (``slots:``) that every data block of the intent sets to the same value."""
    common: dict[str, Any] | None = None
    for data in blocks:
        fixed = {k: v for k, v in (data.slots or {}).items() if isinstance(v, _JSON_SCALARS)}
        common = fixed if common is None else {k: v for k, v in common.items() if k in fixed and fixed[k] == v}
    return tuple((common or {}).items())

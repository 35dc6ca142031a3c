"""What a placeholder of the templates may be, word by word: a text list's values as a trie of
words, a number range, a wildcard, a list glued to text ("{brightness}%"); and which words fit.

The pieces :mod:`voiced.sentencespace` walks its sentence automaton with.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hassil import Intents

__all__ = ["MAX_VALUE_TEXTS", "NUMBER", "NUMBER_WORDS", "OPEN", "Slot", "Trie", "fits", "glued_name", "glued_slot",
           "is_digits", "lists_by_slot", "number_slot", "slot_takes", "values_trie", "words_of"]

_STRIP = string.punctuation.replace("'", "").replace("%", "")


def words_of(text: str) -> list[str]:
    """Lower-case words without the punctuation recognizers add (apostrophes and % stay)."""
    return [w for w in (t.strip(_STRIP) for t in text.lower().split()) if w]


@dataclass(eq=False)  # hashed by identity: walk positions hold nodes
class Trie:
    children: dict[str, Trie] = field(default_factory=dict)
    end: bool = False

    def add(self, words: Sequence[str]) -> None:
        node = self
        for w in words:
            node = node.children.setdefault(w, Trie())
        node.end = True


class Slot:
    """A slot the walk cannot expand into words: how many words it may take."""

    def __init__(self, name: str, max_words: int | None, digits_close: bool = False, suffix: str | None = None,
                 most: float | None = None) -> None:
        self.name = name
        self.max_words = max_words
        """None: as many as come."""
        self.digits_close = digits_close
        """A word of digits is the whole value (a number range: "50", not "50 more")."""
        self.suffix = suffix
        """A list glued to text: the text after the value ("%" of "{brightness}%"); None otherwise."""
        self.most = most
        """A number range's largest value (hassil takes no larger one); None: any."""

    def __repr__(self) -> str:
        return f"<slot {self.name}>"


OPEN = Slot("wildcard", None)
"""A wildcard, a list written as templates, anything unknown: any words, as many as come."""
NUMBER = Slot("range", 3, digits_close=True)
"""A number range: digits ("50") or up to three number words ("one hundred", "twenty five")."""


@functools.cache
def number_slot(most: float) -> Slot:
    """A number range whose digits are at most ``most`` (one slot per bound, like ``glued_slot``)."""
    return Slot("range", 3, digits_close=True, most=most)


_GLUED = re.compile(r"\{([^{}]+)\}([^{}\s]*)")
"""A label that is one placeholder glued to text after it ("{brightness}%", "{hours}-hours"):
the only kind Home Assistant's templates have."""


def glued_name(label: str) -> str | None:
    """The slot a glued label fills ("brightness" of "{brightness}%"); None for other labels."""
    match = _GLUED.fullmatch(label)
    return match.group(1) if match else None


@functools.cache
def glued_slot(label: str, most: float | None = None) -> Slot:
    """A list glued to text in one word: exactly one word, a number (at most ``most``) then the
    label's text (one slot per label and bound, as for every other list)."""
    match = _GLUED.fullmatch(label)
    return Slot("glued", 1, suffix=match.group(2).lower() if match else "", most=most)


MAX_VALUE_TEXTS = 200
"""A list value written as a template ("awning[s]") is expanded up to this many texts; beyond it
the list is an open slot."""


def lists_by_slot(intents: Intents, by_list: Mapping[str, Trie | Slot]) -> dict[str, tuple[Trie | Slot, ...]]:
    """The FST names a list by its slot (``{device_class}`` for ``{cover_classes:device_class}``):
    the text values of every list filling a slot merged into one trie, beside any range or wildcard."""
    from hassil.expression import ListReference

    from voiced.sentences import walk

    lists_of: dict[str, set[str]] = {}
    rules = intents.expansion_rules
    for intent in intents.intents.values():
        for data in intent.data:
            local = {**rules, **data.expansion_rules}
            for sentence in data.sentences:
                for expr in walk(sentence.expression, local, set()):
                    if isinstance(expr, ListReference):
                        lists_of.setdefault(expr.slot_name, set()).add(expr.list_name)
    slots: dict[str, tuple[Trie | Slot, ...]] = {}
    for slot, names in lists_of.items():
        kinds = [by_list.get(name, OPEN) for name in sorted(names)]
        merged = Trie()
        for k in kinds:
            if isinstance(k, Trie):
                _merge(merged, k)
        others = tuple(dict.fromkeys(k for k in kinds if isinstance(k, Slot)))
        slots[slot] = ((merged,) if merged.children else ()) + others
    return slots


def _merge(into: Trie, other: Trie) -> None:
    into.end = into.end or other.end
    for word, child in other.children.items():
        _merge(into.children.setdefault(word, Trie()), child)


def values_trie(slot_list: object, intents: Intents) -> Trie | Slot:
    """The words of a text list's values (templates expanded), or an open slot if too many."""
    import itertools

    from hassil.expression import TextChunk
    from hassil.sample import sample_expression

    trie = Trie()
    for value in slot_list.values:  # type: ignore[attr-defined]
        if isinstance(value.text_in, TextChunk):
            texts: Iterable[str] = [value.text_in.text]
        else:
            texts = list(itertools.islice(sample_expression(value.text_in, intents.slot_lists, intents.expansion_rules,
                                                            expand_lists=False), MAX_VALUE_TEXTS + 1))
            if len(texts) > MAX_VALUE_TEXTS or any("{" in t for t in texts):
                return OPEN
        for text in texts:
            trie.add(words_of(text))
    return trie


_DIGITS = re.compile(r"\d+(?:[.,]\d+)?")
"""A number written in digits as hassil reads one ("50", "21.5", "21,5": a comma is a decimal point
there too; not "8th": an ordinal is no value of a range; not "28,000,000", which the constrained
search once followed through Whisper's runs of ",000" for its whole budget)."""

_DIGITS_BEGUN = re.compile(r"\d+(?:[.,]\d*)?")
"""The beginning of a ``_DIGITS`` number ("21.", "21,")."""

NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
    " seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand"
    " a an half quarter point".split())
"""Words a number may be said with (English; hassil writes ranges as digits and number words)."""


def fits(slot: Slot, word: str, partial: bool = False) -> bool:
    """Can ``word`` (or a word beginning with it) be part of the slot's value?"""
    if slot is OPEN:
        return True
    if slot.suffix is not None:  # "34-hours", "50%": the number, then the text glued to it
        number = (_DIGITS_BEGUN if partial else _DIGITS).match(word)
        if number is None:
            return partial and not word
        rest = word[number.end():]
        glued = slot.suffix.startswith(rest) if partial else rest == slot.suffix
        return glued and _at_most(number.group(), slot.most)
    if (_DIGITS_BEGUN if partial else _DIGITS).fullmatch(word):
        return _at_most(word, slot.most)
    return any(w.startswith(word) for w in NUMBER_WORDS) if partial else word in NUMBER_WORDS


def _at_most(digits: str, most: float | None) -> bool:
    """Is the number ``digits`` (or its beginning: a beginning's value is at most the whole
    number's) no larger than ``most``?"""
    return most is None or float(digits.replace(",", ".").rstrip(".")) <= most


def is_digits(word: str) -> bool:
    """Is ``word`` a whole number in digits as hassil reads one ("50", "21.5", "21,5")?"""
    return _DIGITS.fullmatch(word) is not None


def slot_takes(slot: Slot, took: int) -> bool:
    """May the slot take one more word?"""
    return took >= 0 and (slot.max_words is None or took < slot.max_words)

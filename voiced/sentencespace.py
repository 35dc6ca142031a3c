"""The sentences the templates can produce, as a word automaton: is a transcript a whole command?

Built once from the loaded hassil templates with hassil's own sentence FST
(``hassil.fst.intents_to_fst``, the structure Home Assistant's speech-to-phrase compiles),
with each slot's list values as a trie, then walked word by word over a running transcript
(a :class:`SpaceWalker` per stream). Two users ask it questions:

- the endpointer: *is this text a whole command that no longer template sentence could still
  extend?* If so the utterance may end after a short silence (``matched_silence_ms``);
- template-aware Whisper decoding: *may this text, its last word perhaps unfinished, begin a
  template sentence?* and *is it a whole one?*

The answers err on the side of waiting: a slot the walk cannot spell out — a wildcard, a list
written as templates beyond a bound — may always take one more word, so the walk never says
"final" through one; number ranges take digits or number words.
"""

from __future__ import annotations

import copy
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from voiced.sentenceslots import (
    NUMBER,
    NUMBER_WORDS,
    OPEN,
    Slot,
    Trie,
    fits,
    glued_name,
    glued_slot,
    is_digits,
    lists_by_slot,
    number_slot,
    slot_takes,
    values_trie,
    words_of,
)

if TYPE_CHECKING:
    from hassil import Intents

__all__ = ["Completion", "Following", "SentenceSpace", "SpaceWalker", "words_of"]

_EPS = "<eps>"
_SKIP = "<skip>"
_PLACEHOLDER = re.compile(r"^\{([^{}]+)\}$")


class Completion(Enum):
    NONE = "none"
    """No template sentence starts with the text."""
    PREFIX = "prefix"
    """The text begins a template sentence but is not one yet."""
    EXTENDABLE = "extendable"
    """The text is a whole sentence, and a longer one could still follow it."""
    FINAL = "final"
    """The text is a whole sentence and no longer sentence starts with it."""


@dataclass(frozen=True)
class _Pos:
    """Where a walk is: an FST state, or inside a list value (``trie``) that continues at ``state``."""

    state: int
    trie: Trie | Slot | None = None
    took: int = 0
    """Inside a slot: the words it has taken; -1 once a number in digits closed it."""
    anchored: bool = False
    """A template word or a list value has matched, not only open slots: a sentence that begins
    with a wildcard would otherwise "continue" any text at all."""


class SentenceSpace:
    """A word automaton over every sentence of the templates, with list values as tries."""

    def __init__(self, arcs: Mapping[int, Sequence[tuple[str, int]]], finals: frozenset[int], start: int,
                 lists: Mapping[str, tuple[Trie | Slot, ...]], verify: Callable[[str], bool] | None = None) -> None:
        self._arcs = arcs
        # each state's arcs by word, and its list arcs: a step looks its word up instead of scanning
        # every arc (the start state of Home Assistant's sentences has thousands)
        self._finals = finals
        self._lists = lists
        self._word_arcs: dict[int, dict[str, list[int]]] = {}
        self._list_arcs: dict[int, list[tuple[str, int, tuple[Trie | Slot, ...]]]] = {}
        for state, out in arcs.items():
            for label, to in out:
                self._word_arcs.setdefault(state, {}).setdefault(label, []).append(to)
                if "{" in label:
                    self._list_arcs.setdefault(state, []).append((label, to, self._list_for(label)))
        self._verify = verify
        self._initial = self._closure({_Pos(start)})
        self._first_steps: dict[tuple[str, bool], set[_Pos]] = {}
        """Where each first word leads: the start's positions are the most (1,229 for Home
        Assistant's English sentences), and every walk steps from them."""

    def with_verifier(self, verify: Callable[[str], bool]) -> SentenceSpace:
        """The same space, saying FINAL only for texts ``verify`` accepts too (e.g. hassil's own
        match: the walk's word normalization is simpler than hassil's)."""
        space = copy.copy(self)
        space._verify = verify
        return space

    @classmethod
    def from_intents(cls, intents: Intents) -> SentenceSpace:
        """Compile the templates (their text lists expanded; wildcards and ranges as open slots)."""
        from hassil import RangeSlotList, TextSlotList, WildcardSlotList
        from hassil.fst import intents_to_fst

        by_list: dict[str, Trie | Slot] = {}
        stand_ins: dict[str, TextSlotList] = {}
        every = [*intents.slot_lists.items()]
        every += [item for intent in intents.intents.values() for data in intent.data for item in data.slot_lists.items()]
        most: dict[str, float] = {}  # a range's largest value, the largest of any lists of one name
        for name, slot_list in every:
            if isinstance(slot_list, RangeSlotList):
                by_list.setdefault(name, NUMBER)
                most[name] = max(most.get(name, slot_list.stop), slot_list.stop)
            elif isinstance(slot_list, WildcardSlotList):
                # hassil's FST drops wildcard sentences; a stand-in keeps them, as open slots
                stand_ins[name] = TextSlotList.from_strings(["wildcard"], name=name)
                by_list[name] = OPEN
            elif isinstance(slot_list, TextSlotList) and name not in by_list:
                by_list[name] = values_trie(slot_list, intents)
        by_list.update({name: number_slot(bound) for name, bound in most.items() if by_list[name] is NUMBER})
        fst = intents_to_fst(intents, slot_lists=stand_ins or None).remove_spaces()
        arcs = {state: tuple((arc.in_label, arc.to_state) for arc in out) for state, out in fst.arcs.items() if out}
        return cls(arcs, frozenset(fst.final_states), fst.start, lists_by_slot(intents, by_list))

    @property
    def state_count(self) -> int:
        """States with outgoing arcs (a size figure for logs and benchmarks)."""
        return len(self._arcs)

    def complete(self, text: str) -> Completion:
        """How far ``text`` (a transcript) gets through the template sentences."""
        return self.walker().complete(text)

    def only_begun(self, text: str) -> bool:
        """Does ``text`` begin a template sentence without being one, through template words, list
        values and numbers (wildcards not counted)? At a pause such a transcript is kept as heard:
        the speaker may go on."""
        return self.walker(wildcards=False).complete(text) is Completion.PREFIX

    def walker(self, wildcards: bool = True) -> SpaceWalker:
        """Per-stream state: remembers the walk of the previous text, so a growing partial
        transcript costs only its new words. ``wildcards=False``: sentences are followed only
        through template words, list values and numbers (for decoding: a wildcard would let
        any text through)."""
        return SpaceWalker(self, wildcards)

    # -- the walk ---------------------------------------------------------------------------

    def _list_for(self, label: str) -> tuple[Trie | Slot, ...]:
        """What a placeholder may be: a slot filled by a text list and a wildcard is either."""
        match = _PLACEHOLDER.match(label)
        if match is None:  # a list glued to text, e.g. "{brightness}%": a number up to its ranges' end
            ranges = [k for k in self._lists.get(glued_name(label) or "", ()) if isinstance(k, Slot) and k.digits_close]
            bounds = [k.most for k in ranges if k.most is not None]
            return (glued_slot(label, max(bounds) if ranges and len(bounds) == len(ranges) else None),)
        return self._lists.get(match.group(1), (OPEN,))

    def _advance(self, positions: Iterable[_Pos], word: str, wildcards: bool = True) -> set[_Pos]:
        out: set[_Pos] = set()
        for p in positions:
            if p.trie is OPEN and not wildcards:
                continue
            if isinstance(p.trie, Slot):
                if slot_takes(p.trie, p.took) and fits(p.trie, word):
                    out.add(_slot_step(p.state, p.trie, p.took, word, p.anchored))
            elif p.trie is not None:
                child = p.trie.children.get(word)
                if child is not None:
                    out.add(_Pos(p.state, child, anchored=True))
            else:
                for to in self._word_arcs.get(p.state, {}).get(word, ()):
                    out.add(_Pos(to, anchored=True))
                for label, to, kinds in self._list_arcs.get(p.state, ()):
                    if label != word:
                        for values in kinds:
                            if values is OPEN and not wildcards:
                                continue
                            if isinstance(values, Slot):
                                if fits(values, word):
                                    out.add(_slot_step(to, values, 0, word, p.anchored))
                            elif (child := values.children.get(word)) is not None:
                                out.add(_Pos(to, child, anchored=True))
        return out

    def _first_step(self, word: str, wildcards: bool) -> set[_Pos]:
        key = (word, wildcards)
        positions = self._first_steps.get(key)
        if positions is None:
            if len(self._first_steps) >= 4096:  # words of any transcript come here: bounded
                self._first_steps.clear()
            positions = self._first_steps[key] = self._closure(self._advance(self._initial, word, wildcards))
        return positions

    def _closure(self, positions: set[_Pos]) -> set[_Pos]:
        """Add what epsilon arcs and finished list values reach without another word."""
        todo = list(positions)
        seen = set(positions)
        while todo:
            p = todo.pop()
            nxt: list[_Pos] = []
            if p.trie is None:
                nxt = [_Pos(to, anchored=p.anchored) for label, to in self._arcs.get(p.state, ()) if label == _EPS]
            elif isinstance(p.trie, Slot):
                if p.took != 0:
                    nxt = [_Pos(p.state, anchored=p.anchored)]
            elif p.trie.end:
                nxt = [_Pos(p.state, anchored=p.anchored)]
            for q in nxt:
                if q not in seen:
                    seen.add(q)
                    todo.append(q)
        return seen

    def _may_continue(self, p: _Pos) -> bool:
        if isinstance(p.trie, Slot):
            return slot_takes(p.trie, p.took)
        if p.trie is not None:
            return bool(p.trie.children)
        return any(label not in (_EPS, _SKIP) for label, _ in self._arcs.get(p.state, ()))




def _slot_step(state: int, slot: Slot, took: int, word: str, anchored: bool) -> _Pos:
    """The slot takes ``word``: a number in digits closes a range, other words count."""
    closed = slot.digits_close and is_digits(word)
    return _Pos(state, slot, -1 if closed else took + 1, anchored)


class SpaceWalker:
    """Walks one stream's running transcripts through a :class:`SentenceSpace` (not thread-safe)."""

    def __init__(self, space: SentenceSpace, wildcards: bool = True) -> None:
        self.space = space
        self.wildcards = wildcards
        self._words: list[str] = []
        self._steps: list[set[_Pos]] = [space._initial]
        """``_steps[i]``: where the walk is after the first ``i`` words of ``_words``."""

    def complete(self, text: str) -> Completion:
        """As :meth:`SentenceSpace.complete`, reusing the walk of the words shared with the last text."""
        whole, more = self._where(text)
        if whole and not more and self._verified(text):
            return Completion.FINAL
        if whole:
            return Completion.EXTENDABLE
        return Completion.PREFIX if more else Completion.NONE

    def _where(self, text: str) -> tuple[bool, bool]:
        """(a whole sentence ends here, a longer one may go on), by the walk alone."""
        self._walk(words_of(text))
        space = self.space
        positions = {p for p in self._steps[-1] if p.anchored}
        return (any(p.trie is None and p.state in space._finals for p in positions),
                any(space._may_continue(p) for p in positions))

    def _verified(self, text: str) -> bool:
        verify = self.space._verify
        return verify is None or verify(text)

    def ends(self, text: str) -> bool:
        """Is ``text`` a whole template sentence by the walk alone (the verifier not asked)?"""
        return self._where(text)[0]

    def verified(self, text: str) -> bool:
        """Does the space's verifier (hassil's own match) accept ``text``? True without one."""
        return self._verified(text)

    def fork(self) -> SpaceWalker:
        """An independent walker at the same place (for each hypothesis of a beam)."""
        other = SpaceWalker.__new__(SpaceWalker)
        other.space, other.wildcards = self.space, self.wildcards
        other._words, other._steps = list(self._words), list(self._steps)
        return other

    def may_begin(self, text: str) -> bool:
        """Could ``text`` be the beginning of a template sentence, its last word perhaps unfinished?

        For decoding constrained to the templates, token by token: "turn on the kitch" may
        begin "turn on the kitchen light". A text ending in a space or punctuation has only
        whole words.
        """
        words = words_of(text)
        partial = "" if not words or not text or not (text[-1].isalnum() or text[-1] in "'%") else words.pop()
        self._walk(words)
        # A sentence that begins with a wildcard would take any text: for decoding, a sentence
        # must begin with a template word or a list value.
        positions = [p for p in self._steps[-1] if p.anchored] if words else self._steps[-1]
        if not partial:
            return bool(positions)
        space = self.space
        for p in positions:
            if p.trie is OPEN and not (words and self.wildcards):
                continue
            if isinstance(p.trie, Slot):
                if slot_takes(p.trie, p.took) and fits(p.trie, partial, partial=True):
                    return True
            elif p.trie is not None:
                if any(w.startswith(partial) for w in p.trie.children):
                    return True
            else:
                for label, _ in space._arcs.get(p.state, ()):
                    if label.startswith(partial):
                        return True
                    if "{" in label:
                        for values in space._list_for(label):
                            if isinstance(values, Slot):
                                if (values is not OPEN or (words and self.wildcards)) and fits(values, partial, partial=True):
                                    return True
                            elif any(w.startswith(partial) for w in values.children):
                                return True
        return False

    def following(self, words: Sequence[str]) -> Following:
        """What may follow the whole ``words`` in a template sentence, as :meth:`may_begin` sees it,
        in one object to ask piece by piece: for a transducer's beam, which extends many texts by
        a piece of a word at a time, where ``may_begin`` on each text would scan the arcs again."""
        self._walk(list(words))
        space, open_ok = self.space, bool(words) and self.wildcards
        positions = [p for p in self._steps[-1] if p.anchored] if words else self._steps[-1]
        literal: set[str] = set()
        slots: set[Slot] = set()
        for p in positions:
            if isinstance(p.trie, Slot):
                if slot_takes(p.trie, p.took) and (p.trie is not OPEN or open_ok):
                    slots.add(p.trie)
            elif p.trie is not None:
                literal.update(p.trie.children)
            else:
                for label, _ in space._arcs.get(p.state, ()):
                    if "{" not in label:
                        literal.add(label)
                        continue
                    for values in space._list_for(label):
                        if isinstance(values, Trie):
                            literal.update(values.children)
                        elif values is not OPEN or open_ok:
                            slots.add(values)
        literal -= {_EPS, _SKIP}
        if any(slot is not OPEN for slot in slots):
            literal |= NUMBER_WORDS  # found by bisection like any word (``fits`` would scan them)
        return Following(tuple(sorted(literal)), tuple(slots), bool(positions))

    def is_whole(self, text: str) -> bool:
        """Is ``text`` a whole template sentence (longer ones may exist), the verifier agreeing?"""
        return self._where(text)[0] and self._verified(text)

    def _walk(self, words: list[str]) -> None:
        """Bring ``_steps`` to the positions after ``words``, reusing the shared prefix."""
        same = 0
        while same < min(len(words), len(self._words)) and words[same] == self._words[same]:
            same += 1
        del self._steps[same + 1:]
        self._words = words[:same]
        space = self.space
        for word in words[same:]:
            positions = self._steps[-1]
            if positions is space._initial:
                positions = space._first_step(word, self.wildcards)
            elif positions:
                positions = space._closure(space._advance(positions, word, self.wildcards))
            self._steps.append(positions)
            self._words.append(word)


@dataclass(frozen=True)
class Following:
    """The words that may come next at one place of a walk (see :meth:`SpaceWalker.following`)."""

    words: tuple[str, ...]
    """Template words, list values' words and number words where a number may come, sorted (a
    prefix is found by bisection)."""
    slots: tuple[Slot, ...]
    """Slots that may take the next word (numbers, a word glued to a number)."""
    alive: bool
    """The words so far are on a template sentence."""

    def begins(self, partial: str) -> bool:
        """May the next word begin with ``partial``? ("": may the walk go on at all.)"""
        if not partial:
            return self.alive
        i = bisect_left(self.words, partial)
        if i < len(self.words) and self.words[i].startswith(partial):
            return True
        if partial.isalpha():  # no digits: of the slots, only a wildcard takes what ``words`` lacks
            return OPEN in self.slots
        return any(fits(slot, partial, partial=True) for slot in self.slots)

    def takes(self, word: str) -> bool:
        """May exactly ``word`` come next?"""
        i = bisect_left(self.words, word)
        return (i < len(self.words) and self.words[i] == word) or any(fits(slot, word) for slot in self.slots)

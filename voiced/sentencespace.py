"""The sentences the templates can produce, as a word automaton: is a transcript a whole command?

Built once from the loaded hassil templates with hassil's own sentence FST
(``hassil.fst.intents_to_fst``, the structure Home Assistant's speech-to-phrase compiles),
then walked word by word over a running transcript. The endpointer asks one question of it:
*is this text a complete command that no longer template sentence could still extend?* If so
the utterance may end after a short silence (``[vad.endpoint] matched_silence_ms``).

The answer errs on the side of waiting: whatever the walk cannot decide — wildcards, number
ranges, list values written as templates, labels where a list is glued to text (``{x}%``) — is
an *open slot* that may always take one more word, so it never says "final" through one.
"""

from __future__ import annotations

import copy
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hassil import Intents

__all__ = ["Completion", "SentenceSpace", "SpaceWalker", "words_of"]

_EPS = "<eps>"
_SKIP = "<skip>"
_PLACEHOLDER = re.compile(r"^\{([^{}]+)\}$")
_STRIP = string.punctuation.replace("'", "").replace("%", "")


class Completion(Enum):
    NONE = "none"
    """No template sentence starts with the text."""
    PREFIX = "prefix"
    """The text begins a template sentence but is not one yet."""
    EXTENDABLE = "extendable"
    """The text is a whole sentence, and a longer one could still follow it."""
    FINAL = "final"
    """The text is a whole sentence and no longer sentence starts with it."""


def words_of(text: str) -> list[str]:
    """Lower-case words without the punctuation recognizers add (apostrophes and % stay)."""
    return [w for w in (t.strip(_STRIP) for t in text.lower().split()) if w]


@dataclass(eq=False)  # hashed by identity: walk positions hold nodes
class _Trie:
    children: dict[str, _Trie] = field(default_factory=dict)
    end: bool = False

    def add(self, words: Sequence[str]) -> None:
        node = self
        for w in words:
            node = node.children.setdefault(w, _Trie())
        node.end = True


class _Slot:
    """A slot the walk cannot expand into words: how many words it may take."""

    def __init__(self, name: str, max_words: int | None, digits_close: bool = False) -> None:
        self.name = name
        self.max_words = max_words
        """None: as many as come."""
        self.digits_close = digits_close
        """A word of digits is the whole value (a number range: "50", not "50 more")."""

    def __repr__(self) -> str:
        return f"<slot {self.name}>"


_OPEN = _Slot("wildcard", None)
"""A wildcard, a list written as templates, anything unknown: any words, as many as come."""
_NUMBER = _Slot("range", 3, digits_close=True)
"""A number range: digits ("50") or up to three number words ("one hundred", "twenty five")."""
_ONE_WORD = _Slot("glued", 1)
"""A list glued to text in one word ("{brightness}%"): exactly one word."""


@dataclass(frozen=True)
class _Pos:
    """Where a walk is: an FST state, or inside a list value (``trie``) that continues at ``state``."""

    state: int
    trie: _Trie | _Slot | None = None
    took: int = 0
    """Inside a slot: the words it has taken; -1 once a number in digits closed it."""
    anchored: bool = False
    """A template word or a list value has matched, not only open slots: a sentence that begins
    with a wildcard would otherwise "continue" any text at all."""


class SentenceSpace:
    """A word automaton over every sentence of the templates, with list values as tries."""

    def __init__(self, arcs: Mapping[int, Sequence[tuple[str, int]]], finals: frozenset[int], start: int,
                 lists: Mapping[str, _Trie | _Slot], verify: Callable[[str], bool] | None = None) -> None:
        self._arcs = arcs
        self._finals = finals
        self._lists = lists
        self._verify = verify
        self._initial = self._closure({_Pos(start)})

    def with_verifier(self, verify: Callable[[str], bool]) -> SentenceSpace:
        """The same space, saying FINAL only for texts ``verify`` accepts too (e.g. hassil's own
        match: the walk's word normalization is simpler than hassil's)."""
        space = copy.copy(self)
        space._verify = verify
        return space

    @classmethod
    def from_intents(cls, intents: Intents) -> SentenceSpace:
        """Compile the templates (their text lists expanded; wildcards and ranges as open slots)."""
        from hassil import TextSlotList, WildcardSlotList
        from hassil.expression import TextChunk
        from hassil.fst import intents_to_fst

        from hassil import RangeSlotList

        lists: dict[str, _Trie | _Slot] = {}
        stand_ins: dict[str, TextSlotList] = {}
        every = [*intents.slot_lists.items()]
        every += [item for intent in intents.intents.values() for data in intent.data for item in data.slot_lists.items()]
        for name, slot_list in every:
            if isinstance(slot_list, RangeSlotList):
                lists.setdefault(name, _NUMBER)
            elif isinstance(slot_list, WildcardSlotList):
                # hassil's FST drops wildcard sentences; a stand-in keeps them, as open slots
                stand_ins[name] = TextSlotList.from_strings(["wildcard"], name=name)
            elif isinstance(slot_list, TextSlotList) and name not in lists:
                texts = [v.text_in.text for v in slot_list.values if isinstance(v.text_in, TextChunk)]
                if len(texts) == len(slot_list.values):
                    trie = _Trie()
                    for text in texts:
                        trie.add(words_of(text))
                    lists[name] = trie
        for name in stand_ins:
            lists[name] = _OPEN  # a wildcard wins over a text list of the same name (never too early)
        fst = intents_to_fst(intents, slot_lists=stand_ins or None).remove_spaces()
        arcs = {state: tuple((arc.in_label, arc.to_state) for arc in out) for state, out in fst.arcs.items() if out}
        return cls(arcs, frozenset(fst.final_states), fst.start, lists)

    @property
    def state_count(self) -> int:
        """States with outgoing arcs (a size figure for logs and benchmarks)."""
        return len(self._arcs)

    def complete(self, text: str) -> Completion:
        """How far ``text`` (a transcript) gets through the template sentences."""
        return self.walker().complete(text)

    def walker(self) -> SpaceWalker:
        """Per-stream state: remembers the walk of the previous text, so a growing partial
        transcript costs only its new words."""
        return SpaceWalker(self)

    # -- the walk ---------------------------------------------------------------------------

    def _list_for(self, label: str) -> _Trie | _Slot:
        match = _PLACEHOLDER.match(label)
        if match is None:
            return _ONE_WORD  # a list glued to text, e.g. "{brightness}%"
        return self._lists.get(match.group(1), _OPEN)

    def _advance(self, positions: Iterable[_Pos], word: str) -> set[_Pos]:
        out: set[_Pos] = set()
        for p in positions:
            if isinstance(p.trie, _Slot):
                if _slot_takes(p.trie, p.took):
                    out.add(_slot_step(p.state, p.trie, p.took, word, p.anchored))
            elif p.trie is not None:
                child = p.trie.children.get(word)
                if child is not None:
                    out.add(_Pos(p.state, child, anchored=True))
            else:
                for label, to in self._arcs.get(p.state, ()):
                    if label == word:
                        out.add(_Pos(to, anchored=True))
                    elif "{" in label:
                        values = self._list_for(label)
                        if isinstance(values, _Slot):
                            out.add(_slot_step(to, values, 0, word, p.anchored))
                        elif (child := values.children.get(word)) is not None:
                            out.add(_Pos(to, child, anchored=True))
        return out

    def _closure(self, positions: set[_Pos]) -> set[_Pos]:
        """Add what epsilon arcs and finished list values reach without another word."""
        todo = list(positions)
        seen = set(positions)
        while todo:
            p = todo.pop()
            nxt: list[_Pos] = []
            if p.trie is None:
                nxt = [_Pos(to, anchored=p.anchored) for label, to in self._arcs.get(p.state, ()) if label == _EPS]
            elif isinstance(p.trie, _Slot):
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
        if isinstance(p.trie, _Slot):
            return _slot_takes(p.trie, p.took)
        if p.trie is not None:
            return bool(p.trie.children)
        return any(label not in (_EPS, _SKIP) for label, _ in self._arcs.get(p.state, ()))


def _slot_takes(slot: _Slot, took: int) -> bool:
    """May the slot take one more word?"""
    return took >= 0 and (slot.max_words is None or took < slot.max_words)


def _slot_step(state: int, slot: _Slot, took: int, word: str, anchored: bool) -> _Pos:
    """The slot takes ``word``: a number in digits closes a range, other words count."""
    closed = slot.digits_close and word.rstrip("%").replace(".", "", 1).isdigit()
    return _Pos(state, slot, -1 if closed else took + 1, anchored)


class SpaceWalker:
    """Walks one stream's running transcripts through a :class:`SentenceSpace` (not thread-safe)."""

    def __init__(self, space: SentenceSpace) -> None:
        self.space = space
        self._words: list[str] = []
        self._steps: list[set[_Pos]] = [space._initial]
        """``_steps[i]``: where the walk is after the first ``i`` words of ``_words``."""

    def complete(self, text: str) -> Completion:
        """As :meth:`SentenceSpace.complete`, reusing the walk of the words shared with the last text."""
        words = words_of(text)
        same = 0
        while same < min(len(words), len(self._words)) and words[same] == self._words[same]:
            same += 1
        del self._steps[same + 1:]
        self._words = words[:same]
        space = self.space
        for word in words[same:]:
            positions = self._steps[-1]
            if positions:
                positions = space._closure(space._advance(positions, word))
            self._steps.append(positions)
            self._words.append(word)
        positions = {p for p in self._steps[-1] if p.anchored}
        whole = any(p.trie is None and p.state in space._finals for p in positions)
        more = any(space._may_continue(p) for p in positions)
        if whole and not more and (space._verify is None or space._verify(text)):
            return Completion.FINAL
        if whole:
            return Completion.EXTENDABLE
        return Completion.PREFIX if more else Completion.NONE

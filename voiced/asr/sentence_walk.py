"""Which tokens keep a text on a template sentence, for a transducer's whole vocabulary at once.

The sentence beam (``sentence_context.py``) asks, for every path and every frame, which of the
vocabulary's tokens may follow the path's text. The answers come from the sentence space's walk
(:mod:`voiced.sentencespace`), reading tokens as results show them: a ``▁`` word start ends the
word before it. So that a frame costs array look-ups:

- a token is a word start, a piece that continues the last word, a symbol no sentence has
  (``<sos/eos>``), or anything else (punctuation, rare: asked of the walk as text);
- the words a walk may take next (:class:`voiced.sentencespace.Following`) are worked out once
  per word prefix, by a walker forked from the prefix one word shorter; which word starts they
  allow, once per prefix too; which continuations, once per text (a bisection over all pieces);
- whether a text ends a sentence is asked of the walk, and of hassil's own match (milliseconds)
  only for the sentences that may be chosen.

The answers equal ``SpaceWalker.may_begin`` / ``is_whole`` on the same texts.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from voiced.asr.tokens import SymbolTable
from voiced.sentencespace import Following, SpaceWalker, words_of

if TYPE_CHECKING:
    from voiced.sentencespace import SentenceSpace

__all__ = ["TextWalk", "TokenPieces"]

BLANK = 0


class _Piece(Enum):
    START = 1
    """Begins a word (``▁`` and letters, or a bare ``▁``): the last word is whole now."""
    CONTINUE = 2
    """Letters (apostrophes, %) that continue the last word."""
    OTHER = 3
    """Anything else (punctuation): the text is walked as text."""
    NEVER = 4
    """A symbol such as ``<sos/eos>``, or nothing shown: no sentence has it."""


def _piece(shown: str) -> tuple[_Piece, str]:
    """How a token's shown symbol changes a text, and its letters (lower case, as the walk reads)."""
    rest = shown[1:] if shown.startswith(" ") else shown
    if (not rest.strip() and shown != " ") or (rest.startswith("<") and rest.endswith(">")):
        return _Piece.NEVER, ""
    if all(c.isalnum() or c in "'%" for c in rest) and (rest or shown == " "):
        return (_Piece.START if shown.startswith(" ") else _Piece.CONTINUE), rest.lower()
    return _Piece.OTHER, shown


def _partial(text: str) -> tuple[tuple[str, ...], str]:
    """The whole words of ``text`` and its last word if unfinished (as ``may_begin`` splits it)."""
    words = words_of(text)
    partial = words.pop() if words and (text[-1].isalnum() or text[-1] in "'%") else ""
    return tuple(words), partial


class TokenPieces:
    """The vocabulary sorted by how each token changes a text; shared by a recognizer's streams."""

    def __init__(self, table: SymbolTable, space: SentenceSpace) -> None:
        self.space = space
        self.shown = table.shown
        self.unk_id = table.unk_id
        self.vocab = max(table.shown) + 1
        self.keeps = [BLANK] if table.unk_id is None else [BLANK, table.unk_id]
        """Blank and ``<unk>``: a path's text stays, as both searches treat them."""
        kinds: dict[_Piece, list[tuple[int, str]]] = {kind: [] for kind in _Piece}
        for token in range(self.vocab):
            if token not in self.keeps:
                kind, letters = _piece(self.shown.get(token, ""))
                kinds[kind].append((token, letters))

        def arrays(kind: _Piece) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            ids = np.array([t for t, _ in kinds[kind]], np.int64)
            letters = np.array([s for _, s in kinds[kind]], dtype=str)
            return ids, letters, np.array([s.isalpha() for _, s in kinds[kind]], bool)

        self.starts, self.continues = arrays(_Piece.START), arrays(_Piece.CONTINUE)
        self.others = [t for t, _ in kinds[_Piece.OTHER]]
        self.first: tuple[_Next, np.ndarray] | None = None
        walk = TextWalk(self)
        self.first = walk._next(()), walk.mask("")
        """What a sentence may begin with, and the tokens that may begin one: the largest answers
        (every first word), which every stream needs at its first frames; worked out once."""

    def text(self, tokens: tuple[int, ...]) -> str:
        return "".join(self.shown[t] for t in tokens if t != self.unk_id)


class _Next:
    """What may follow some whole words, asked for many pieces at once."""

    def __init__(self, following: Following) -> None:
        self.following = following
        self.words = np.array(following.words, dtype=str)
        self.starts: np.ndarray | None = None
        """Which word-start tokens may come next (TokenPieces.starts order), once asked."""

    def begins(self, candidates: np.ndarray, plain: np.ndarray) -> np.ndarray:
        """``Following.begins`` of each candidate; ``plain``: the candidate is letters only."""
        n = len(self.words)
        if n:
            at = np.searchsorted(self.words, candidates)
            hit = (at < n) & np.char.startswith(self.words[np.minimum(at, n - 1)], candidates)
        else:
            hit = np.zeros(len(candidates), bool)
        for i in np.flatnonzero(~hit & ~plain):  # digits, apostrophes, a bare mark: slots decide
            hit[i] = self.following.begins(str(candidates[i]))
        return hit


class TextWalk:
    """One stream's walk of many texts: memos per text and per word prefix (not thread-safe)."""

    def __init__(self, pieces: TokenPieces) -> None:
        self.pieces = pieces
        # a walker per word prefix, forked from the one a word shorter: each walks one word
        self._walkers: dict[tuple[str, ...], SpaceWalker] = {(): pieces.space.walker(wildcards=False)}
        self._next_of: dict[tuple[str, ...], _Next] = {}
        self._masks: dict[str, np.ndarray] = {}
        self._ends: dict[str, bool] = {}
        self._verified: dict[str, bool] = {}
        if pieces.first is not None:
            self._next_of[()], self._masks[""] = pieces.first

    def mask(self, text: str) -> np.ndarray:
        """Which tokens keep ``text`` on a template sentence (bool over the vocabulary)."""
        mask = self._masks.get(text)
        if mask is not None:
            return mask
        p = self.pieces
        mask = np.zeros(p.vocab, bool)
        mask[p.keeps] = True
        words, partial = _partial(text)
        if text and not partial and not text[-1].isspace():  # after punctuation a piece may glue on
            for token in np.concatenate([p.starts[0], p.continues[0], p.others]).tolist():
                mask[token] = self.may_begin(text + p.shown[token])
        else:
            here = self._next(words)
            # a word start makes the unfinished word whole: the next word is asked after it
            after = here if not partial else self._next((*words, partial)) if here.following.takes(partial) else None
            if after is not None:
                if after.starts is None:
                    after.starts = after.begins(p.starts[1], p.starts[2])
                mask[p.starts[0]] = after.starts
            ids, letters, plain = p.continues
            mask[ids] = here.begins(np.char.add(partial, letters), plain if partial.isalpha() or not partial
                                    else np.zeros(len(ids), bool))
            for token in p.others:
                mask[token] = self.may_begin(text + p.shown[token])
        self._masks[text] = mask
        return mask

    def may_begin(self, text: str) -> bool:
        """``SpaceWalker.may_begin``."""
        words, partial = _partial(text)
        return self._next(words).following.begins(partial)

    def ends(self, text: str) -> bool:
        """Does ``text`` end a template sentence by the walk? (Asked only when its last word may
        come where it stands.)"""
        verdict = self._ends.get(text)
        if verdict is None:
            words = tuple(words_of(text))
            verdict = (bool(words) and self._next(words[:-1]).following.takes(words[-1])
                       and self._walker(words).ends(text))
            self._ends[text] = verdict
        return verdict

    def is_whole(self, text: str) -> bool:
        """``SpaceWalker.is_whole``: the walk's end, and hassil's match agreeing (asked last)."""
        if not self.ends(text):
            return False
        verdict = self._verified.get(text)
        if verdict is None:
            verdict = self._verified[text] = self._walkers[()].verified(text)
        return verdict

    def _next(self, words: tuple[str, ...]) -> _Next:
        nxt = self._next_of.get(words)
        if nxt is None:
            nxt = self._next_of[words] = _Next(self._walker(words).following(words))
        return nxt

    def _walker(self, words: tuple[str, ...]) -> SpaceWalker:
        """The walker of ``words``: asked only about them, it walks them once, from where the
        walker of the words before left off."""
        walker = self._walkers.get(words)
        if walker is None:
            walker = self._walkers[words] = self._walker(words[:-1]).fork()
        return walker

"""Hotword / phrase boosting: an Aho-Corasick graph over token sequences.

Each token that extends a listed phrase earns ``boost``; a path that breaks off gives the
unfinished part of its bonus back, so only completed phrases keep their score.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["ContextGraph", "ContextState"]


@dataclass(eq=False)
class ContextState:
    """A node of the graph; hypotheses carry one as their matching position."""

    token: int
    depth: int
    score: float
    """Bonus accumulated from the root to here."""
    locked: float = 0.0
    """Part of ``score`` earned by phrases completed on this path; never given back."""
    is_end: bool = False
    children: dict[int, ContextState] = field(default_factory=dict)
    fail: ContextState | None = None

    @property
    def unfinished(self) -> float:
        return self.score - self.locked


class ContextGraph:
    """Phrases as token-id sequences, each token boosted by ``boost`` (or a per-phrase score)."""

    def __init__(self, phrases: Sequence[Sequence[int]], boost: float = 1.5, scores: Sequence[float] | None = None) -> None:
        self.root = ContextState(token=-1, depth=0, score=0.0)
        self.root.fail = self.root
        for i, phrase in enumerate(phrases):
            if phrase:
                self._insert(phrase, scores[i] if scores else boost)
        self._link()

    def _insert(self, phrase: Sequence[int], boost: float) -> None:
        node = self.root
        for token in phrase:
            child = node.children.get(token)
            if child is None:
                child = ContextState(token=token, depth=node.depth + 1, score=node.score + boost, locked=node.locked)
                node.children[token] = child
            node = child
        node.is_end = True
        node.locked = node.score
        self._relock(node)

    def _relock(self, node: ContextState) -> None:
        # A phrase ending here locks the bonus of longer phrases that pass through it.
        for child in node.children.values():
            child.locked = max(child.locked, node.locked)
            self._relock(child)

    def _link(self) -> None:
        queue = deque(self.root.children.values())
        for child in queue:
            child.fail = self.root
        while queue:
            node = queue.popleft()
            for token, child in node.children.items():
                fail = node.fail
                while token not in fail.children and fail is not self.root:
                    fail = fail.fail
                child.fail = fail.children[token] if token in fail.children and fail.children[token] is not child else self.root
                queue.append(child)

    def step(self, state: ContextState, token: int) -> tuple[float, ContextState]:
        """Advance by one emitted token; return (score change, next state)."""
        node = state
        while token not in node.children and node is not self.root:
            node = node.fail
        nxt = node.children.get(token, self.root)
        if nxt is state.children.get(token):
            return nxt.score - state.score, nxt
        # Broke off: give back what the old path had not locked in, take what the new path has.
        return nxt.unfinished - state.unfinished, nxt

    def finalize(self, state: ContextState) -> float:
        """Score change at the end of an utterance: an unfinished phrase gives its bonus back."""
        return -state.unfinished

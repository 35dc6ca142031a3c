"""Template sentences a few word edits away from a free transcript.

The constrained Whisper search walks tokens from the first one on, so a command whose first
word the audio disfavours ("set" heard as "is that", "pause" dropped) can use up its budget
before any sentence is finished, while the free transcript already has most of the words
right: "the media players my bathroom people" for "pause the media players my bathroom". Here
the sentence space is walked against the free transcript's words (match, substitute, insert,
delete; each edit costs 1), cheapest first, and the sentences within a small cost of the best
are returned for the model to score. Only edits that lead back onto the transcript are tried
(an inserted or substituted word must be followed by the transcript's next word, or be spelled
like the word it replaces), so the walk stays small on Home Assistant's whole set.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from difflib import SequenceMatcher

from weakref import WeakKeyDictionary

from voiced.sentencespace import Following, SentenceSpace, SpaceWalker, words_of

__all__ = ["AlignSettings", "sentences_near"]


@dataclass(frozen=True)
class AlignSettings:
    """Bounds of the walk (its cost is Python work on the sentence space, no model calls)."""

    max_edits: int = 5
    """Sentences more than this many word edits from the transcript are not looked for. Five: in
    a noisy room Whisper loses a command's first word and adds a few of its own at the end ("Off
    the shows the bedroom to rest", "That's the 16 hours time, Rosenelle."); see
    ``TemplateDecoding.align_below`` for what the wider walk (was 3 edits, 300 positions, 4
    results) gained."""
    max_expansions: int = 2000
    """Walk positions expanded at most per transcript."""
    results: int = 8
    """Sentences returned at most (each costs the caller one scoring call)."""
    similar: float = 0.4
    """A substituted word must be spelled at least this much like the transcript's word
    (difflib ratio) unless the transcript's next word follows it."""
    narrow: int = 15
    """Where at most this many words may come next (and at the beginning), every one of them is
    tried as an inserted or substituted word that the transcript's next word follows."""


def _similar(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b).ratio()


class _Alike:
    """Is a word spelled at least ``at_least`` like a transcript's word (difflib ratio)? One matcher
    per transcript word, whose tables difflib builds once (``SequenceMatcher`` caches what it
    knows of its second sequence), and each answer kept: the walk asks about the same words at
    many of its positions (rebuilding the matcher per question was ~40 % of its CPU on read speech)."""

    def __init__(self, at_least: float) -> None:
        self.at_least = at_least
        self._matchers: dict[str, SequenceMatcher[str]] = {}
        self._answers: dict[tuple[str, str], bool] = {}

    def __call__(self, word: str, heard: str) -> bool:
        answer = self._answers.get((word, heard))
        if answer is None:
            matcher = self._matchers.get(heard)
            if matcher is None:
                matcher = self._matchers[heard] = SequenceMatcher(None, "", heard)
            matcher.set_seq1(word)
            at_least = self.at_least
            answer = self._answers[word, heard] = (matcher.real_quick_ratio() >= at_least
                                                   and matcher.quick_ratio() >= at_least
                                                   and matcher.ratio() >= at_least)
        return answer


def sentences_near(space: SentenceSpace, text: str, settings: AlignSettings = AlignSettings()) -> list[str]:
    """Whole template sentences (hassil agreeing; wildcards not followed) at most ``max_edits`` word
    edits from ``text``, fewest edits first, then most alike in spelling; lower-case words."""
    free = words_of(text)
    if not free:
        return []
    walker = space.walker(wildcards=False)
    follow = _Follow(space.walker(wildcards=False), _CACHES.setdefault(space, {}))
    alike = _Alike(settings.similar)
    # fewest edits first, then the furthest along the transcript (a found sentence bounds the rest)
    order = 0
    heap: list[tuple[int, int, int, tuple[str, ...], int]] = [(0, 0, order, (), 0)]
    seen: set[tuple[tuple[str, ...], int]] = set()
    found: list[tuple[int, float, str]] = []
    best: int | None = None
    expansions = 0

    def push(cost: int, words: tuple[str, ...], used: int) -> None:
        nonlocal order
        if cost <= settings.max_edits and (best is None or cost <= best + 1):
            order += 1
            heapq.heappush(heap, (cost, -used, order, words, used))

    while heap and expansions < settings.max_expansions:
        cost, _, _, words, used = heapq.heappop(heap)
        if best is not None and cost > best + 1:
            break
        if (words, used) in seen:
            continue
        seen.add((words, used))
        expansions += 1
        sentence = " ".join(words)
        # the walk alone here: hassil's own match (the verifier) is slow, so it judges only the results
        if used == len(free) and words and walker.ends(sentence):
            found.append((cost, _similar(sentence, " ".join(free)), sentence))
            best = cost if best is None else min(best, cost)
        following = follow(words)
        if not following.alive:
            continue
        if used == len(free):  # the transcript is used up: words it lacks at the end
            for word in following.words:
                push(cost + 1, (*words, word), used)
            continue
        here = free[used]
        after = free[used + 1] if used + 1 < len(free) else None
        push(cost + 1, words, used + 1)  # the transcript's word is not in the sentence
        if following.takes(here):
            push(cost, (*words, here), used + 1)
        # a number heard with a suffix ("19th" for "19"): its digits may be the slot's value
        digits = "".join(c for c in here if c.isdigit())
        if digits and digits != here and following.takes(digits):
            push(cost + 1, (*words, digits), used + 1)
        # Misheard (substituted) or missing (inserted) words. Checking that the transcript goes on
        # after one costs a walk, so that is done where the choice is wide only at the beginning
        # (where the audio's first word is most often lost) and where few words may come.
        check = not words or len(following.words) <= settings.narrow
        for word in following.words:
            if word == here:
                continue
            if alike(word, here) or (check and follow.leads((*words, word), after)):
                push(cost + 1, (*words, word), used + 1)
            if check and follow.leads((*words, word), here):
                push(cost + 1, (*words, word), used)
    found.sort(key=lambda f: (f[0], -f[1]))
    whole = (s for _, _, s in found if walker.verified(s))
    return [s for s, _ in zip(whole, range(settings.results))]


class _Follow:
    """``SpaceWalker.following`` per word prefix, kept per sentence space: the same first words
    are asked about for every transcript."""

    MAX = 20_000

    def __init__(self, walker: SpaceWalker, cache: dict[tuple[str, ...], Following]) -> None:
        self._walker = walker
        self._cache = cache

    def __call__(self, words: tuple[str, ...]) -> Following:
        found = self._cache.get(words)
        if found is None:
            if len(self._cache) >= self.MAX:
                self._cache.clear()
            found = self._cache[words] = self._walker.following(words)
        return found

    def leads(self, words: tuple[str, ...], nxt: str | None) -> bool:
        """May ``nxt`` come after ``words`` (None: may the walk go on at all)?"""
        following = self(words)
        return following.alive and (nxt is None or following.takes(nxt))


_CACHES: WeakKeyDictionary[SentenceSpace, dict[tuple[str, ...], Following]] = WeakKeyDictionary()

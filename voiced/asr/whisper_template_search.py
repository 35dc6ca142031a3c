"""The constrained best-first search of template-aware Whisper decoding (see whisper_templates).

Hypotheses extend only with tokens that continue a template sentence: each token's text is
checked once (``_piece``), then against the sentence space's walker. Best-first by
log-probability plus a per-token reward within a budget of decoder calls, then depth first;
``search_on_winning`` calls more when the first finished sentence already wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from weakref import WeakKeyDictionary

import numpy as np

from voiced.asr.logprob import log_softmax
from voiced.asr.spoken_length import SIGN_WORDS
from voiced.asr.whisper_prefix import CachedTokens, PrefixCaches
from voiced.sentencespace import Following, SentenceSpace, SpaceWalker, words_of

if TYPE_CHECKING:
    import onnxruntime as ort

    from voiced.asr.whisper_model import WhisperModel
    from voiced.asr.whisper_templates import TemplateDecoding

__all__: list[str] = []  # internal to whisper_templates


_SENTENCE_MARKS = frozenset(".,?!")
_SENTENCE_END = frozenset(".?!")


_UNIT_SIGNS = frozenset(SIGN_WORDS)
"""Signs a template writes after a number ("50%", "21.5°"), which Whisper's tokens carry alone or
with a mark ("%", "%.")."""


def _plain(piece: str) -> bool:
    """A piece of a word or number, a unit sign, or one sentence mark: no brackets, notes, other
    symbols, dashes or blanks a template never has."""
    if piece.strip() in _SENTENCE_MARKS:
        return bool(piece.strip())
    return (any(c.isalnum() or c in _UNIT_SIGNS for c in piece)
            and all(c.isalnum() or c.isspace() or c in "'-" or c in _UNIT_SIGNS or c in _SENTENCE_MARKS
                    for c in piece))



@dataclass
class _Hyp:
    tokens: list[int]
    probs: list[float]
    logprob: float
    walker: SpaceWalker
    row: np.ndarray | None = None
    """Log-probabilities of the next token; None until the decoder has been run for the last token."""
    cache: CachedTokens | None = None
    """The decoder's self-attention K/V after the tokens before the last; None once the hypothesis
    is finished (end of text chosen)."""


class _Piece(NamedTuple):
    """One token's text, and what the constrained search asks of it alone (worked out once)."""

    text: str
    plain: bool
    """``_plain``: a template could have it."""
    word: bool
    """It has a letter or digit (a sentence begins with a word)."""
    mark_first: bool
    """It begins with a sentence mark."""
    ends: bool
    """It ends with a full stop, question or exclamation mark."""


def _piece(model: WhisperModel, token: int) -> _Piece:
    pieces = _PIECES.get(model)
    if pieces is None:
        pieces = _PIECES[model] = {}
    piece = pieces.get(token)
    if piece is None:
        text = model.text([token])
        piece = pieces[token] = _Piece(text, _plain(text), any(c.isalnum() for c in text),
                                       text.lstrip()[:1] in _SENTENCE_MARKS, text.rstrip()[-1:] in _SENTENCE_END)
    return piece


_PIECES: WeakKeyDictionary[WhisperModel, dict[int, _Piece]] = WeakKeyDictionary()
_FOLLOWING: WeakKeyDictionary[SentenceSpace, dict[tuple[str, ...], Following]] = WeakKeyDictionary()
"""``SpaceWalker.following`` (wildcards off) per word prefix, per sentence space: every utterance
asks about the same first words."""


class _Begins:
    """``SpaceWalker.may_begin(text + piece)`` for one text and many pieces, answered by
    ``Following.begins`` (the same answer: a placeholder's arc label starts with "{", which no
    stripped word does) from one ``Following`` per word prefix: the walk and its arcs are scanned
    once per prefix, not once per candidate token (that was ~80 % of the search's CPU)."""

    MAX = 20_000

    def __init__(self, walker: SpaceWalker, text: str) -> None:
        self._walker = walker
        # ``text`` is head + tail: tail its last unspaced run, which a piece without a space
        # glues onto; the head's words stay whatever the piece is
        self._tail = "" if not text or text[-1].isspace() else text.split()[-1]
        self._head = tuple(words_of(text[:len(text) - len(self._tail)]))
        self._last = text[-1:]
        self._cache = _FOLLOWING.setdefault(walker.space, {})
        self._mine: dict[tuple[str, ...], Following] = {}

    def __call__(self, piece: str) -> bool:
        new = words_of(self._tail + piece)
        last = piece[-1:] or self._last
        unfinished = bool(self._head or new) and (last.isalnum() or last in "'%")
        extra = tuple(new[:-1] if unfinished else new)
        following = self._mine.get(extra)
        if following is None:
            words = self._head + extra
            following = self._cache.get(words)
            if following is None:
                if len(self._cache) >= self.MAX:  # words of any transcript come here: bounded
                    self._cache.clear()
                following = self._cache[words] = self._walker.following(words)
            self._mine[extra] = following
        return following.begins((new or self._head)[-1] if unfinished else "")


def _next_tokens(model: WhisperModel, hyp: _Hyp, settings: TemplateDecoding, cap: int) -> list[tuple[int, float]]:
    """Up to ``cap`` allowed next tokens of ``hyp`` with their log-probabilities, best first."""
    assert hyp.row is not None
    row = hyp.row
    text = model.text(hyp.tokens)
    ended = text.rstrip().endswith(tuple(_SENTENCE_END))  # after a full stop only the end of text
    # ... or a number's decimals: Whisper writes "21.5" as " 21" + "." + "5"
    point = text[-1:] == "." and text[-2:-1].isdigit()
    after_mark = text.rstrip()[-1:] in _SENTENCE_MARKS
    spoken = bool(text.strip())
    begins = _Begins(hyp.walker, text)
    found: list[tuple[int, float]] = []
    top = np.argpartition(row, -settings.top_k)[-settings.top_k:] if settings.top_k < len(row) else np.arange(len(row))
    for candidate in top[np.argsort(-row[top])].tolist():  # a partial sort: the full one costs ~3 ms a call
        if candidate == model.eot:
            if hyp.tokens and hyp.walker.is_whole(text):
                found.append((candidate, float(row[candidate])))
        elif (candidate < model.eot and (piece := _piece(model, candidate)).plain
              and (not ended or (point and piece.text[:1].isdigit()))
              and (spoken or piece.word)  # a sentence begins with a word
              # no mark right after a mark: the walk skips marks, so ", , ," would be a free loop
              and not (piece.mark_first and after_mark)
              and begins(piece.text)
              and (not settings.cased_words or _cased(text + piece.text))
              # a full stop only where a sentence may end (after one only the end of text may come),
              # or as a decimal point
              and (not piece.ends or hyp.walker.is_whole(text + piece.text)
                   or (piece.text == "." and text[-1:].isdigit()))):
            found.append((candidate, float(row[candidate])))
        if len(found) == cap:
            break
    return found


def _cased(text: str) -> bool:
    """The last word of ``text`` is written as words are: lower case, Capitalized or UPPER CASE
    (an UPPER CASE plural may end in a lower-case s: "TVs")."""
    words = text.split()
    letters = "".join(c for c in words[-1] if c.isalpha()) if words else ""
    if letters[-1:] == "s" and len(letters) > 2 and letters[:-1].isupper():
        return True
    return not letters or letters.islower() or letters.isupper() or (letters[0].isupper() and letters[1:].islower())


def _rank(hyp: _Hyp, settings: TemplateDecoding) -> float:
    """The search order's key (higher first)."""
    if settings.token_reward is None:
        return _normalized(hyp)
    finished = hyp.row is None and hyp.cache is None
    return hyp.logprob + settings.token_reward * (len(hyp.tokens) + finished)


def _deep(hyp: _Hyp, settings: TemplateDecoding) -> float:
    """Depth first (tokens so far, a finished sentence deepest), then the search order's key."""
    finished = hyp.row is None and hyp.cache is None
    return 1e6 * (len(hyp.tokens) + 2 * finished) + _rank(hyp, settings)


def _per_token_score(logprob: float, tokens: int) -> float:
    """Log-probability per token of a text of ``tokens`` tokens, end of text counted: a sentence
    cut short is not preferred just for having fewer tokens to pay for, as in Whisper's own beam
    search. The one per-token score the search, the aligner and the choice all compare."""
    return logprob / (tokens + 1)


def _normalized(hyp: _Hyp) -> float:
    """A hypothesis's ``_per_token_score``."""
    return _per_token_score(hyp.logprob, len(hyp.tokens))


def _constrained(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding, cross_k: ort.OrtValue,
                 cross_v: ort.OrtValue, num_frames: int, initial: list[int], floor: float = -np.inf,
                 unfinished: list[tuple[float, list[int]]] | None = None, wins_at: float = np.inf,
                 judge: Callable[[list[int], float], float] | None = None
                 ) -> tuple[list[int], list[float], float] | None:
    """Best-first search over the tokens that keep the text inside the template sentences.

    The most promising hypothesis (``_rank``) is extended next, so a beginning the audio favours
    but no sentence continues gives way to the next best one instead of crowding it out of a
    fixed beam. Ends ``search_on`` calls after the first finished sentence popped with the most
    probable one per token (``search_on_winning`` calls when that first sentence's log-probability
    per token reaches ``wins_at``: what it needs to win the choice; infinite: never), or None when
    ``max_steps`` decoder calls (plus, with ``complete``, the depth-first rest) found none, or when
    no beginning is left whose log-probability per token reaches ``floor``. ``unfinished``, when
    given, receives each beginning the best-first part extended (its search key and tokens).
    ``judge`` (tokens, log-probability) ranks finished sentences against each other; by default
    their log-probability per token.
    """
    import heapq
    import itertools

    from voiced.asr.whisper_model import TOKENS_PER_SECOND

    caches = PrefixCaches(model)  # each hypothesis keeps its own positions only, not a whole cache
    logits, cached = caches.step(initial, None, cross_k, cross_v)
    limit = min(int(num_frames / 100.0 * TOKENS_PER_SECOND), model.n_text_ctx // 2 - len(initial))
    order = itertools.count()  # ties: the earlier first
    root = _Hyp([], [], 0.0, space.walker(wildcards=False), log_softmax(logits[0, -1]), cached)
    queue: list[tuple[float, int, _Hyp]] = [(0.0, next(order), root)]
    steps = 0

    def extend(hyp: _Hyp) -> None:  # one decoder call for the token that made this hypothesis
        logits, cached = caches.step([hyp.tokens[-1]], hyp.cache, cross_k, cross_v)
        hyp.row, hyp.cache = log_softmax(logits[0, -1]), cached

    def children(hyp: _Hyp, cap: int) -> list[_Hyp]:
        found = []
        for token, logp in _next_tokens(model, hyp, settings, cap):
            if token == model.eot:
                found.append(_Hyp(hyp.tokens, hyp.probs, hyp.logprob + logp, hyp.walker))
            elif len(hyp.tokens) < limit and (hyp.logprob + logp) / (len(hyp.tokens) + 2) >= floor:
                found.append(_Hyp([*hyp.tokens, token], [*hyp.probs, float(np.exp(logp))], hyp.logprob + logp,
                                  hyp.walker.fork(), None, hyp.cache))
        return found

    def judged(hyp: _Hyp) -> float:
        return _normalized(hyp) if judge is None else judge(hyp.tokens, hyp.logprob)

    budget = settings.max_steps
    best: _Hyp | None = None
    best_judged = -np.inf  # ``judged(best)``, kept: it is compared with every hypothesis popped after
    stop_at = 0
    while queue:
        _, _, hyp = heapq.heappop(queue)
        if hyp.row is None and hyp.cache is None:
            # a finished sentence is the best thing left by the search order; by the choice's
            # (per token) a longer one may still be better: ``search_on`` more calls look for it,
            # ``search_on_winning`` when this one is chosen over the free transcript anyway
            if best is None:
                extra = settings.search_on
                if _normalized(hyp) >= wins_at:  # the command is chosen either way: which one is still open
                    extra = max(extra, settings.search_on_winning)
                stop_at = steps + extra
            score = judged(hyp)
            if best is None or score > best_judged:
                best, best_judged = hyp, score
            continue
        if best is not None:
            if steps >= stop_at:
                break
            if _normalized(hyp) < best_judged:  # (a beginning may grow into a sentence judged as it is scored)
                continue
        if hyp.row is None:
            if steps == budget and best is None:
                if not settings.complete or budget > settings.max_steps:
                    return None
                # Out of calls with no sentence finished: go depth first from what is left (deepest,
                # then best), backtracking to a sibling at a dead end, for at most the token limit
                # more calls, rather than giving up on a sentence the search was well into.
                budget += limit
                queue = [(-_deep(h, settings), i, h) for _, i, h in [*queue, (0.0, next(order), hyp)]]
                heapq.heapify(queue)
                continue
            steps += 1
            extend(hyp)
            if unfinished is not None and budget == settings.max_steps:
                unfinished.append((_rank(hyp, settings), hyp.tokens))
        # the first word decides most: the audio's first choices are often no command's beginning
        cap = settings.beam * (4 if not hyp.tokens else 1)
        for child in children(hyp, cap):
            key = _rank(child, settings) if budget == settings.max_steps else _deep(child, settings)
            heapq.heappush(queue, (-key, next(order), child))
    return (best.tokens, best.probs, best.logprob) if best is not None else None

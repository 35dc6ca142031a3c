"""Template-aware Whisper decoding: a command the templates allow, when the audio supports it.

Free greedy decoding is bad at short commands: a device name comes out as a similar-sounding
word, two-word commands as unrelated phrases. Here a second, constrained search keeps only
tokens that continue a template sentence (checked on the text with the sentence space, so any
tokenization of a sentence is allowed, and its end only where hassil matches the whole text).
It is best-first: the hypothesis with the best log-probability plus a reward per token (an
estimate of what the rest of the sentence costs) is extended next, within a budget of decoder
calls, then depth first if no sentence was finished by then. When the first sentence finished
already wins the choice, a few more calls look for a more probable one per token
(``search_on_winning``: best-first order finishes "cancel all of my timers" before "... in our
bathroom"); the free transcript is kept or not as before. If none is finished, the template
sentences a few word edits from the free transcript or from the search's deepest beginnings
are scored instead (``template_align``: the first word lost or misheard, a word too many at
the end, a last word Whisper would only write another way). Wildcard sentences are not
followed (a wildcard would let any text through): their utterances keep the free transcript.
Both texts are scored by the same model on the same audio (log-probability per token, end of
text included), and the constrained one wins unless the free one is more probable by more than ``margin`` nats per token. Read
speech that is no command finds no constrained sentence, or only an improbable one; the free
transcript is scored first, so beginnings far below what could win are dropped (``hopeless``)
and the search on read speech mostly ends after a few calls instead of its whole budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple
from weakref import WeakKeyDictionary

import numpy as np

from voiced.asr.logprob import log_softmax
from voiced.asr.template_align import AlignSettings, sentences_near
from voiced.errors import ConfigError
from voiced.sentencespace import Following, SentenceSpace, SpaceWalker, words_of

if TYPE_CHECKING:
    import onnxruntime as ort

    from voiced.asr.whisper_model import WhisperModel

__all__ = ["Choice", "TemplateDecoding", "decode_with_templates"]


@dataclass(frozen=True)
class TemplateDecoding:
    """How template-aware decoding chooses between the free and the constrained transcript."""

    margin: float = 3.0
    """The free transcript wins only when its log-probability per token exceeds the constrained
    one's by more than this many nats: the smallest margin with the fewest word errors on the
    development half of ``voiced bench commands`` (3.0 with the search of 2026-11-25; hifitts
    read speech: 1 of 116 transcripts changed, WER 9.73 -> 9.62 %)."""
    top_k: int = 300
    """Tokens considered at each constrained step, most probable first."""
    beam: int = 8
    """Next tokens considered per hypothesis."""
    max_steps: int = 120
    """Decoder calls the constrained search may spend on one utterance (each ~10-20 ms here)."""
    token_reward: float | None = 1.0
    """Search order: log-probability plus this many nats per token, an estimate of what the rest
    of the sentence will cost (A*-like); None ranks by log-probability per token instead, which
    spends the budget on short, cheap beginnings while a sentence whose first word the audio
    disfavours ("Pause" heard as "Lost") waits. Chosen on the development half of ``voiced bench
    commands`` (right intents, all with the mark rules and ``complete``: 0.75 52/60, 1.0 53/60,
    1.5 49/60; 1.0 without ``complete`` 51/60; per token, before the mark rules, 46/60)."""
    complete: bool = True
    """When ``max_steps`` runs out with no sentence finished, go on depth first (backtracking at
    dead ends) for at most the utterance's token limit more calls instead of giving up."""
    align: AlignSettings | None = AlignSettings()
    """When the search finds no sentence, score the template sentences a few word edits from the
    free transcript (one decoder call each, see ``template_align``) and take the best; None: the
    search alone."""
    hopeless: float | None = 1.0
    """A beginning whose log-probability per token so far is more than this many nats below what
    the constrained sentence needs to win (the free transcript's per token minus ``margin``) is
    not followed; None: all are. Read speech is no command: the free transcript is probable, the
    template beginnings are not (87 % of the hypotheses the search expanded on 116 hifitts files
    were below that bar, 11 of 1,834 on 60 development commands, and none 1.5 nats below), so the
    search runs out of hypotheses instead of spending ``max_steps`` and the depth-first rest."""

    search_on: int = 0
    """Decoder calls the search may spend after its first finished sentence whether or not it wins
    the choice (``search_on_winning``: only when it does), on beginnings at least
    as probable per token as that sentence, for a more probable one (per token); 0: the first one
    found is taken. Best-first order reaches a short sentence first ("cancel all of my timers")
    when the audio goes on ("... in our bathroom"). Off: at 30, development commands (the bench's
    60 and 100 more spoken with seed 2, none of the test split's sentences) got 143 instead of 138
    of 160 right intents, but the held-aside split none more (52 of 60 either way), and short read
    utterances found more probable sentences too: hifitts 3 transcripts forced into commands instead
    of 1, WER 9.95 % vs 9.08 % free (the limit is 0.5 points); CPU +7 %."""
    search_on_winning: int = 30
    """Decoder calls the search may spend after its first finished sentence when that sentence
    already wins the choice (``Choice.from_templates``: within ``margin`` of the free transcript per
    token), looking for a more probable one per token as ``search_on`` does; the free transcript is
    kept exactly when it was kept without them. Best-first order finishes a short sentence first
    ("cancel all of my timers", "pause living room") while the audio goes on ("... in our
    bathroom", "... timer"). Development commands (the bench's 60 and 100 more spoken with seed 2,
    none of the test split's sentences; INT8 s8 tiny.en, 2026-11-26): 142 -> 145 of 160 right
    intents (decode CPU p50 481 -> 501 ms), about what ungated ``search_on`` gains, while hifitts
    read speech keeps every free transcript it kept without it (ungated: 2 changed, WER 8.76 ->
    9.08 %). 0: the first sentence found is taken."""
    align_partials: int = 3
    """When the search finds no sentence: its deepest beginnings (this many, each the furthest one
    line of the search got) are aligned to template sentences as well as the free transcript
    ("Add 4 hours to my office time" -> "... timer", where Whisper's " time" + "r" never comes).
    Development commands (with ``search_on`` 30): 143 -> 145 of 160; only utterances without a
    sentence pay for it."""
    cased_words: bool = True
    """A word is written as Whisper writes words: lower case, Capitalized, UPPER CASE (or UPPER
    with a plural s, "TVs"). The walk compares words case-blind, so without this the depth-first
    rest wandered into "OffIce, tImeRS" (same right intents on the development commands, saner texts)."""

    def __post_init__(self) -> None:
        if not 0 <= self.margin <= 1000:
            raise ConfigError("asr.template_margin", f"must be within 0..1000, got {self.margin}")
        if not 1 <= self.top_k <= 1000:
            raise ConfigError("top_k", f"must be within 1..1000, got {self.top_k}")
        if not 1 <= self.beam <= 32:
            raise ConfigError("beam", f"must be within 1..32, got {self.beam}")
        if not 1 <= self.max_steps <= 10_000:
            raise ConfigError("max_steps", f"must be within 1..10000, got {self.max_steps}")
        if not 0 <= self.search_on <= 10_000:
            raise ConfigError("search_on", f"must be within 0..10000, got {self.search_on}")
        if not 0 <= self.search_on_winning <= 10_000:
            raise ConfigError("search_on_winning", f"must be within 0..10000, got {self.search_on_winning}")
        if not 0 <= self.align_partials <= 100:
            raise ConfigError("align_partials", f"must be within 0..100, got {self.align_partials}")
        if self.hopeless is not None and not 0 <= self.hopeless <= 1000:
            raise ConfigError("hopeless", f"must be within 0..1000, got {self.hopeless}")


@dataclass(frozen=True)
class Choice:
    """Both transcripts of one utterance and which one counts."""

    free: tuple[list[int], list[float]]
    """Free greedy tokens and each one's probability."""
    constrained: tuple[list[int], list[float]] | None
    """The best template sentence's tokens, or None when none could be followed."""
    free_logprob: float
    constrained_logprob: float | None
    margin: float

    @property
    def from_templates(self) -> bool:
        """The constrained transcript wins (or the free one already is a template sentence)."""
        if self.constrained is None or self.constrained_logprob is None:
            return False
        # per token (end of text counted), as the search ranks: totals would favour short texts
        con = self.constrained_logprob / (len(self.constrained[0]) + 1)
        return con >= self.free_logprob / (len(self.free[0]) + 1) - self.margin

    def with_margin(self, margin: float) -> Choice:
        """The same decoding judged with another margin (for choosing one on a development set)."""
        return Choice(self.free, self.constrained, self.free_logprob, self.constrained_logprob, margin)

    @property
    def tokens(self) -> list[int]:
        return (self.constrained if self.from_templates and self.constrained else self.free)[0]

    @property
    def probs(self) -> list[float]:
        return (self.constrained if self.from_templates and self.constrained else self.free)[1]


_SENTENCE_MARKS = frozenset(".,?!")
_SENTENCE_END = frozenset(".?!")


def _plain(piece: str) -> bool:
    """A piece of a word or number, or one sentence mark: no brackets, notes, symbols, dashes or
    blanks a template never has."""
    if piece.strip() in _SENTENCE_MARKS:
        return bool(piece.strip())
    return (any(c.isalnum() for c in piece)
            and all(c.isalnum() or c.isspace() or c in "'%-" or c in _SENTENCE_MARKS for c in piece))


def _token_logprobs(model: WhisperModel, cross_k: ort.OrtValue, cross_v: ort.OrtValue, initial: list[int],
                    tokens: list[int]) -> list[float]:
    """Log-probability of each of ``tokens`` then of end of text, in one teacher-forced decoder call."""
    logits, _, _ = model.decode_step(np.array([initial + tokens], np.int64), None, None, cross_k, cross_v, 0)
    rows = logits[0, len(initial) - 1:]
    return [float(log_softmax(rows[i])[t]) for i, t in enumerate([*tokens, model.eot])]


def _score(model: WhisperModel, cross_k: ort.OrtValue, cross_v: ort.OrtValue, initial: list[int],
           tokens: list[int]) -> float:
    """Log-probability of ``tokens`` then end of text, in one teacher-forced decoder call."""
    return sum(_token_logprobs(model, cross_k, cross_v, initial, tokens))


def _styled(sentence: str, free: str) -> str:
    """A template sentence (lower-case words) written as the free transcript writes: its words'
    case where it has them ("TV"), a capital first letter and its closing mark if it has them."""
    cased = {w.strip(".,?!").lower(): w.strip(".,?!") for w in free.split()}
    words = [cased.get(w, w) for w in sentence.split()]
    stripped = free.strip()
    if stripped[:1].isupper() and words:
        words[0] = words[0][:1].upper() + words[0][1:]
    mark = stripped[-1:] if stripped[-1:] in _SENTENCE_END else ""
    return " " + " ".join(words) + mark


def _aligned(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding, cross_k: ort.OrtValue,
             cross_v: ort.OrtValue, initial: list[int], free_text: str,
             partials: Sequence[str] = ()) -> tuple[list[int], list[float], float] | None:
    """The most probable (per token) of the template sentences a few word edits from the free
    transcript or from one of the search's most promising unfinished ``partials``."""
    best: tuple[list[int], list[float], float] | None = None
    near = [sentences_near(space, text, settings.align) for text in (free_text, *partials)]  # type: ignore[arg-type]
    for sentence in dict.fromkeys(s for found in near for s in found):
        tokens = model.tokenize(_styled(sentence, free_text))
        if len(tokens) + len(initial) >= model.n_text_ctx // 2:
            continue
        logprobs = _token_logprobs(model, cross_k, cross_v, initial, tokens)
        if best is None or sum(logprobs) / len(logprobs) > best[2] / (len(best[0]) + 1):
            best = tokens, [float(np.exp(p)) for p in logprobs[:-1]], sum(logprobs)
    return best


@dataclass
class _Hyp:
    tokens: list[int]
    probs: list[float]
    logprob: float
    walker: SpaceWalker
    row: np.ndarray | None = None
    """Log-probabilities of the next token; None until the decoder has been run for the last token."""
    cache: tuple[object, object] | None = None
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
    after_mark = text.rstrip()[-1:] in _SENTENCE_MARKS
    spoken = bool(text.strip())
    begins = _Begins(hyp.walker, text)
    found: list[tuple[int, float]] = []
    top = np.argpartition(row, -settings.top_k)[-settings.top_k:] if settings.top_k < len(row) else np.arange(len(row))
    for candidate in top[np.argsort(-row[top])].tolist():  # a partial sort: the full one costs ~3 ms a call
        if candidate == model.eot:
            if hyp.tokens and hyp.walker.is_whole(text):
                found.append((candidate, float(row[candidate])))
        elif (not ended and candidate < model.eot and (piece := _piece(model, candidate)).plain
              and (spoken or piece.word)  # a sentence begins with a word
              # no mark right after a mark: the walk skips marks, so ", , ," would be a free loop
              and not (piece.mark_first and after_mark)
              and begins(piece.text)
              and (not settings.cased_words or _cased(text + piece.text))
              # a full stop only where a sentence may end: after one only the end of text may come
              and (not piece.ends or hyp.walker.is_whole(text + piece.text))):
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


def _normalized(hyp: _Hyp) -> float:
    """Log-probability per token (end of text counted): a sentence cut short is not preferred
    just for having fewer tokens to pay for, as in Whisper's own beam search."""
    return hyp.logprob / (len(hyp.tokens) + 1)


def _constrained(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding, cross_k: ort.OrtValue,
                 cross_v: ort.OrtValue, num_frames: int, initial: list[int], floor: float = -np.inf,
                 unfinished: list[tuple[float, list[int]]] | None = None, wins_at: float = np.inf
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
    """
    import heapq
    import itertools

    from voiced.asr.whisper_model import TOKENS_PER_SECOND

    logits, k_cache, v_cache = model.decode_step(np.array([initial], np.int64), None, None, cross_k, cross_v, 0)
    limit = min(int(num_frames / 100.0 * TOKENS_PER_SECOND), model.n_text_ctx // 2 - len(initial))
    order = itertools.count()  # ties: the earlier first
    root = _Hyp([], [], 0.0, space.walker(wildcards=False), log_softmax(logits[0, -1]), (k_cache, v_cache))
    queue: list[tuple[float, int, _Hyp]] = [(0.0, next(order), root)]
    steps = 0

    def extend(hyp: _Hyp) -> None:  # one decoder call for the token that made this hypothesis
        k, v = hyp.cache  # type: ignore[misc]
        logits, k, v = model.decode_step(np.array([[hyp.tokens[-1]]], np.int64), k, v, cross_k, cross_v,
                                         len(initial) + len(hyp.tokens) - 1)
        hyp.row, hyp.cache = log_softmax(logits[0, -1]), (k, v)

    def children(hyp: _Hyp, cap: int) -> list[_Hyp]:
        found = []
        for token, logp in _next_tokens(model, hyp, settings, cap):
            if token == model.eot:
                found.append(_Hyp(hyp.tokens, hyp.probs, hyp.logprob + logp, hyp.walker))
            elif len(hyp.tokens) < limit and (hyp.logprob + logp) / (len(hyp.tokens) + 2) >= floor:
                found.append(_Hyp([*hyp.tokens, token], [*hyp.probs, float(np.exp(logp))], hyp.logprob + logp,
                                  hyp.walker.fork(), None, hyp.cache))
        return found

    budget = settings.max_steps
    best: _Hyp | None = None
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
            if best is None or _normalized(hyp) > _normalized(best):
                best = hyp
            continue
        if best is not None:
            if steps >= stop_at:
                break
            if _normalized(hyp) < _normalized(best):
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


def decode_with_templates(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding,
                          cross_k: ort.OrtValue, cross_v: ort.OrtValue, num_frames: int, initial: list[int],
                          free: tuple[list[int], list[float]]) -> Choice:
    """Decode constrained beside the free greedy transcript ``free`` and weigh the two."""
    free_tokens = free[0]
    if free_tokens and space.walker().is_whole(model.text(free_tokens)):
        return Choice(free, free, 0.0, 0.0, settings.margin)  # already a command: nothing to add
    free_logprob = _score(model, cross_k, cross_v, initial, free_tokens)
    floor = -np.inf
    if settings.hopeless is not None:  # below what could win ``Choice.from_templates``, and then some
        floor = free_logprob / (len(free_tokens) + 1) - settings.margin - settings.hopeless
    unfinished: list[tuple[float, list[int]]] = []
    wins_at = free_logprob / (len(free_tokens) + 1) - settings.margin  # as ``Choice.from_templates`` judges
    constrained = _constrained(model, space, settings, cross_k, cross_v, num_frames, initial, floor, unfinished,
                               wins_at=wins_at)
    if constrained is None and settings.align is not None:
        # no sentence within the budget: the ones a few word edits from the free transcript (the
        # search's own sentence, when it finds one, won as often on the development half, for less)
        # or from the search's most promising beginnings
        unfinished.sort(key=lambda u: (-len(u[1]), -u[0]))  # deepest, then most promising
        texts = list(dict.fromkeys(model.text(tokens) for _, tokens in unfinished if tokens))
        # the furthest each line of the search got: a beginning the search went on from is in its longer text
        partials = [t for t in texts if not any(o != t and o.startswith(t) for o in texts)]
        constrained = _aligned(model, space, settings, cross_k, cross_v, initial, model.text(free_tokens),
                               partials[:settings.align_partials])
    if constrained is None:
        return Choice(free, None, free_logprob, None, settings.margin)
    tokens, probs, logprob = constrained
    return Choice(free, (tokens, probs), free_logprob, logprob, settings.margin)

"""Whole template sentences as the context of modified beam search (template-aware transducer).

The hotword graph (``context.py``) boosts listed phrases wherever they occur; here the context
is every sentence the loaded hassil templates accept (:mod:`voiced.sentencespace`), followed
from the utterance's first token. Beside the free beam, which runs exactly as it does without
templates (its paths, partial results and free output are unchanged token for token), a second
beam holds only paths whose text may still begin a template sentence:

- The walk reads text, not token ids (``sentence_walk.py``): a path's text grows by each
  token's shown symbol, a ``▁`` word start ending the word before. So any tokenization of a
  sentence is followed, including spellings a hotword list never encodes.
- Each token that keeps a path on a sentence earns ``boost`` when this beam ranks its paths
  (a transducer prefers blanks to a word it is unsure of, and would let the beam lose the
  command's later words). A token that leaves the sentences takes the path out of this beam,
  and its bonus with it: the path lives on only as a free path, which never had one.
- A whole sentence locks: the best path whose text ends a sentence is carried to the end of
  the utterance on blanks even when longer sentence beginnings crowd it out of the beam.

At the end the best whole sentence (hassil's match confirming the walk's end) is weighed
against the free result with Whisper's rule (``whisper_templates``): both by acoustic
log-probability per token, bonuses left out, and the sentence wins unless the free text is more
probable by more than ``margin`` nats per token. Read speech reaches no whole sentence, or only
an improbable one, and keeps its transcript. At a pause in speech the recognizer weighs them the
same way by the tighter ``pause_margin`` (``Recognizer.decode_at_pause``), so intent-aware
endpointing knows a misheard command while the matched silence runs. Wildcard slots are not
followed (a wildcard would let any text through).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from voiced.asr.logprob import log_softmax
from voiced.asr.sentence_walk import TextWalk, TokenPieces
from voiced.asr.tokens import SymbolTable
from voiced.errors import ConfigError

if TYPE_CHECKING:
    from voiced.sentencespace import SentenceSpace

__all__ = ["SentenceBeam", "SentenceContext", "SentenceHyp", "TemplateChoice", "TemplateSearch", "per_token"]


@dataclass(frozen=True)
class TemplateSearch:
    """How the sentence beam is searched and how its result is weighed against the free one."""

    margin: float = 3.0
    """The free result wins only when its log-probability per token exceeds the best whole
    sentence's by more than this many nats (``[asr] template_margin``, shared with Whisper)."""
    boost: float = 1.5
    """Ranking bonus per token inside the sentence beam (``[asr] hotword_boost``); never counted
    when the two results are weighed."""
    pause_margin: float = 1.5
    """At a pause in speech (``Recognizer.decode_at_pause``) the partial result is the best whole
    sentence when the free text is no command nor the start of one and is more probable by at most
    this many nats per token (and at most ``margin``): intent-aware endpointing then ends a
    misheard command after the matched silence (``[asr] template_pause_margin``, shared with
    Whisper). Tighter than ``margin``: the speaker may not be done."""
    prune: float = 30.0
    """A search bound, as Whisper's has ``max_steps``: sentence paths more than this many nats
    behind the free beam's best path (both without bonuses) are dropped: such a path comes within
    the default margin per token only in an utterance of 20 tokens or more. Read speech soon
    leaves none, and the sentence beam then costs nothing more for the utterance."""

    def __post_init__(self) -> None:
        if not 0 <= self.margin <= 1000:
            raise ConfigError("asr.template_margin", f"must be within 0..1000, got {self.margin}")
        if not 0 <= self.boost <= 100:
            raise ConfigError("asr.hotword_boost", f"must be within 0..100, got {self.boost}")
        if not 0 <= self.pause_margin <= 1000:
            raise ConfigError("asr.template_pause_margin", f"must be within 0..1000, got {self.pause_margin}")
        if not 0 < self.prune <= 10_000:
            raise ConfigError("prune", f"must be within 0..10000 (above 0), got {self.prune}")


@dataclass(frozen=True)
class SentenceHyp:
    """A path of the sentence beam: its tokens keep its text on a template sentence."""

    tokens: tuple[int, ...] = ()
    frames: tuple[int, ...] = ()
    log_probs: tuple[float, ...] = ()
    """Per-token log probability (temperature-scaled), for confidences, as the free paths have."""
    acoustic: float = 0.0
    """Log-probability of the path, blanks included, summed over the alignments merged into it;
    no bonus in it."""
    text: str = ""
    """The tokens' shown symbols joined (a word start as a space), as the walk reads them."""


class _Path(Protocol):
    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    log_probs: tuple[float, ...]


def per_token(acoustic: float, tokens: int, context_size: int) -> float:
    """A path's log-probability per token, normalized as the beam's own final choice normalizes
    (sherpa-onnx counts the decoder's initial context as tokens)."""
    return acoustic / (tokens + context_size)


@dataclass(frozen=True)
class TemplateChoice:
    """The free result and the best whole template sentence of one utterance, and which counts."""

    free: _Path
    free_per_token: float
    sentence: SentenceHyp | None
    """The best whole sentence of the sentence beam, or None when it reached none."""
    sentence_per_token: float | None
    margin: float
    free_is_sentence: bool = False
    """The free text already is a whole template sentence: it is kept, and counts as one."""

    @property
    def from_templates(self) -> bool:
        if self.free_is_sentence:
            return True
        if self.sentence is None or self.sentence_per_token is None:
            return False
        return self.sentence_per_token >= self.free_per_token - self.margin

    @property
    def best(self) -> _Path:
        """The path whose text is the result."""
        if self.from_templates and not self.free_is_sentence and self.sentence is not None:
            return self.sentence
        return self.free

    def with_margin(self, margin: float) -> TemplateChoice:
        """The same decoding judged with another margin (for choosing one on a development set)."""
        return replace(self, margin=margin)


class SentenceContext:
    """The shareable part: the sentence space, how tokens read, the settings. One per recognizer."""

    def __init__(self, space: SentenceSpace, table: SymbolTable, context_size: int,
                 settings: TemplateSearch | None = None) -> None:
        self.space = space
        self.settings = settings or TemplateSearch()
        self.context_size = context_size
        self.pieces = TokenPieces(table, space)

    def start(self) -> SentenceBeam:
        return SentenceBeam(self)


class SentenceBeam:
    """One stream's sentence beam and its locked whole sentence."""

    def __init__(self, context: SentenceContext) -> None:
        self.context = context
        self.hyps: dict[tuple[int, ...], SentenceHyp] = {(): SentenceHyp()}
        self.locked: SentenceHyp | None = None
        """The best whole sentence so far; kept to the end even when the beam drops it."""
        self.cache: dict[tuple[int, ...], np.ndarray] = {}
        """Decoder outputs of this beam's contexts (apart from the free beam's: see search.py)."""
        self.walk = TextWalk(context.pieces)

    @property
    def alive(self) -> bool:
        """Some path is left to follow (none: the utterance is no template sentence)."""
        return bool(self.hyps) or self.locked is not None

    def parents(self) -> list[SentenceHyp]:
        """The paths to extend at the next frame: the beam, then the locked sentence if it left it."""
        out = list(self.hyps.values())
        if self.locked is not None and self.locked.tokens not in self.hyps:
            out.append(self.locked)
        return out

    def step(self, parents: Sequence[SentenceHyp], logp: np.ndarray, logits: np.ndarray, frame: int, beam: int,
             temperature: float, free: float = 0.0) -> None:
        """One frame: ``logp`` [len(parents), vocab] are the joiner's log-softmax rows of ``parents``;
        ``free``: the log-probability of the free beam's best path after this frame.

        The best ``beam`` (path, token) pairs the sentences allow, as the free beam takes its top-k
        of all pairs; equal token sequences merge by adding their probabilities. Paths more than
        ``prune`` nats behind ``free`` are dropped."""
        ctx, pieces = self.context, self.context.pieces
        boost, keeps, vocab = ctx.settings.boost, pieces.keeps, logp.shape[1]
        flat = logp + np.array([[p.acoustic] for p in parents], np.float32)
        # ranked by acoustic + boost per token (every token of a path here is on a sentence)
        rank = flat + np.array([[boost * (len(p.tokens) + 1)] for p in parents], np.float32)
        rank[:, keeps] -= boost
        allowed = np.stack([self.walk.mask(p.text) for p in parents])
        rank[~allowed] = -np.inf
        ranked = rank.ravel()
        k = min(beam, int(allowed.sum()))
        top = np.argpartition(-ranked, k - 1)[:k]
        top = top[np.argsort(-ranked[top], kind="stable")]
        merged: dict[tuple[int, ...], SentenceHyp] = {}
        for index in top.tolist():
            i, y = divmod(index, vocab)
            p, acoustic = parents[i], float(flat[i, y])
            if y in keeps:
                new = SentenceHyp(p.tokens, p.frames, p.log_probs, acoustic, p.text)
            else:
                token_lp = float(log_softmax(logits[i] / temperature)[y])
                new = SentenceHyp(p.tokens + (y,), p.frames + (frame,), p.log_probs + (token_lp,), acoustic,
                                  p.text + pieces.shown[y])
            old = merged.get(new.tokens)
            if old is not None:  # same tokens by another path: add the probabilities
                new = SentenceHyp(old.tokens, old.frames, old.log_probs, float(np.logaddexp(old.acoustic, acoustic)),
                                  old.text)
            merged[new.tokens] = new
        floor = free - ctx.settings.prune
        self.hyps = {tokens: h for tokens, h in merged.items() if h.acoustic >= floor}
        self._lock(parents, logp, floor)

    def _lock(self, parents: Sequence[SentenceHyp], logp: np.ndarray, floor: float) -> None:
        paths = list(self.hyps.values())
        locked = self.locked
        if locked is not None and locked.tokens not in self.hyps:  # dropped by the beam: carried on blanks
            i = next(i for i, p in enumerate(parents) if p.tokens == locked.tokens)
            stay = float(np.logaddexp.reduce(logp[i, self.context.pieces.keeps]))  # (or <unk>) alone
            paths.append(replace(locked, acoustic=locked.acoustic + stay))
        # by the walk alone: hassil's match costs milliseconds, and is asked at the end, of the
        # sentences that may win
        self.locked = max((h for h in paths if h.acoustic >= floor and self.walk.ends(h.text)), key=self._per_token,
                          default=None)

    def _per_token(self, h: SentenceHyp) -> float:
        return per_token(h.acoustic, len(h.tokens), self.context.context_size)

    def _best_whole(self, paths: Sequence[SentenceHyp]) -> SentenceHyp | None:
        """The whole sentence among ``paths`` with the best log-probability per token: hassil is
        asked about the best by the walk first, and only until it agrees."""
        ending = sorted((h for h in paths if self.walk.ends(h.text)), key=self._per_token, reverse=True)
        return next((h for h in ending if self.walk.is_whole(h.text)), None)

    def best_whole(self) -> SentenceHyp | None:
        """The whole sentence with the best log-probability per token, if the beam reached one."""
        return self._best_whole(self.parents())

    def choose(self, free: _Path, free_acoustic: float) -> TemplateChoice:
        """Weigh the free result (``free_acoustic``: its log-probability without bonuses) against
        the best whole sentence."""
        cs, margin = self.context.context_size, self.context.settings.margin
        free_pt = per_token(free_acoustic, len(free.tokens), cs)
        if free.tokens and self.walk.is_whole(self.context.pieces.text(free.tokens)):
            return TemplateChoice(free, free_pt, None, None, margin, free_is_sentence=True)
        sentence = self.best_whole()
        return TemplateChoice(free, free_pt, sentence, None if sentence is None else self._per_token(sentence), margin)

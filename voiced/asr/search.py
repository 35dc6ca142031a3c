"""Transducer searches: greedy (as sherpa-onnx does it) and modified beam search with boosting.

Both keep their per-utterance state in a small object owned by the stream, so the
model stays shareable between streams. Beam search may also carry a sentence beam over the
template sentences (``sentence_context.py``); it runs beside the free beam in its own decoder
and joiner calls: an INT8 model's dynamic quantization scales activations over the whole batch,
so sharing a batch would change the free paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from voiced.asr.context import ContextGraph, ContextState
from voiced.asr.logprob import log_softmax
from voiced.asr.model import TransducerModel
from voiced.asr.sentence_context import SentenceBeam, SentenceContext, TemplateChoice

__all__ = ["BeamSearch", "GreedySearch", "Hypothesis", "SearchMethod"]

BLANK = 0


class SearchMethod(Enum):
    GREEDY = "greedy_search"
    MODIFIED_BEAM = "modified_beam_search"


@dataclass(frozen=True)
class Hypothesis:
    """One decoding path: tokens after the initial blank context, with frame times and scores."""

    tokens: tuple[int, ...] = ()
    frames: tuple[int, ...] = ()
    """Encoder frame index of each token since the stream began."""
    log_probs: tuple[float, ...] = ()
    """Per-token log probability (temperature-scaled), for confidences."""
    score: float = 0.0
    bonus: float = 0.0
    """The part of ``score`` that hotword boosts added: ``score - bonus`` is the acoustic log-probability."""
    context: ContextState | None = None
    trailing_blanks: int = 0


DECODER_CACHE_ROWS = 4096
"""Greedy search's decoder outputs kept per stream (2 MB at a 512-dim decoder), then started afresh."""

NO_TOKEN = -1
"""Decoder input before the utterance's first token; icefall decoders embed it as zeros."""


def _context_row(tokens: Sequence[int], context_size: int) -> list[int]:
    # A path starts as [-1, ..., -1, blank] (as in sherpa-onnx) followed by its tokens.
    start = [NO_TOKEN] * (context_size - 1) + [BLANK]
    return (start + list(tokens[-context_size:]))[-context_size:]


class GreedySearch:
    """At most one symbol per frame; blank and ``<unk>`` both leave the context unchanged."""

    def __init__(self, model: TransducerModel, temperature: float = 2.0) -> None:
        self.model = model
        self.unk_id = model.tokens.unk_id
        self.temperature = temperature

    def start(self) -> GreedyState:
        return GreedyState()

    def decode(self, state: GreedyState, encoder_out: np.ndarray) -> None:
        model, unk = self.model, self.unk_id
        if state.decoder_out is None:
            state.decoder_out = self._decoder_out(state, tuple(_context_row(state.hyp.tokens, model.context_size)))
        hyp = state.hyp
        # This chunk's tokens only: the hypothesis's tuples are extended once at the end (copying the
        # whole of them per chunk made a long utterance cost the square of its length).
        tokens: list[int] = []
        frames: list[int] = []
        log_probs: list[float] = []
        blanks = hyp.trailing_blanks
        n, t = encoder_out.shape[0], 0
        # Where the joiner scores rows independently (model.joiner_rows_independent), the frames
        # left in the chunk are scored in one call against the current decoder output: the leading
        # blanks are taken as they are, and after a token the rest is scored again with the new
        # decoder output, so the tokens are those of the frame-by-frame search (sherpa-onnx's).
        step = n if model.joiner_rows_independent else 1
        while t < n:
            rows = encoder_out[t : t + step]
            dec = state.decoder_out if len(rows) == 1 else np.repeat(state.decoder_out, len(rows), axis=0)
            logits = model.run_joiner(rows, dec)
            # a few rows at most: a Python scan costs less than numpy's calls on arrays this small
            best = logits.argmax(axis=1).tolist()
            i = next((j for j, b in enumerate(best) if b != BLANK and b != unk), None)
            if i is None:
                blanks += len(rows)
                t += len(rows)
                continue
            y = best[i]
            tokens.append(y)
            frames.append(state.frame_offset + t + i)
            log_probs.append(float(log_softmax(logits[i] / self.temperature)[y]))
            blanks = 0
            t += i + 1
            context = hyp.tokens[-model.context_size :] + tuple(tokens)
            state.decoder_out = self._decoder_out(state, tuple(_context_row(context, model.context_size)))
        state.frame_offset += n
        if tokens:
            state.hyp = replace(hyp, tokens=hyp.tokens + tuple(tokens), frames=hyp.frames + tuple(frames),
                                log_probs=hyp.log_probs + tuple(log_probs), trailing_blanks=blanks)
        else:  # the same tuples: the result builder sees at once that nothing changed
            state.hyp = replace(hyp, trailing_blanks=blanks)

    def _decoder_out(self, state: GreedyState, row: tuple[int, ...]) -> np.ndarray:
        # The decoder sees only the last context_size tokens, one row at a time (batch 1), so a
        # context seen before has the very same output: a quarter to a half of the calls on speech.
        out = state.decoder_cache.get(row)
        if out is None:
            if len(state.decoder_cache) >= DECODER_CACHE_ROWS:
                state.decoder_cache.clear()
            out = state.decoder_cache[row] = self.model.run_decoder(np.array([row], np.int64))
        return out

    def best(self, state: GreedyState) -> Hypothesis:
        return state.hyp


@dataclass
class GreedyState:
    hyp: Hypothesis = field(default_factory=Hypothesis)
    decoder_out: np.ndarray | None = None
    frame_offset: int = 0
    decoder_cache: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)
    """Decoder output by context row."""


class BeamSearch:
    """Modified beam search (one symbol per frame per path) with optional phrase boosting."""

    def __init__(self, model: TransducerModel, max_active_paths: int = 4, temperature: float = 2.0) -> None:
        self.model = model
        self.unk_id = model.tokens.unk_id
        self.beam = max_active_paths
        self.temperature = temperature

    def start(self, graph: ContextGraph | None = None, sentences: SentenceContext | None = None) -> BeamState:
        root = graph.root if graph else None
        return BeamState(hyps={(): Hypothesis(context=root)}, graph=graph,
                         sentences=sentences.start() if sentences else None)

    def decode(self, state: BeamState, encoder_out: np.ndarray) -> None:
        model, vocab = self.model, self.model.vocab_size
        # Joiner logits of the chunk's frames from ``ahead_from`` on, per path (by its tokens).
        ahead: dict[tuple[int, ...], np.ndarray] = {}
        ahead_from = 0
        for t in range(encoder_out.shape[0]):
            prev = list(state.hyps.values())
            if ahead and ahead.keys() == state.hyps.keys():
                # The same paths as at the frame before, so the same (cached) decoder outputs: their
                # rows for this frame were already scored, bit for bit what a call now would give.
                logits = np.stack([ahead[h.tokens][t - ahead_from] for h in prev])
            else:
                dec = self._cached_decoder(state.cache, prev)
                if model.joiner_rows_independent:
                    # Score every frame left in the chunk for these paths in one call (frame-major
                    # rows); paths often stay the same for a few frames (blanks) and use them then.
                    frames = encoder_out.shape[0] - t
                    scored = model.run_joiner(np.repeat(encoder_out[t:], len(prev), axis=0), np.tile(dec, (frames, 1)))
                    scored = scored.reshape(frames, len(prev), -1)
                    ahead = {h.tokens: scored[:, i] for i, h in enumerate(prev)}
                    ahead_from = t
                    logits = scored[0]
                else:
                    logits = model.run_joiner(np.repeat(encoder_out[t : t + 1], len(prev), axis=0), dec)
            logp = log_softmax(logits) + np.array([[h.score] for h in prev], np.float32)
            flat = logp.ravel()
            k = min(self.beam, flat.size)
            top = np.argpartition(-flat, k - 1)[:k]
            top = top[np.argsort(-flat[top], kind="stable")]
            merged: dict[tuple[int, ...], Hypothesis] = {}
            scaled = None  # temperature-scaled log-probabilities of all rows at once, once a token needs them
            for index in top:
                row, y = divmod(int(index), vocab)
                h, score = prev[row], float(flat[index])
                if y == BLANK or y == self.unk_id:
                    new = replace(h, score=score, trailing_blanks=h.trailing_blanks + 1)
                else:
                    bonus, ctx = (0.0, h.context) if state.graph is None else state.graph.step(h.context, y)
                    if scaled is None:
                        scaled = log_softmax(logits / self.temperature)
                    token_lp = float(scaled[row, y])
                    new = Hypothesis(
                        tokens=h.tokens + (y,),
                        frames=h.frames + (state.frame_offset + t,),
                        log_probs=h.log_probs + (token_lp,),
                        score=score + bonus,
                        bonus=h.bonus + bonus,
                        context=ctx,
                    )
                old = merged.get(new.tokens)
                if old is not None:  # same tokens by another path: add the probabilities
                    new = replace(old, score=float(np.logaddexp(old.score, new.score)))
                merged[new.tokens] = new
            state.hyps = merged
            if state.sentences is not None and state.sentences.alive:
                free = max(h.score - h.bonus for h in merged.values())  # the best free path, bonuses left out
                self._sentence_step(state.sentences, encoder_out[t : t + 1], state.frame_offset + t, free)
        state.frame_offset += encoder_out.shape[0]

    def _sentence_step(self, beam: SentenceBeam, encoder_frame: np.ndarray, frame: int, free: float) -> None:
        parents = beam.parents()
        dec = self._cached_decoder(beam.cache, parents)
        logits = self.model.run_joiner(np.repeat(encoder_frame, len(parents), axis=0), dec)
        beam.step(parents, log_softmax(logits), logits, frame, self.beam, self.temperature, free)

    def _cached_decoder(self, cache: dict[tuple[int, ...], np.ndarray], hyps: list) -> np.ndarray:
        cs = self.model.context_size
        keys = [tuple(_context_row(h.tokens, cs)) for h in hyps]
        missing = [k for k in dict.fromkeys(keys) if k not in cache]
        if missing:
            out = self.model.run_decoder(np.array(missing, np.int64))
            cache.update(zip(missing, out))
        if len(cache) > 64 * self.beam:  # keep only what the live paths use
            kept = {k: cache[k] for k in keys}
            cache.clear()
            cache.update(kept)
        return np.stack([cache[k] for k in keys])

    def best(self, state: BeamState, final: bool = False) -> Hypothesis:
        cs = self.model.context_size

        def normalized(h: Hypothesis) -> float:
            bonus = state.graph.finalize(h.context) if final and state.graph and h.context else 0.0
            # length-normalized like sherpa-onnx (its paths include the blank context)
            return (h.score + bonus) / (len(h.tokens) + cs)

        return max(state.hyps.values(), key=normalized)

    def choose(self, state: BeamState) -> TemplateChoice | None:
        """At the end: the free result weighed against the sentence beam's best whole sentence
        (None without a sentence beam)."""
        if state.sentences is None:
            return None
        free = self.best(state, final=True)
        return state.sentences.choose(free, free.score - free.bonus)


@dataclass
class BeamState:
    hyps: dict[tuple[int, ...], Hypothesis]
    graph: ContextGraph | None = None
    sentences: SentenceBeam | None = None
    cache: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)
    frame_offset: int = 0

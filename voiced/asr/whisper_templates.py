"""Template-aware Whisper decoding: a command the templates allow, when the audio supports it.

Free greedy decoding is bad at short commands: a device name comes out as a similar-sounding
word, two-word commands as unrelated phrases. Here a second, constrained greedy pass keeps
only tokens that continue a template sentence (checked on the text with the sentence space,
so any tokenization of a sentence is allowed, and its ending only where a sentence is whole),
taking at each step the most probable allowed token among the model's top ``top_k``. Both
texts are scored by the same model on the same audio (the sum of token log-probabilities,
end of text included), and the constrained one wins unless the free one is more probable by
more than ``margin`` nats. Read speech that is no command has no constrained path among the
top tokens, or only an improbable one, so it keeps its free transcript.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from voiced.errors import ConfigError
from voiced.sentencespace import SentenceSpace, SpaceWalker

if TYPE_CHECKING:
    import onnxruntime as ort

    from voiced.asr.whisper_model import WhisperModel

__all__ = ["Choice", "TemplateDecoding", "decode_with_templates"]


@dataclass(frozen=True)
class TemplateDecoding:
    """How template-aware decoding chooses between the free and the constrained transcript."""

    margin: float = 6.0
    """The free transcript wins only when its log-probability exceeds the constrained one's by
    more than this many nats (chosen on the development split of ``voiced bench commands``)."""
    top_k: int = 300
    """Tokens considered at each constrained step, most probable first."""
    beam: int = 4
    """Hypotheses the constrained search keeps (each costs a decoder call per token)."""

    def __post_init__(self) -> None:
        if not 0 <= self.margin <= 1000:
            raise ConfigError("asr.template_margin", f"must be within 0..1000, got {self.margin}")
        if not 1 <= self.top_k <= 1000:
            raise ConfigError("top_k", f"must be within 1..1000, got {self.top_k}")
        if not 1 <= self.beam <= 32:
            raise ConfigError("beam", f"must be within 1..32, got {self.beam}")


@dataclass(frozen=True)
class Choice:
    """What one utterance decoded to."""

    tokens: list[int]
    probs: list[float]
    """Each token's probability (for the confidence)."""
    from_templates: bool
    """The text is the constrained (template) transcript, not the free one."""
    free_logprob: float
    constrained_logprob: float | None
    """None: no template sentence could be followed within the top tokens."""


_SENTENCE_MARKS = frozenset(".,?!")


def _plain(piece: str) -> bool:
    """Words, numbers and sentence punctuation: no brackets, notes or symbols a template never has."""
    return all(c.isalnum() or c.isspace() or c in "'%-" or c in _SENTENCE_MARKS for c in piece)


def _log_softmax(row: np.ndarray) -> np.ndarray:
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


def _score(model: WhisperModel, cross_k: ort.OrtValue, cross_v: ort.OrtValue, initial: list[int],
           tokens: list[int]) -> float:
    """Log-probability of ``tokens`` then end of text, in one teacher-forced decoder call."""
    logits, _, _ = model._step(np.array([initial + tokens], np.int64), None, None, cross_k, cross_v, 0)
    rows = logits[0, len(initial) - 1:]
    return float(sum(_log_softmax(rows[i])[t] for i, t in enumerate([*tokens, model.eot])))


@dataclass
class _Hyp:
    tokens: list[int]
    probs: list[float]
    logprob: float
    walker: SpaceWalker
    row: np.ndarray | None = None
    """log-probabilities of the next token; None once finished (end of text chosen)."""
    cache: tuple[object, object] | None = None


def _next_tokens(model: WhisperModel, hyp: _Hyp, settings: TemplateDecoding) -> list[tuple[int, float]]:
    """Up to ``beam`` allowed next tokens of ``hyp`` with their log-probabilities, best first:
    template words first; wildcard text only when no template word is among the top tokens."""
    assert hyp.row is not None
    row = hyp.row
    text = model.text(hyp.tokens)
    ranked = np.argsort(-row)[:settings.top_k].tolist()
    for wildcards in (False, True):
        found: list[tuple[int, float]] = []
        for candidate in ranked:
            if candidate == model.eot:
                if not wildcards and hyp.tokens and hyp.walker.is_whole(text):
                    found.append((candidate, float(row[candidate])))
            elif (candidate < model.eot and _plain(piece := model.text([candidate]))
                  and hyp.walker.may_begin(text + piece, wildcards)):
                found.append((candidate, float(row[candidate])))
            if len(found) == settings.beam:
                break
        if found:
            return found
    return []


def _constrained(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding, cross_k: ort.OrtValue,
                 cross_v: ort.OrtValue, num_frames: int, initial: list[int]) -> tuple[list[int], list[float], float] | None:
    """Beam search over the tokens that keep the text inside the template sentences; None if none ends."""
    from voiced.asr.whisper_model import TOKENS_PER_SECOND

    logits, k_cache, v_cache = model._step(np.array([initial], np.int64), None, None, cross_k, cross_v, 0)
    limit = min(int(num_frames / 100.0 * TOKENS_PER_SECOND), model.n_text_ctx // 2 - len(initial))
    beam = [_Hyp([], [], 0.0, space.walker(), _log_softmax(logits[0, -1]), (k_cache, v_cache))]
    for _ in range(limit + 1):
        expanded: list[_Hyp] = [h for h in beam if h.row is None]
        for hyp in beam:
            if hyp.row is None:
                continue
            for token, logp in _next_tokens(model, hyp, settings):
                if token == model.eot:
                    expanded.append(_Hyp(hyp.tokens, hyp.probs, hyp.logprob + logp, hyp.walker))
                else:
                    expanded.append(_Hyp([*hyp.tokens, token], [*hyp.probs, float(np.exp(logp))],
                                         hyp.logprob + logp, hyp.walker.fork(), hyp.row, hyp.cache))
        beam = sorted(expanded, key=lambda h: h.logprob, reverse=True)[:settings.beam]
        if not beam or all(h.row is None for h in beam):
            break
        for hyp in beam:
            if hyp.row is not None and hyp.cache is not None and len(hyp.tokens) <= limit:
                k, v = hyp.cache
                logits, k, v = model._step(np.array([[hyp.tokens[-1]]], np.int64), k, v, cross_k, cross_v,
                                           len(initial) + len(hyp.tokens) - 1)
                hyp.row, hyp.cache = _log_softmax(logits[0, -1]), (k, v)
            elif hyp.row is not None:
                hyp.row = None
                hyp.logprob = -np.inf  # out of room before a sentence ended
    done = [h for h in beam if h.row is None and h.cache is None and np.isfinite(h.logprob)]
    if not done:
        return None
    best = max(done, key=lambda h: h.logprob)
    return best.tokens, best.probs, best.logprob


def decode_with_templates(model: WhisperModel, space: SentenceSpace, settings: TemplateDecoding,
                          cross_k: ort.OrtValue, cross_v: ort.OrtValue, num_frames: int, initial: list[int],
                          free: tuple[list[int], list[float]]) -> Choice:
    """Choose between the free greedy transcript ``free`` and the constrained one."""
    free_tokens, free_probs = free
    if free_tokens and space.walker().is_whole(model.text(free_tokens)):
        return Choice(free_tokens, free_probs, True, 0.0, 0.0)  # already a command: nothing to add
    constrained = _constrained(model, space, settings, cross_k, cross_v, num_frames, initial)
    free_logprob = _score(model, cross_k, cross_v, initial, free_tokens)
    if constrained is None:
        return Choice(free_tokens, free_probs, False, free_logprob, None)
    tokens, probs, logprob = constrained
    if logprob >= free_logprob - settings.margin:
        return Choice(tokens, probs, True, free_logprob, logprob)
    return Choice(free_tokens, free_probs, False, free_logprob, logprob)

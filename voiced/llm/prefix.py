"""The prefix cache: the fixed start of the prompt is processed once, not at every request.

Every prompt starts with the same long system prompt (the intents, their slots and
values); only the utterance at its end changes, yet processing the prompt is most of the
wait on a small CPU. onnxruntime-genai 0.18 cannot share a processed prefix between
requests on the CPU as such: the Engine's prefix cache needs a PagedAttention model (CUDA
or WebGPU only), and rewinding an Engine Request replays the whole kept sequence. A
Generator does rewind in place (``rewind_to``), but its guidance grammar is fixed when it
is created, and ours changes with every utterance (wildcard slots take its words).

So one request uses two generators. ``base`` has no guidance and outlives requests: it
keeps the previous prompt's KV cache, is rewound to the longest prefix the new prompt
shares with it, and processes only the rest. A ``picker`` made for the request holds its
grammar and search options; it is given base's logits (``set_logits``) and picks each
token under the grammar. onnxruntime-genai takes ``set_logits`` only once the picker has
computed logits of its own, so the picker runs one extra decode step per token: far less
than the prompt. The picker's sequence is not the prompt, so what depends on the whole
sequence is done here: the repetition penalty is applied to base's logits over base's
sequence, as the Generator does; options this cannot reproduce turn the cache off.
"""

from __future__ import annotations

import logging
from typing import Any

from voiced.llm.runtime import Decoder, Job, LoadedModel, genai, search_params

__all__ = ["HEADROOM", "PrefixCache"]

log = logging.getLogger(__name__)

HEADROOM = 256
"""Tokens base holds beyond the prompt and answer it was made for: longer utterances fit without a new base."""

_NEUTRAL = {"num_beams": 1, "min_length": 0, "no_repeat_ngram_size": 0}
"""Search options the picker cannot apply as a fresh Generator would (they depend on the whole sequence)."""


class PrefixCache:
    """The previous request's processed prompt, reused by the next one (worker process only, one request at a time)."""

    def __init__(self, loaded: LoadedModel, headroom: int = HEADROOM) -> None:
        why = self.unsupported(loaded)
        if why is not None:
            raise ValueError(f"the prefix cache cannot reproduce this model's search: {why}")
        self.loaded = loaded
        self.headroom = headroom
        self._penalty = float(_defaults(loaded).get("repetition_penalty", 1.0))
        self._base: Any = None
        self._capacity = 0

    @classmethod
    def create(cls, loaded: LoadedModel) -> PrefixCache | None:
        """A cache for ``loaded``, or None (with a warning) when its search options rule one out."""
        why = cls.unsupported(loaded)
        if why is not None:
            log.warning("prefix cache off, every prompt is processed whole: %s", why)
            return None
        return cls(loaded)

    @staticmethod
    def unsupported(loaded: LoadedModel) -> str | None:
        """Why the cache would change this model's answers, or None when it does not."""
        search = _defaults(loaded)
        for key, neutral in _NEUTRAL.items():
            if int(search.get(key, neutral)) != neutral:
                return f"search.{key} = {search[key]:g} in genai_config.json"
        return None

    @property
    def held(self) -> int:
        """Tokens whose KV cache base holds."""
        return int(self._base.token_count()) if self._base is not None else 0

    def clear(self) -> None:
        """Forget what is held (after a failure, when the state is unknown)."""
        self._base = None
        self._capacity = 0

    def decoder(self, job: Job, ids: Any, max_new: int) -> Decoder:
        """A decoder for prompt ``ids`` whose ``reused`` leading tokens need no processing."""
        og = genai()
        need = len(ids) + max_new
        if self._base is None or need > self._capacity:
            self._base = None  # frees the old KV cache before the new one is allocated
            self._capacity = min(self.loaded.context_length, need + self.headroom)
            params = og.GeneratorParams(self.loaded.model)
            params.set_search_options(max_length=self._capacity)
            self._base = og.Generator(self.loaded.model, params)
        return _SplitDecoder(self.loaded, job, ids, max_new, self._base, self._rewind(ids), self._penalty)

    def _rewind(self, ids: Any) -> int:
        """Rewind base to the longest prefix it shares with ``ids``, leaving at least one token to feed."""
        import numpy as np

        if self.held == 0:
            return 0
        held = self._base.get_sequence(0)
        n = min(len(held), len(ids) - 1)  # the last prompt token is fed again: its logits start the answer
        differ = np.flatnonzero(held[:n] != ids[:n])
        keep = int(differ[0]) if differ.size else n
        if keep < len(held):
            self._base.rewind_to(keep)
        return keep


class _SplitDecoder:
    """Base computes the logits, a guided picker made for this request chooses the tokens."""

    def __init__(self, loaded: LoadedModel, job: Job, ids: Any, max_new: int, base: Any, reused: int,
                 penalty: float) -> None:
        self.reused = reused
        self._base = base
        self._penalty = penalty
        # One primer token, then max_new answer tokens: the picker is done exactly when a fresh Generator would be.
        params = search_params(loaded, job, 1 + max_new, repetition_penalty=1.0)
        self._picker = genai().Generator(loaded.model, params)
        self._primer = ids[-1:]
        self._last: int | None = None

    def append(self, ids: Any) -> None:
        self._base.append_tokens(ids)

    def done(self) -> bool:
        return bool(self._picker.is_done())

    def next_token(self) -> int:
        import numpy as np

        if self._last is None:
            self._picker.append_tokens(self._primer)  # any token does: it only lets the picker take logits
        else:
            self._base.append_tokens(np.asarray([self._last], dtype=np.int32))
            self._picker.get_logits()  # the picker's own step, after which it takes logits again
        logits = self._base.get_logits()
        if self._penalty != 1.0:
            logits = _penalized(logits, self._base.get_sequence(0), self._penalty)
        self._picker.set_logits(logits)
        self._picker.generate_next_token()
        self._last = int(self._picker.get_next_tokens()[0])
        return self._last


def _penalized(logits: Any, sequence: Any, penalty: float) -> Any:
    """The Generator's repetition penalty: every token of the sequence so far, once, pushed toward unlikely."""
    import numpy as np

    logits = np.array(logits, dtype=np.float32)  # a copy: the runtime's buffer stays as it was
    scores = logits.reshape(-1, logits.shape[-1])[-1]
    seen = np.unique(sequence)
    values = scores[seen]
    scores[seen] = np.where(values < 0, values * penalty, values / penalty)
    return logits


def _defaults(loaded: LoadedModel) -> dict[str, Any]:
    """The model's search options from genai_config.json."""
    return dict(genai().GeneratorParams(loaded.model).get_search_options())

"""Recognizer (shared, immutable) and Stream (one utterance's state), as in sherpa-onnx.

    recognizer = Recognizer.load("models/asr")
    stream = recognizer.create_stream()
    stream.accept_waveform(samples)          # audio in ...
    while recognizer.is_ready(stream):
        recognizer.decode(stream)            # ... and compute are separate steps
    stream.result.text

No threads are started here; the caller decides where the compute runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voiced.asr.context import ContextGraph
from voiced.asr.features import FbankConfig, OnlineFeatures
from voiced.asr.model import TransducerModel
from voiced.asr.result import RecognitionResult, ResultBuilder
from voiced.asr.sentence_context import SentenceContext, TemplateChoice, TemplateSearch
from voiced.asr.search import (
    BeamSearch,
    BeamState,
    GreedySearch,
    GreedyState,
    Hypothesis,
    SearchMethod,
)
from voiced.audio.frames import SAMPLE_RATE
from voiced.errors import ConfigError
from voiced.runtime.onnx import SessionOptions

if TYPE_CHECKING:
    from voiced.sentencespace import SentenceSpace

__all__ = ["RecognitionResult", "Recognizer", "RecognizerConfig", "Stream"]

FRAME_SHIFT_S = 0.01
SUBSAMPLING = 4
"""Encoder frames are 4 feature frames (40 ms) in every supported export."""


@dataclass(frozen=True)
class RecognizerConfig:
    """How a transducer is decoded."""

    method: SearchMethod = SearchMethod.GREEDY
    """greedy_search matches sherpa-onnx token for token; modified_beam_search enables hotwords."""
    max_active_paths: int = 4
    """Beam width of modified beam search."""
    hotwords: tuple[str, ...] = ()
    """Phrases to boost (modified beam search only), e.g. the vocabulary of the intent templates."""
    hotword_boost: float = 1.5
    """Log-score bonus per token of a matched phrase."""
    tail_padding_ms: int = 800
    """Silence appended when an utterance ends, so the last words leave the encoder's look-ahead."""
    temperature: float = 2.0
    """Softens token probabilities for confidences only; decoding uses raw logits."""
    threads: int = 1
    """ONNX Runtime intra-op threads per session."""

    def __post_init__(self) -> None:
        if not isinstance(self.method, SearchMethod):
            raise ConfigError("asr.method", f"must be one of {[m.value for m in SearchMethod]}, got {self.method!r}")
        if self.max_active_paths < 1:
            raise ConfigError("asr.max_active_paths", f"must be at least 1, got {self.max_active_paths}")
        if self.tail_padding_ms < 0:
            raise ConfigError("asr.tail_padding_ms", f"must be >= 0, got {self.tail_padding_ms}")
        if self.temperature <= 0:
            raise ConfigError("asr.temperature", f"must be > 0, got {self.temperature}")
        if self.threads < 1:
            raise ConfigError("asr.threads", f"must be at least 1, got {self.threads}")


class Stream:
    """Per-utterance state: features, encoder states, search state."""

    def __init__(self, recognizer: Recognizer, graph: ContextGraph | None) -> None:
        self._recognizer = recognizer
        self._graph = graph
        self.reset()

    def reset(self) -> None:
        """Forget everything: ready for a new utterance with the same hotwords (and the
        recognizer's template sentences as they are now: see ``Recognizer.use_templates``)."""
        rec = self._recognizer
        self.features = OnlineFeatures(rec.fbank)
        self.states = rec.model.initial_states()
        self.processed_frames = 0
        self.finished = False
        self.results = ResultBuilder(rec.model.tokens, FRAME_SHIFT_S * SUBSAMPLING)
        self.search_state: GreedyState | BeamState = (
            rec.search.start(self._graph, rec.sentences) if isinstance(rec.search, BeamSearch) else rec.search.start()
        )
        self.at_pause: tuple[tuple[int, ...], TemplateChoice] | None = None
        """The free best path's tokens at the last pause in speech and the template choice made
        there (``Recognizer.decode_at_pause``); it stands while that path stays the best."""

    def accept_waveform(self, samples: np.ndarray) -> None:
        """Add mono float32 samples at 16 kHz in [-1, 1]."""
        if self.finished:
            raise RuntimeError("accept_waveform after input_finished; call reset() first")
        self.features.accept_waveform(samples)

    def input_finished(self) -> None:
        """End of the utterance: append the tail padding and flush the feature extractor."""
        if self.finished:
            return
        pad = self._recognizer.config.tail_padding_ms * SAMPLE_RATE // 1000
        self.features.accept_waveform(np.zeros(pad, np.float32))
        self.features.input_finished()
        self.finished = True

    @property
    def result(self) -> RecognitionResult:
        return self._recognizer.result(self)


class Recognizer:
    """A loaded transducer and how to search it; create one stream per concurrent utterance."""

    def __init__(self, model: TransducerModel, config: RecognizerConfig) -> None:
        self.model = model
        self.config = config
        self.fbank = FbankConfig(num_bins=model.feature_dim)
        if config.method is SearchMethod.MODIFIED_BEAM:
            self.search: GreedySearch | BeamSearch = BeamSearch(model, config.max_active_paths, config.temperature)
        else:
            self.search = GreedySearch(model, config.temperature)
        self._default_graph = self._graph(config.hotwords)
        self.sentences: SentenceContext | None = None
        """Template sentences the streams' beams follow (``use_templates``); None: free decoding only."""

    @classmethod
    def load(cls, directory: str | Path, config: RecognizerConfig | None = None,
             session: SessionOptions | None = None) -> Recognizer:
        """``session`` (threads and their cores, from a hardware profile) overrides ``config.threads``."""
        config = config or RecognizerConfig()
        return cls(TransducerModel.load(directory, session or SessionOptions(threads=config.threads)), config)

    def use_templates(self, commands: SentenceSpace | None, settings: TemplateSearch | None = None) -> None:
        """Decode template-aware over ``commands`` (None: free decoding only), as Whisper's
        ``use_templates``: every stream reset from now on carries a sentence beam beside its free
        beam, and its final result is the best whole template sentence unless the free one is
        more probable by more than ``settings.margin`` nats per token. Partial results stay the
        free beam's but at a pause in speech (``decode_at_pause``). Needs modified beam search
        (greedy search has no beam to hold the sentences)."""
        if commands is not None and self.config.method is not SearchMethod.MODIFIED_BEAM:
            raise ValueError("template-aware decoding needs modified_beam_search")
        self.sentences = None if commands is None else SentenceContext(
            commands, self.model.tokens, self.model.context_size, settings)

    def _graph(self, phrases: Sequence[str]) -> ContextGraph | None:
        if self.config.method is not SearchMethod.MODIFIED_BEAM or not phrases:
            return None
        encoded = [self.model.tokens.encode(p) for p in phrases]
        return ContextGraph([e for e in encoded if e], boost=self.config.hotword_boost)

    def create_stream(self, hotwords: Sequence[str] | None = None) -> Stream:
        """A new stream; ``hotwords`` replaces the configured phrase list for this stream."""
        graph = self._default_graph if hotwords is None else self._graph(hotwords)
        return Stream(self, graph)

    def is_ready(self, stream: Stream) -> bool:
        """Enough features for one more encoder chunk (the same rule as sherpa-onnx)."""
        return stream.processed_frames + self.model.chunk_size < stream.features.num_frames_ready

    def decode(self, stream: Stream) -> None:
        """Run one encoder chunk and the search over its output frames."""
        model = self.model
        feats = stream.features.get_frames(stream.processed_frames, model.chunk_size)
        stream.processed_frames += model.chunk_shift
        encoder_out, stream.states = model.run_encoder(feats, stream.states)
        self.search.decode(stream.search_state, encoder_out)  # type: ignore[arg-type]

    def decode_all(self, stream: Stream) -> None:
        """Decode every chunk that is ready."""
        while self.is_ready(stream):
            self.decode(stream)

    def decode_at_pause(self, stream: Stream) -> None:
        """Speech paused: a transducer's partial is current after every chunk, so only what is ready.

        With templates in use, a free partial that is no command nor the beginning of one is
        weighed against the sentence beam's best whole sentence, by ``TemplateSearch.pause_margin``
        (Whisper's rule at a pause): the partial is that sentence while the free beam's best path
        stays as it was, so a misheard command is known as one while the matched silence runs."""
        self.decode_all(stream)
        stream.at_pause = None
        state = stream.search_state
        if not isinstance(state, BeamState) or state.sentences is None:
            return
        context = state.sentences.context  # the stream's own (templates change from its next reset on)
        free = self.search.best(state)
        if context.space.only_begun(self.model.tokens.text(free.tokens)):
            return  # a command may be under way: the speaker may go on after the pause
        margin = min(context.settings.margin, context.settings.pause_margin)
        choice = state.sentences.choose(free, free.score - free.bonus).with_margin(margin)
        if choice.from_templates:
            stream.at_pause = (free.tokens, choice)

    def finish(self, stream: Stream) -> RecognitionResult:
        """End the utterance, decode what is left and return the final result."""
        stream.input_finished()
        self.decode_all(stream)
        return self.result(stream)

    def result(self, stream: Stream) -> RecognitionResult:
        """The stream's result so far; only tokens new since the last call are turned into text."""
        state = stream.search_state
        if isinstance(state, BeamState):
            choice = self.choose(stream) if stream.finished else self._pause_choice(stream, state)
            if choice is not None:
                best = choice.best
                result = stream.results.build(best.tokens, best.frames, best.log_probs)
                return replace(result, from_templates=True) if choice.from_templates else result
            hyp: Hypothesis = self.search.best(state, final=stream.finished)  # type: ignore[call-arg]
        else:
            hyp = state.hyp
        return stream.results.build(hyp.tokens, hyp.frames, hyp.log_probs)

    def _pause_choice(self, stream: Stream, state: BeamState) -> TemplateChoice | None:
        """The choice made at the pause, while the free beam's best path is the one it weighed
        (the speaker did not go on)."""
        if stream.at_pause is None:
            return None
        tokens, choice = stream.at_pause
        if self.search.best(state).tokens != tokens:  # type: ignore[union-attr]
            stream.at_pause = None  # words came after the pause: the next pause decides again
            return None
        return choice

    def choose(self, stream: Stream) -> TemplateChoice | None:
        """The free result and the best whole template sentence of the stream so far, with their
        scores (for measuring the margin); None when the stream has no sentence beam."""
        state = stream.search_state
        return self.search.choose(state) if isinstance(state, BeamState) else None  # type: ignore[union-attr]

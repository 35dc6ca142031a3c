"""Everything the core loads before READY: intents and their fallbacks, VAD, ASR, wake words, voice.

Loaded once (``Models.load``); only the intent templates (and what is compiled from them)
change afterwards, on reload, by one reference swap each.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from voiced.asr.loader import SpeechRecognizer, load_recognizer
from voiced.asr.recognizer import Recognizer, RecognizerConfig
from voiced.asr.search import SearchMethod
from voiced.asr.sentence_context import TemplateSearch
from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
from voiced.asr.whisper_prompt import prompt_text
from voiced.asr.whisper_templates import TemplateDecoding
from voiced.audio.dereverb import DereverbConfig
from voiced.cloud import CloudRouter
from voiced.config import Config
from voiced.errors import ConfigError, ModelError
from voiced.intents import IntentRecognizer
from voiced.listener import Listener
from voiced.llm import LlmFallback
from voiced.llm.runtime import read_genai_config
from voiced.runtime.graph_cache import default_graph_cache
from voiced.runtime.hardware import HardwareProfile, OnnxRole
from voiced.runtime.onnx import SessionOptions
from voiced.sentencespace import SentenceSpace
from voiced.stages import Counters
from voiced.tts import PiperVoice, VoiceSettings
from voiced.vad import Endpointer, SileroVad, VadKind, create_detector
from voiced.wake import WakeConfig, WakeDetector, WakeModel

__all__ = ["Models"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _naming(key: str, config: Config) -> Iterator[None]:
    """A model that does not load names the config key and file it came from, beside the model
    file itself (``asr.model in /etc/voiced/voiced.toml: ASR model directory not found: ...``)."""
    try:
        yield
    except ModelError as exc:
        where = f" in {config.path}" if config.path else ""
        raise ModelError(f"{key}{where}: {exc}") from exc


class Models:
    """The loaded models and the intent recognizer; shared by the core's stages and its adapters."""

    def __init__(self, config: Config, profile: HardwareProfile, counters: Counters) -> None:
        self.config = config
        self.profile = profile
        self.counters = counters
        self.intents: IntentRecognizer
        self.llm: LlmFallback | None = None
        self.cloud: CloudRouter
        self.recognizer: SpeechRecognizer | None = None
        self.commands: SentenceSpace | None = None
        self.silero: SileroVad | None = None
        self.wake: WakeDetector | None = None
        self.voice: PiperVoice | None = None

    @classmethod
    def load(cls, config: Config, profile: HardwareProfile, counters: Counters) -> Models:
        """Everything heavy happens here, once, before READY. Every model's optimized graph is kept
        between starts (``voiced.runtime.graph_cache``).

        All on this thread: loading the voice or the VAD on threads of their own (ONNX Runtime
        lets go of the GIL while it builds a session) took ~0.2 s off a start with the joe voice
        here, but each loading thread leaves a malloc arena behind: +15-20 MB of RSS for the life
        of the process, a poor trade on a board that starts once a month."""
        m = cls(config, profile, counters)
        cfg = config
        m.intents = IntentRecognizer.from_section(cfg.intents, str(cfg.path) if cfg.path else None)
        # The LLM runs in a worker process (its binding holds the GIL); loaded lazily unless preload,
        # but a folder that is no model is said now, not at the first unmatched command.
        if cfg.llm.model is not None:
            with _naming("llm.model", cfg):
                read_genai_config(cfg.llm.model)
        m.llm = LlmFallback.from_recognizer(cfg.llm, m.intents) if cfg.llm.enabled else None
        if m.llm is not None and cfg.llm.preload:
            m.llm.preload()
        # Local first: the cloud (off by default) is consulted only after the local path and a
        # reachability probe; prepare() touches no network and never raises.
        m.cloud = CloudRouter.from_recognizer(cfg.cloud, m.intents, counters=counters)
        m.cloud.prepare()
        if cfg.asr.model is not None:
            session = m._options(OnnxRole.ASR)
            if cfg.asr.threads is not None:
                session = replace(session, threads=cfg.asr.threads, thread_affinities=None)
            # The weights go into huge pages after READY=1 (``voiced run``, ``voiced wyoming``), not before.
            session = replace(session, collapse_huge_pages=False)
            with _naming("asr.model", cfg):
                m.recognizer = load_recognizer(cfg.asr.model, RecognizerConfig(
                    method=cfg.asr.method, max_active_paths=cfg.asr.max_active_paths,
                    hotwords=tuple(m.intents.hotwords(cfg.asr.max_hotwords)), hotword_boost=cfg.asr.hotword_boost,
                    tail_padding_ms=cfg.asr.tail_padding_ms, threads=session.threads,
                ), WhisperConfig(language=cfg.asr.language, threads=session.threads,
                                 partial_every_s=cfg.asr.whisper_partial_every_s,
                                 decode_at_pause=cfg.asr.whisper_decode_at_pause,
                                 dereverb=DereverbConfig() if cfg.asr.whisper_dereverb else None), session)
        m.use_sentence_space(m.intents)
        if cfg.vad.kind is VadKind.SILERO:
            with _naming("vad.model", cfg):
                m.silero = SileroVad.load(cfg.vad.model, m._options(OnnxRole.VAD))
        if cfg.wake.models and cfg.wake.directory is not None:
            with _naming("wake.models", cfg):
                model = WakeModel.load(cfg.wake.directory, list(cfg.wake.models), options=m._options(OnnxRole.VAD))
            m.wake = WakeDetector(model, WakeConfig(threshold=cfg.wake.threshold, thresholds=dict(cfg.wake.thresholds),
                                                    patience=cfg.wake.patience, refractory_s=cfg.wake.refractory_s))
            unknown = sorted(set(cfg.wake.thresholds) - set(m.wake.labels))
            if unknown:  # a typo would leave that wake word at the common threshold without a word
                raise ConfigError(f"wake.thresholds.{unknown[0]}", "no such wake word (the models give: "
                                  f"{', '.join(m.wake.labels)})", str(cfg.path) if cfg.path else None)
        if cfg.tts.voice is not None:
            with _naming("tts.voice", cfg):
                m.voice = PiperVoice.load(cfg.tts.voice, settings=VoiceSettings(
                    session=m._options(OnnxRole.TTS), max_text_chars=cfg.tts.max_text_chars,
                    release_after_phonemes=(profile.tts_release_after_phonemes if cfg.tts.release_after_phonemes
                                            is None else cfg.tts.release_after_phonemes),
                    strip_markup=cfg.tts.strip_markup))
        m.warm_up()
        return m

    def _options(self, role: OnnxRole) -> SessionOptions:
        """The hardware profile's options for ``role``, its optimized graph kept between starts
        (optimizing is most of a model's load: the joe voice 0.75 s -> 0.16 s here)."""
        return replace(self.profile.session_options(role), graph_cache=default_graph_cache())

    def warm_up(self) -> None:
        """One second of silence through VAD and ASR: first-call allocations happen before READY."""
        list(self.new_listener().events([np.zeros(16_000, np.float32)]))
        if self.recognizer is not None:
            stream = self.recognizer.create_stream()
            stream.accept_waveform(np.zeros(16_000, np.float32))
            self.recognizer.finish(stream)

    def use_intents(self, intents: IntentRecognizer) -> None:
        """Reload: new templates for the intent stage and for everything compiled from them."""
        self.intents = intents  # one reference swap: the intent stage sees old or new, never half
        self.use_sentence_space(intents)
        if self.llm is not None:
            self.llm.set_intents(intents)
        self.cloud.set_intents(intents)

    def use_sentence_space(self, intents: IntentRecognizer) -> None:
        """Compile the templates' sentences once (at load and reload) for what uses them: intent-aware
        endpointing and template-aware decoding (Whisper, and transducers with modified beam search)."""
        cfg, rec = self.config, self.recognizer
        beam = isinstance(rec, Recognizer) and rec.config.method is SearchMethod.MODIFIED_BEAM
        templates = cfg.asr.template_decoding and (isinstance(rec, WhisperRecognizer) or beam)
        early = rec is not None and cfg.vad.endpoint.matched_silence_ms < cfg.vad.endpoint.min_silence_ms
        self.commands = intents.sentence_space() if intents.enabled and (templates or early) else None
        space = self.commands if templates else None
        if isinstance(rec, WhisperRecognizer):
            rec.use_templates(space, TemplateDecoding(margin=cfg.asr.template_margin,
                                                      pause_margin=cfg.asr.template_pause_margin))
            rec.use_prompt(prompt_text(intents.list_phrases()) if cfg.asr.whisper_prompt_lists else "")
        elif isinstance(rec, Recognizer) and beam:  # streams take it from their next utterance on
            rec.use_templates(space, TemplateSearch(margin=cfg.asr.template_margin, boost=cfg.asr.hotword_boost,
                                                    pause_margin=cfg.asr.template_pause_margin))

    def new_listener(self, keep_audio: bool | None = None) -> Listener:
        """A listener (endpointer + recognizer stream) over the shared models; one per audio stream."""
        cfg = self.config.vad
        endpointer = Endpointer(cfg.endpoint, create_detector(cfg.kind, self.silero, cfg.gate))
        if keep_audio is None:
            keep_audio = self.config.cloud.enabled and self.config.cloud.asr  # audio leaves only when asked
        return Listener(self.recognizer, endpointer, self.config.audio.window_frames, keep_audio,
                        commands=self.commands)

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
        self.cloud.close()

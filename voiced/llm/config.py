"""The ``[llm]`` section: the local language model that catches what no template matches."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from voiced.errors import ConfigError

__all__ = ["MAX_BUDGET_S", "LlmConfig", "Provider"]

MAX_BUDGET_S = 9.0
"""Upper bound of ``time_budget_s``: the intent stage must beat its 10 s heartbeat meanwhile."""


class Provider(Enum):
    """Where onnxruntime-genai runs the model."""

    AUTO = "auto"
    """The first that works of CUDA, DirectML, CPU."""
    CPU = "cpu"
    """The CPU; always available."""
    CUDA = "cuda"
    """An NVIDIA GPU (needs the ``onnxruntime-genai-cuda`` package); falls back to the CPU."""
    DML = "dml"
    """DirectML on Windows (needs ``onnxruntime-genai-directml``); falls back to the CPU."""


@dataclass(frozen=True)
class LlmConfig:
    """How the local LLM fallback runs; with ``model`` unset there is no fallback."""

    model: Path | None = None
    """onnxruntime-genai model folder (``genai_config.json``, the ONNX decoder, ``tokenizer.json``); unset: no LLM."""
    max_new_tokens: int = 64
    """Most tokens one answer may take; an answer cut short is invalid (intentNotRecognized)."""
    time_budget_s: float = 3.0
    """Longest an utterance waits for the LLM, loading included; past it generation is aborted."""
    temperature: float = 0.0
    """0 takes the most likely token (repeatable); above 0 samples, within the allowed answers."""
    preload: bool = False
    """Load the model before READY instead of at the first utterance that needs it."""
    threads: int | None = None
    """ONNX Runtime intra-op threads; unset: half the CPUs voiced may use, at least 1."""
    provider: Provider = Provider.AUTO
    """``auto`` (CUDA → DirectML → CPU), ``cpu``, ``cuda`` or ``dml``; a GPU that fails falls back to the CPU."""
    prefix_cache: bool = True
    """Keep the processed prompt and reuse the start the next prompt shares (the intents): same answers, sooner."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens <= 4096:
            raise ConfigError("max_new_tokens", f"must be within 1..4096, got {self.max_new_tokens}")
        if not 0 < self.time_budget_s <= MAX_BUDGET_S:
            raise ConfigError("time_budget_s", f"must be > 0 and at most {MAX_BUDGET_S}, got {self.time_budget_s}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ConfigError("temperature", f"must be within 0..2, got {self.temperature}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("threads", f"must be at least 1, got {self.threads}")
        if self.preload and self.model is None:
            raise ConfigError("preload", "needs a model folder in llm.model")

    @property
    def enabled(self) -> bool:
        """True when a model folder is set."""
        return self.model is not None

    def resolved_threads(self) -> int:
        """``threads``, or half the CPUs this process may run on (at least 1)."""
        if self.threads is not None:
            return self.threads
        return max(1, len(os.sched_getaffinity(0)) // 2)

    def relative_to(self, base: Path) -> LlmConfig:
        """This config with a relative ``model`` made relative to ``base`` (the config file's folder)."""
        if self.model is None or self.model.is_absolute():
            return self
        return replace(self, model=base / self.model)

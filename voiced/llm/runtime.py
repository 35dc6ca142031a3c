"""onnxruntime-genai: opening a model folder on the best provider, and one guided generation.

This module runs inside the LLM worker process (``voiced.llm.worker``): onnxruntime-genai's
Python binding holds the GIL through model loading, prompt processing and every token
step, so in the daemon's own process it would freeze capture, MQTT and the watchdog
while it thinks. Nothing here is imported by the daemon's process except the types.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from voiced.errors import ModelError
from voiced.llm.config import Provider
from voiced.llm.prompt import Prompt

if TYPE_CHECKING:
    import onnxruntime_genai as og

    from voiced.llm.prefix import PrefixCache

__all__ = ["Decoder", "Finish", "GenerationEnd", "Job", "LoadedModel", "ProviderChoice", "genai", "open_model",
           "read_genai_config", "run_generation", "search_params"]

log = logging.getLogger(__name__)

PREFILL_CHUNK = 64
"""Prompt tokens per step: a cancelled request stops within one chunk instead of after the whole prompt."""

_SEARCH_ORDER = (Provider.CUDA, Provider.DML, Provider.CPU)
_GPU_PACKAGES = {Provider.CUDA: "onnxruntime-genai-cuda", Provider.DML: "onnxruntime-genai-directml"}


class Finish(Enum):
    """How a generation ended, as seen by whoever waited for it."""

    EOS = "eos"
    """The model ended its answer (with guidance: the grammar was complete)."""
    MAX_TOKENS = "max_tokens"
    """``max_new_tokens`` ran out first: the answer is cut short."""
    CANCELLED = "cancelled"
    """Stopped on request between two steps (the waiter's budget had run out)."""
    ERROR = "error"
    """The runtime failed (the message is in ``GenerationEnd.error``)."""
    BUDGET = "budget"
    """The waiter's time budget ran out; the worker was told to stop."""
    BUSY = "busy"
    """An earlier, aborted generation still held the model for the whole budget."""
    LOADING = "loading"
    """The model was still loading when the budget ran out."""
    UNAVAILABLE = "unavailable"
    """The model failed to load, or its worker is gone."""


@dataclass(frozen=True)
class ProviderChoice:
    """The provider a model runs on, and why the ones before it in the search order were passed over."""

    provider: Provider
    requested: Provider
    skipped: tuple[tuple[Provider, str], ...]

    def describe(self) -> str:
        why = "; ".join(f"{p.value}: {reason}" for p, reason in self.skipped)
        return f"{self.provider.value} (asked: {self.requested.value}" + (f"; skipped {why})" if why else ")")


@dataclass(frozen=True)
class Job:
    """One request to the worker."""

    id: int
    prompt: Prompt
    schema: str | None
    """JSON schema the answer is held to; None generates freely."""
    max_new_tokens: int
    temperature: float


@dataclass(frozen=True)
class GenerationEnd:
    """What one generation produced, with its timings."""

    finish: Finish
    text: str = ""
    tokens: int = 0
    """Tokens generated (end-of-sequence not counted)."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens not processed again: the prefix cache still held them from the previous request."""
    prefill_s: float = 0.0
    """Prompt processing up to the first generated token."""
    decode_s: float = 0.0
    """The other generated tokens."""
    error: str | None = None


@dataclass
class LoadedModel:
    """An opened model with its tokenizer (worker process only)."""

    model: og.Model
    tokenizer: og.Tokenizer
    choice: ProviderChoice
    context_length: int
    eos: frozenset[int]
    chat_template: bool
    guidance: bool
    load_s: float


def read_genai_config(folder: Path) -> dict[str, Any]:
    """The folder's ``genai_config.json``; a missing or malformed folder raises ModelError naming the file."""
    path = Path(folder) / "genai_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"not an onnxruntime-genai model folder (no {path})") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from None
    decoder = config.get("model", {}).get("decoder", {}) if isinstance(config, dict) else {}
    onnx = decoder.get("filename") if isinstance(decoder, dict) else None
    if not isinstance(onnx, str) or not (path.parent / onnx).is_file():
        raise ModelError(f"{path}: model.decoder.filename {onnx!r} is not a file in {path.parent}")
    return config


def genai() -> Any:
    """The onnxruntime_genai module, imported on first use; ModelError when it is not installed."""
    try:
        import onnxruntime_genai
    except ImportError as exc:
        raise ModelError(f"onnxruntime-genai is not installed (pip install 'voiced[llm]'): {exc}") from None
    return onnxruntime_genai


def _unavailable(og: Any, provider: Provider) -> str | None:
    """Why ``provider`` cannot be tried in this installation, or None when it can."""
    if provider is Provider.CUDA and not og.is_cuda_available():
        return f"not in this onnxruntime-genai build (install {_GPU_PACKAGES[provider]})"
    if provider is Provider.DML and not og.is_dml_available():
        return f"not in this onnxruntime-genai build (install {_GPU_PACKAGES[provider]}, Windows only)"
    return None


def _candidates(requested: Provider) -> tuple[Provider, ...]:
    if requested is Provider.AUTO:
        return _SEARCH_ORDER
    return (requested,) if requested is Provider.CPU else (requested, Provider.CPU)


def open_model(folder: Path, requested: Provider = Provider.AUTO, threads: int = 1) -> LoadedModel:
    """Open ``folder`` on the first provider that works: CUDA → DirectML → CPU for ``auto``.

    A GPU provider absent from the installed package is skipped; one that is present but
    fails (no device, no driver) is skipped too, with the reason kept in ``choice``.
    """
    og = genai()
    start = time.perf_counter()
    genai_config = read_genai_config(folder)
    skipped: list[tuple[Provider, str]] = []
    for provider in _candidates(requested):
        reason = _unavailable(og, provider)
        if reason is None:
            try:
                model = og.Model(_config(og, folder, provider, threads))
                break
            except Exception as exc:
                if provider is Provider.CPU:
                    raise ModelError(f"cannot load the LLM in {folder}: {exc}") from exc
                reason = f"failed: {str(exc).splitlines()[0][:200]}"
        skipped.append((provider, reason))
    else:  # only reachable when every candidate was skipped, and CPU never is
        raise ModelError(f"no provider could load {folder}")
    tokenizer = og.Tokenizer(model)
    chat = _has_chat_template(tokenizer)
    guidance = hasattr(og.GeneratorParams, "set_guidance")
    context = int(genai_config["model"].get("context_length") or genai_config.get("search", {}).get("max_length") or 2048)
    return LoadedModel(
        model=model, tokenizer=tokenizer, choice=ProviderChoice(provider, requested, tuple(skipped)),
        context_length=context, eos=frozenset(int(t) for t in tokenizer.eos_token_ids),
        chat_template=chat, guidance=guidance, load_s=time.perf_counter() - start,
    )


def _config(og: Any, folder: Path, provider: Provider, threads: int) -> Any:
    config = og.Config(str(folder))
    config.clear_providers()  # genai_config.json may name the provider it was built for
    if provider is not Provider.CPU:
        config.append_provider(provider.value)
    options = {
        "intra_op_num_threads": threads,
        "inter_op_num_threads": 1,
        # Spinning keeps idle worker threads busy-waiting; on a Pi that is wasted power and heat.
        "session.intra_op.allow_spinning": "0",
        "session.inter_op.allow_spinning": "0",
    }
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    return config


def _has_chat_template(tokenizer: Any) -> bool:
    try:
        tokenizer.apply_chat_template(json.dumps([{"role": "user", "content": "x"}]), add_generation_prompt=True)
        return True
    except Exception:  # noqa: BLE001 - whatever the reason, the model has no usable chat template
        return False


def encode_prompt(loaded: LoadedModel, prompt: Prompt) -> Any:
    """Token ids of ``prompt``, through the model's chat template when it has one."""
    if loaded.chat_template:
        text = loaded.tokenizer.apply_chat_template(json.dumps(prompt.messages()), add_generation_prompt=True)
    else:
        text = prompt.plain()
    return loaded.tokenizer.encode(text)


class Decoder(Protocol):
    """Where one generation's tokens come from: a fresh guided Generator, or the prefix cache."""

    reused: int
    """Leading prompt tokens already processed; ``append`` gets the rest."""

    def append(self, ids: Any) -> None: ...

    def done(self) -> bool: ...

    def next_token(self) -> int: ...


class _FreshDecoder:
    """One Generator for one request: the whole prompt is processed."""

    reused = 0

    def __init__(self, loaded: LoadedModel, job: Job, max_length: int) -> None:
        self._generator = genai().Generator(loaded.model, search_params(loaded, job, max_length))

    def append(self, ids: Any) -> None:
        self._generator.append_tokens(ids)

    def done(self) -> bool:
        return bool(self._generator.is_done())

    def next_token(self) -> int:
        self._generator.generate_next_token()
        return int(self._generator.get_next_tokens()[0])


def search_params(loaded: LoadedModel, job: Job, max_length: int, **search: Any) -> Any:
    """GeneratorParams for ``job``: its sampling and guidance; ``search`` overrides further options."""
    params = genai().GeneratorParams(loaded.model)
    search = {"max_length": max_length, **search}
    search.update({"do_sample": True, "temperature": job.temperature} if job.temperature > 0 else {"do_sample": False})
    params.set_search_options(**search)
    if job.schema is not None and loaded.guidance:
        params.set_guidance("json_schema", job.schema)
    return params


def run_generation(loaded: LoadedModel, job: Job, cancelled: Callable[[], bool],
                   emit: Callable[[int], None] | None = None, cache: PrefixCache | None = None) -> GenerationEnd:
    """Generate the answer to ``job``; each new token goes to ``emit``; stops between steps once ``cancelled()``.

    With ``cache`` the prompt's start that the previous request shared is not processed again.
    """
    import numpy as np

    start = time.perf_counter()
    ids = np.asarray(encode_prompt(loaded, job.prompt), dtype=np.int32)
    if len(ids) + 1 > loaded.context_length:
        return GenerationEnd(Finish.ERROR, prompt_tokens=len(ids),
                             error=f"prompt of {len(ids)} tokens does not fit the model's context of {loaded.context_length}")
    tokens: list[int] = []
    first = None
    finish = Finish.MAX_TOKENS
    decoder: Decoder | None = None
    reused = 0
    try:
        max_new = min(job.max_new_tokens, loaded.context_length - len(ids))
        decoder = cache.decoder(job, ids, max_new) if cache is not None else _FreshDecoder(loaded, job, len(ids) + max_new)
        reused = decoder.reused
        for i in range(reused, len(ids), PREFILL_CHUNK):
            if cancelled():
                return _end(Finish.CANCELLED, loaded, tokens, ids, start, first, reused)
            decoder.append(ids[i : i + PREFILL_CHUNK])
        while not decoder.done():
            if cancelled():
                finish = Finish.CANCELLED
                break
            token = decoder.next_token()
            if first is None:
                first = time.perf_counter()
            if token in loaded.eos:
                finish = Finish.EOS
                break
            tokens.append(token)
            if emit is not None:
                emit(token)
    except Exception as exc:  # noqa: BLE001 - a runtime failure ends this request, not the worker
        log.warning("generation failed: %s", exc)
        if cache is not None:
            cache.clear()  # its state is unknown now
        return GenerationEnd(Finish.ERROR, prompt_tokens=len(ids), error=str(exc))
    finally:
        del decoder  # frees this request's generator now, not at the next request
    return _end(finish, loaded, tokens, ids, start, first, reused)


def _end(finish: Finish, loaded: LoadedModel, tokens: list[int], ids: Any, start: float, first: float | None,
         cached: int) -> GenerationEnd:
    import numpy as np

    now = time.perf_counter()
    text = loaded.tokenizer.decode(np.asarray(tokens, dtype=np.int32)) if tokens else ""
    first = first if first is not None else now
    return GenerationEnd(finish, text, len(tokens), len(ids), cached, prefill_s=first - start, decode_s=now - first)

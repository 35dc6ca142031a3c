"""A Whisper model in the sherpa-onnx export layout, loaded once and shared.

One directory holds ``<name>-encoder.onnx``, ``<name>-decoder.onnx`` and ``<name>-tokens.txt``
(``*.int8.onnx`` preferred when present), as sherpa-onnx's ``scripts/whisper/export-onnx.py``
writes them:

- encoder: ``mel`` [N, n_mels, T] → ``n_layer_cross_k``, ``n_layer_cross_v`` [layers, N, T/2, state];
- decoder: ``tokens`` [N, n], ``in_n_layer_self_k_cache``/``…_v_cache`` [layers, N, n_text_ctx, state],
  the cross K/V and ``offset`` [1] (tokens already in the cache) → ``logits`` [N, n, vocab] and the
  updated caches;
- the encoder's metadata names the special tokens (sot, eot, no_timestamps, the sot sequence, the
  language tokens of multilingual models) and the sizes;
- tokens.txt: one ``base64(token bytes) id`` per line.

Greedy decoding follows sherpa-onnx's C++ decoder step for step, so both give the same tokens.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voiced.errors import ModelError
from voiced.models.manifest import validated_choice
from voiced.runtime.onnx import SessionOptions, arena_release, create_session

if TYPE_CHECKING:
    import onnxruntime as ort

    from voiced.asr.whisper_prompt import BytePairEncoder

__all__ = ["WhisperFiles", "WhisperModel", "is_whisper_dir"]

log = logging.getLogger(__name__)

TOKENS_PER_SECOND = 6
"""sherpa-onnx's bound on the text of an utterance: at most 6 tokens per second of audio."""


def _pick(directory: Path, part: str) -> Path | None:
    for pattern in (f"*-{part}.int8.onnx", f"*-{part}.onnx"):
        found = sorted(directory.glob(pattern))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise ModelError(f"Whisper model {directory}: several {part} files ({names}); keep one")
    return None


def is_whisper_dir(directory: str | Path) -> bool:
    """Whether ``directory`` holds a sherpa-onnx Whisper export (a ``*-tokens.txt`` and ``*-encoder*.onnx``)."""
    directory = Path(directory)
    return directory.is_dir() and any(directory.glob("*-tokens.txt")) and any(directory.glob("*-encoder*.onnx"))


@dataclass(frozen=True)
class WhisperFiles:
    """The files of one Whisper directory."""

    encoder: Path
    decoder: Path
    tokens: Path

    @classmethod
    def find(cls, directory: str | Path) -> WhisperFiles:
        """Pick the files of ``directory``, preferring INT8; ModelError names what is missing."""
        directory = Path(directory)
        if not directory.is_dir():
            raise ModelError(f"ASR model directory not found: {directory}")
        tokens = sorted(directory.glob("*-tokens.txt"))
        if len(tokens) != 1:
            raise ModelError(f"Whisper model {directory}: expected one *-tokens.txt, found {len(tokens)}")
        encoder, decoder = _pick(directory, "encoder"), _pick(directory, "decoder")
        for part, path in (("encoder", encoder), ("decoder", decoder)):
            if path is None:
                raise ModelError(f"Whisper model {directory}: NAME-{part}.onnx (or .int8.onnx) is missing")
        encoder, decoder = validated_choice([encoder, decoder])  # type: ignore[list-item]
        return cls(encoder=encoder, decoder=decoder, tokens=tokens[0])


def _meta_int(meta: dict[str, str], key: str, path: Path) -> int:
    try:
        return int(meta[key])
    except KeyError:
        raise ModelError(f"{path}: metadata key {key!r} is missing (not a sherpa-onnx Whisper export?)") from None
    except ValueError:
        raise ModelError(f"{path}: metadata {key}={meta[key]!r} is not an integer") from None


def _meta_ints(meta: dict[str, str], key: str, path: Path) -> tuple[int, ...]:
    raw = meta.get(key)
    if raw is None:
        raise ModelError(f"{path}: metadata key {key!r} is missing (not a sherpa-onnx Whisper export?)")
    try:
        return tuple(int(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise ModelError(f"{path}: metadata {key}={raw[:80]!r} is not a list of integers") from None


def _load_tokens(path: Path) -> dict[int, bytes]:
    tokens: dict[int, bytes] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read tokens file {path}: {exc}") from exc
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected 'base64 id'")
            tokens[int(parts[1])] = base64.b64decode(parts[0], validate=True)
        except ValueError as exc:  # binascii.Error is a ValueError
            raise ModelError(f"{path}:{lineno}: malformed token line {line[:60]!r} ({exc})") from None
    if not tokens:
        raise ModelError(f"tokens file {path} is empty")
    return tokens


class WhisperModel:
    """Encoder and decoder sessions plus the facts greedy decoding needs; no per-utterance state."""

    def __init__(self, files: WhisperFiles, options: SessionOptions) -> None:
        self.files = files
        self.tokens = _load_tokens(files.tokens)
        # The encoder's input is each utterance's own length (speech + tail padding, up to 30 s) and
        # the decoder's cross K/V follow it: ONNX Runtime's per-shape memory plans would pile up, one
        # per length (tiny.en INT8, 300 random lengths: 361 -> 521 MB RSS with them, -> 445 without,
        # still growing at 300; no slower without them)
        per_length = replace(options, memory_pattern=False)
        self.encoder = create_session(files.encoder, per_length)
        self.decoder = create_session(files.decoder, per_length)
        meta = self.encoder.get_modelmeta().custom_metadata_map
        path = files.encoder
        self.n_mels = _meta_int(meta, "n_mels", path)
        self.n_text_layer = _meta_int(meta, "n_text_layer", path)
        self.n_text_ctx = _meta_int(meta, "n_text_ctx", path)
        self.n_text_state = _meta_int(meta, "n_text_state", path)
        self.sot = _meta_int(meta, "sot", path)
        self.eot = _meta_int(meta, "eot", path)
        self.no_timestamps = _meta_int(meta, "no_timestamps", path)
        self.transcribe = _meta_int(meta, "transcribe", path)
        self.translate = _meta_int(meta, "translate", path)
        self.multilingual = bool(_meta_int(meta, "is_multilingual", path))
        # the previous-text token for a prompt; exports without it decode without prompts
        self.sot_prev: int | None = int(meta["sot_prev"]) if meta.get("sot_prev", "").isdigit() else None
        self.sot_sequence = _meta_ints(meta, "sot_sequence", path)
        self.name = meta.get("model_type", path.stem)
        self.languages: dict[str, int] = {}
        if self.multilingual:
            ids = _meta_ints(meta, "all_language_tokens", path)
            codes = [c.strip() for c in meta.get("all_language_codes", "").split(",") if c.strip()]
            if len(ids) != len(codes):
                raise ModelError(f"{path}: {len(ids)} language tokens but {len(codes)} language codes")
            self.languages = dict(zip(codes, ids))
        names = [i.name for i in self.decoder.get_inputs()]
        expected = ["tokens", "in_n_layer_self_k_cache", "in_n_layer_self_v_cache", "n_layer_cross_k",
                    "n_layer_cross_v", "offset"]
        if names[:6] != expected:
            raise ModelError(f"{files.decoder}: decoder inputs {names} are not the sherpa-onnx Whisper layout {expected}")
        self._out_names = [o.name for o in self.decoder.get_outputs()][:3]
        self._zeros = np.zeros((self.n_text_layer, 1, self.n_text_ctx, self.n_text_state), np.float32)
        self._encoder: BytePairEncoder | None = None  # built on the first tokenize()

    @classmethod
    def load(cls, directory: str | Path, options: SessionOptions | None = None) -> WhisperModel:
        return cls(WhisperFiles.find(directory), options or SessionOptions())

    def tokenize(self, text: str) -> list[int]:
        """``text`` as Whisper's tokenizer writes it (byte-level BPE; no special tokens)."""
        from voiced.asr.whisper_prompt import BytePairEncoder

        if self._encoder is None:
            self._encoder = BytePairEncoder(self.tokens, self.eot)
        return self._encoder.encode(text)

    def prompt_tokens(self, text: str) -> list[int]:
        """The previous-text prompt for ``text`` (``<|startofprev|>`` and its tokens, at most half the
        text context, its end kept as Whisper keeps it), to go before the sot sequence; [] for no
        text or a model whose export names no ``sot_prev``."""
        if not text.strip() or self.sot_prev is None:
            return []
        return [self.sot_prev, *self.tokenize(" " + text.strip())[-(self.n_text_ctx // 2 - 1):]]

    def initial_tokens(self, language: str | None, task_translate: bool = False) -> list[int]:
        """The sot sequence for ``language`` (multilingual models) followed by no_timestamps."""
        tokens = list(self.sot_sequence)
        if self.multilingual:
            if language is not None:
                if language not in self.languages:
                    raise ModelError(f"{self.files.encoder}: unknown language {language!r} "
                                     f"(known: {', '.join(sorted(self.languages))})")
                tokens[1] = self.languages[language]
            if task_translate:
                tokens[2] = self.translate
        tokens.append(self.no_timestamps)
        return tokens

    def encode(self, mel: np.ndarray, release: bool = False) -> tuple[ort.OrtValue, ort.OrtValue]:
        """Cross-attention K/V for ``mel`` [frames, n_mels] (already normalized and padded).
        ``release``: give back afterwards what ONNX Runtime's arena grew by for it (a long utterance)."""
        import onnxruntime as ort

        x = np.ascontiguousarray(mel.T[np.newaxis], dtype=np.float32)
        with arena_release(release) as run_options:
            outs = self.encoder.run_with_ort_values(
                ["n_layer_cross_k", "n_layer_cross_v"], {"mel": ort.OrtValue.ortvalue_from_numpy(x)}, run_options)
        return outs[0], outs[1]

    def detect_language(self, cross_k: ort.OrtValue, cross_v: ort.OrtValue) -> int:
        """The language token with the highest logit after sot, as sherpa-onnx picks it."""
        logits, _, _ = self.decode_step(np.array([[self.sot]], np.int64), None, None, cross_k, cross_v, 0)
        ids = list(self.languages.values())
        return ids[int(np.argmax(logits[0, -1, ids]))]

    def decode_step(self, tokens: np.ndarray, k_cache, v_cache, cross_k, cross_v, offset: int):
        """One decoder call: ``tokens`` [1, n] after ``offset`` cached ones → (logits, K cache, V cache);
        caches None start empty."""
        import onnxruntime as ort

        if k_cache is None:
            k_cache = v_cache = ort.OrtValue.ortvalue_from_numpy(self._zeros)
        feeds = {
            "tokens": ort.OrtValue.ortvalue_from_numpy(tokens),
            "in_n_layer_self_k_cache": k_cache,
            "in_n_layer_self_v_cache": v_cache,
            "n_layer_cross_k": cross_k,
            "n_layer_cross_v": cross_v,
            "offset": ort.OrtValue.ortvalue_from_numpy(np.array([offset], np.int64)),
        }
        # OrtValues in and out: the caches stay inside ONNX Runtime, no numpy copy per token
        logits, k_cache, v_cache = self.decoder.run_with_ort_values(self._out_names, feeds)
        return logits.numpy(), k_cache, v_cache

    def greedy(self, cross_k: ort.OrtValue, cross_v: ort.OrtValue, num_frames: int,
               initial: list[int]) -> tuple[list[int], list[float]]:
        """Greedy tokens (without the sot sequence and eot) and each one's probability.

        The same steps as sherpa-onnx's OfflineWhisperGreedySearchDecoder: at most 6 tokens per
        second of audio (and half the text context); stop at eot or when the cache is full.
        """
        logits, k_cache, v_cache = self.decode_step(np.array([initial], np.int64), None, None, cross_k, cross_v, 0)
        offset = len(initial)
        row = logits[0, -1]
        limit = min(int(num_frames / 100.0 * TOKENS_PER_SECOND), self.n_text_ctx // 2)
        tokens: list[int] = []
        probs: list[float] = []
        token = int(np.argmax(row))
        for _ in range(limit):
            if token == self.eot:
                break
            tokens.append(token)
            probs.append(_probability(row, token))
            logits, k_cache, v_cache = self.decode_step(np.array([[token]], np.int64), k_cache, v_cache,
                                                  cross_k, cross_v, offset)
            offset += 1
            if offset >= self.n_text_ctx - 1:
                break
            row = logits[0, -1]
            token = int(np.argmax(row))
        return tokens, probs

    def text(self, tokens: list[int]) -> str:
        """The UTF-8 text of ``tokens``; bytes are joined first, as a character may span tokens."""
        return b"".join(self.tokens.get(t, b"") for t in tokens).decode("utf-8", errors="replace")

    def symbols(self, tokens: list[int]) -> list[str]:
        return [self.tokens.get(t, b"").decode("utf-8", errors="replace") for t in tokens]


def _probability(logits: np.ndarray, token: int) -> float:
    top = float(logits[token])
    return float(1.0 / np.exp(logits - top).sum())

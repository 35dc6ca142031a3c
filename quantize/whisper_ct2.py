"""A CTranslate2 Whisper model (``WhisperSpec``) → a transformers ``WhisperForConditionalGeneration``.

CTranslate2 stores Whisper with its own names and fusions (``ctranslate2/specs/whisper_spec.py``
and ``transformer_spec.py``): self-attention q/k/v fused into one ``linear_0`` (rows q, k, v),
cross-attention k/v fused into ``linear_1`` (rows k, v), layer norms as gamma/beta, and a few
scalars describing the architecture. Every variable is mapped or checked; anything left over is
an error, so a layout change cannot slip through as silently missing weights. Whisper's key
projections have no bias: CTranslate2 stores zeros in the fused bias, which is checked too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from quantize.ct2 import Ct2Model
from voiced.errors import ModelError

if TYPE_CHECKING:
    from transformers import WhisperForConditionalGeneration

__all__ = ["WHISPER_SPEC", "WHISPER_SPEC_REVISION", "WhisperDims", "build_transformers_model", "dims_of", "map_variables"]

log = logging.getLogger(__name__)

WHISPER_SPEC, WHISPER_SPEC_REVISION = "WhisperSpec", 3

# Architecture scalars CTranslate2 stores beside the weights, and the values Whisper has.
# (alignment_heads/alignment_layer only serve CTranslate2's word timestamps.)
_EXPECTED_SCALARS = {
    "decoder/alibi": 0, "decoder/pre_norm": 1, "decoder/scale_embeddings": 0,
    "decoder/start_from_zero_embedding": 0,
}
_IGNORED_SCALARS = ("decoder/alignment_heads", "decoder/alignment_layer", "decoder/activation")


@dataclass(frozen=True)
class WhisperDims:
    """Whisper's ``ModelDimensions`` (the names sherpa-onnx's metadata uses)."""

    n_mels: int
    """Mel bins of the front end (80; 128 for large-v3)."""
    n_audio_ctx: int
    """Encoder positions (1500 = 30 s at 50 frames/s after the stride-2 conv)."""
    n_audio_state: int
    """Encoder width."""
    n_audio_head: int
    """Encoder attention heads."""
    n_audio_layer: int
    """Encoder layers."""
    n_vocab: int
    """Token embedding rows (51864 English-only, 51865 multilingual)."""
    n_text_ctx: int
    """Decoder positions (448)."""
    n_text_state: int
    """Decoder width."""
    n_text_head: int
    """Decoder attention heads."""
    n_text_layer: int
    """Decoder layers."""
    n_ffn: int
    """Feed-forward width (the same in encoder and decoder)."""

    @property
    def is_multilingual(self) -> bool:
        # Whisper's own rule (whisper.model.Whisper.is_multilingual).
        return self.n_vocab >= 51865

    def default_name(self) -> str:
        """``tiny.en``, ``base``, … from the sizes, as sherpa-onnx names its files."""
        sizes = {(4, 384): "tiny", (6, 512): "base", (12, 768): "small", (24, 1024): "medium", (32, 1280): "large"}
        size = sizes.get((self.n_audio_layer, self.n_audio_state), f"whisper-{self.n_audio_layer}x{self.n_audio_state}")
        return size if self.is_multilingual else size + ".en"


def _layers(model: Ct2Model, prefix: str) -> int:
    n = 0
    while f"{prefix}/layer_{n}/ffn/linear_0/weight" in model.variables:
        n += 1
    return n


def _scalar(model: Ct2Model, name: str) -> int:
    value = model.resolve(name)
    if value.shape != ():
        raise ModelError(f"{model.path}: {name} should be a scalar, has shape {list(value.shape)}")
    return int(value)


def dims_of(model: Ct2Model) -> WhisperDims:
    """The model's dimensions from its variables' shapes (a WhisperSpec stores no config of its own)."""
    if model.spec != WHISPER_SPEC:
        raise ModelError(f"{model.path}: spec {model.spec!r} is not a Whisper model ({WHISPER_SPEC})")
    if model.revision != WHISPER_SPEC_REVISION:
        raise ModelError(f"{model.path}: WhisperSpec revision {model.revision} is not supported (known: {WHISPER_SPEC_REVISION})")
    conv1 = model.resolve("encoder/conv1/weight")
    audio_pos = model.resolve("encoder/position_encodings/encodings")
    emb = model.resolve("decoder/embeddings/weight")
    text_pos = model.resolve("decoder/position_encodings/encodings")
    return WhisperDims(
        n_mels=conv1.shape[1], n_audio_ctx=audio_pos.shape[0], n_audio_state=audio_pos.shape[1],
        n_audio_head=_scalar(model, "encoder/num_heads"), n_audio_layer=_layers(model, "encoder"),
        n_vocab=emb.shape[0], n_text_ctx=text_pos.shape[0], n_text_state=emb.shape[1],
        n_text_head=_scalar(model, "decoder/num_heads"), n_text_layer=_layers(model, "decoder"),
        n_ffn=model.resolve("encoder/layer_0/ffn/linear_0/weight").shape[0],
    )


class _Mapper:
    """Collects transformers state-dict entries from CTranslate2 variables, remembering what was used."""

    def __init__(self, model: Ct2Model) -> None:
        self.model = model
        self.used: set[str] = set()
        self.state: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        self.used.add(self.model.aliases.get(name, name))
        return self.model.resolve(name).astype(np.float32)

    def linear(self, src: str, dst: str, bias: bool = True) -> None:
        self.state[f"{dst}.weight"] = self.get(f"{src}/weight")
        if bias:
            self.state[f"{dst}.bias"] = self.get(f"{src}/bias")

    def norm(self, src: str, dst: str) -> None:
        self.state[f"{dst}.weight"] = self.get(f"{src}/gamma")
        self.state[f"{dst}.bias"] = self.get(f"{src}/beta")

    def split(self, src: str, dsts: list[str | None], keyless: str) -> None:
        """A fused linear → equal row blocks; ``keyless`` names the block that has no bias in Whisper."""
        weight, bias = self.get(f"{src}/weight"), self.get(f"{src}/bias")
        n = len(dsts)
        if weight.shape[0] % n or bias.shape[0] != weight.shape[0]:
            raise ModelError(f"{self.model.path}: {src} has shape {list(weight.shape)}, not {n} fused blocks")
        rows = weight.shape[0] // n
        for i, dst in enumerate(dsts):
            block = slice(i * rows, (i + 1) * rows)
            self.state[f"{dst}.weight"] = np.ascontiguousarray(weight[block])
            if dst == keyless:
                if np.any(bias[block] != 0):
                    raise ModelError(f"{self.model.path}: {src} has a non-zero bias for {dst}, which Whisper does not have")
            else:
                self.state[f"{dst}.bias"] = np.ascontiguousarray(bias[block])

    def ffn(self, src: str, dst: str) -> None:
        self.norm(f"{src}/layer_norm", f"{dst}.final_layer_norm")
        self.linear(f"{src}/linear_0", f"{dst}.fc1")
        self.linear(f"{src}/linear_1", f"{dst}.fc2")


def map_variables(model: Ct2Model, dims: WhisperDims) -> dict[str, np.ndarray]:
    """Every CTranslate2 variable → transformers state-dict entries (float32); ModelError on leftovers."""
    m = _Mapper(model)
    for name in ("encoder/conv1", "encoder/conv2"):
        m.linear(name, f"model.{name.replace('/', '.')}")
    m.state["model.encoder.embed_positions.weight"] = m.get("encoder/position_encodings/encodings")
    m.norm("encoder/layer_norm", "model.encoder.layer_norm")
    for i in range(dims.n_audio_layer):
        src, dst = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        m.norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
        att = f"{dst}.self_attn"
        m.split(f"{src}/self_attention/linear_0", [f"{att}.q_proj", f"{att}.k_proj", f"{att}.v_proj"], f"{att}.k_proj")
        m.linear(f"{src}/self_attention/linear_1", f"{att}.out_proj")
        m.ffn(f"{src}/ffn", dst)
    m.state["model.decoder.embed_tokens.weight"] = m.get("decoder/embeddings/weight")
    m.state["model.decoder.embed_positions.weight"] = m.get("decoder/position_encodings/encodings")
    m.norm("decoder/layer_norm", "model.decoder.layer_norm")
    for i in range(dims.n_text_layer):
        src, dst = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        m.norm(f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm")
        att = f"{dst}.self_attn"
        m.split(f"{src}/self_attention/linear_0", [f"{att}.q_proj", f"{att}.k_proj", f"{att}.v_proj"], f"{att}.k_proj")
        m.linear(f"{src}/self_attention/linear_1", f"{att}.out_proj")
        m.norm(f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm")
        cross = f"{dst}.encoder_attn"
        m.linear(f"{src}/attention/linear_0", f"{cross}.q_proj")
        m.split(f"{src}/attention/linear_1", [f"{cross}.k_proj", f"{cross}.v_proj"], f"{cross}.k_proj")
        m.linear(f"{src}/attention/linear_2", f"{cross}.out_proj")
        m.ffn(f"{src}/ffn", dst)
    # The output projection is an alias of the token embedding (tied weights), in both formats.
    projection = model.aliases.get("decoder/projection/weight")
    if projection not in (None, "decoder/embeddings/weight"):
        raise ModelError(f"{model.path}: decoder/projection/weight is not tied to the embeddings ({projection})")
    if projection is None and "decoder/projection/weight" in model.variables:
        raise ModelError(f"{model.path}: an untied decoder/projection/weight is not supported")
    m.used.update(("encoder/num_heads", "decoder/num_heads"))
    for name, want in _EXPECTED_SCALARS.items():
        if name in model.variables:
            m.used.add(name)
            if _scalar(model, name) != want:
                raise ModelError(f"{model.path}: {name} = {_scalar(model, name)}, Whisper has {want}")
    m.used.update(n for n in _IGNORED_SCALARS if n in model.variables)
    left = sorted(set(model.variables) - m.used)
    if left:
        raise ModelError(f"{model.path}: {len(left)} variables were not mapped: {', '.join(left[:8])}")
    return m.state


def build_transformers_model(
    state: dict[str, np.ndarray], dims: WhisperDims, special: dict[str, int], suppress: list[int], suppress_begin: list[int],
) -> WhisperForConditionalGeneration:
    """A transformers Whisper model holding exactly ``state`` (every parameter checked for shape)."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=dims.n_vocab, num_mel_bins=dims.n_mels, d_model=dims.n_audio_state,
        encoder_layers=dims.n_audio_layer, encoder_attention_heads=dims.n_audio_head,
        decoder_layers=dims.n_text_layer, decoder_attention_heads=dims.n_text_head,
        encoder_ffn_dim=dims.n_ffn, decoder_ffn_dim=dims.n_ffn,
        max_source_positions=dims.n_audio_ctx, max_target_positions=dims.n_text_ctx,
        activation_function="gelu", scale_embedding=False, tie_word_embeddings=True,
        pad_token_id=special["eot"], bos_token_id=special["eot"], eos_token_id=special["eot"],
        decoder_start_token_id=special["sot"], suppress_tokens=suppress, begin_suppress_tokens=suppress_begin,
    )
    if dims.n_text_state != dims.n_audio_state:
        raise ModelError(f"encoder width {dims.n_audio_state} != decoder width {dims.n_text_state}: not a Whisper model")
    model = WhisperForConditionalGeneration(config).eval()
    params = dict(model.state_dict())
    tensors = {k: torch.from_numpy(v) for k, v in state.items()}
    tensors["proj_out.weight"] = tensors["model.decoder.embed_tokens.weight"]
    missing = sorted(set(params) - set(tensors))
    if missing:
        raise ModelError(f"the transformers model has parameters the CTranslate2 model does not fill: {', '.join(missing[:8])}")
    for key, value in tensors.items():
        if key not in params:
            raise ModelError(f"mapped {key!r}, which the transformers Whisper model does not have")
        if tuple(params[key].shape) != tuple(value.shape):
            raise ModelError(f"{key}: CTranslate2 gives shape {list(value.shape)}, transformers wants {list(params[key].shape)}")
    model.load_state_dict(tensors, strict=True)
    model.tie_weights()
    return model

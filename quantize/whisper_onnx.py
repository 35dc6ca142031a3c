"""A transformers Whisper model → the sherpa-onnx Whisper ONNX pair (encoder with cross K/V, cached decoder).

The contract is the one sherpa-onnx's ``scripts/whisper/export-onnx.py`` writes and its
``offline-whisper-model.cc`` / greedy decoder read:

- encoder: ``mel`` [N, n_mels, T] → ``n_layer_cross_k``, ``n_layer_cross_v``
  [n_text_layer, N, T/2, n_text_state] (any T ≤ 3000: the positional embedding is cut to the
  input, so sherpa-onnx can pass fewer frames than 30 s);
- decoder: ``tokens`` [N, n] int64, ``in_n_layer_self_k_cache`` / ``in_n_layer_self_v_cache``
  [n_text_layer, N, n_text_ctx, n_text_state], ``n_layer_cross_k`` / ``n_layer_cross_v``,
  ``offset`` [1] int64 (position of tokens[:, 0]) → ``logits`` [N, n, n_vocab],
  ``out_n_layer_self_k_cache`` / ``out_n_layer_self_v_cache`` (the input caches with rows
  offset … offset+n written).

The forward passes are written out here (not transformers' own forward) because the graph
must take a cache of fixed size with a runtime ``offset``: positions are gathered and the
cache rows scattered at ``offset + arange(n)``, and attention masks out rows not yet
written, so nothing in the graph has a data-dependent shape.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantize.whisper_ct2 import WhisperDims

if TYPE_CHECKING:
    from transformers import WhisperForConditionalGeneration

__all__ = ["DECODER_INPUTS", "DECODER_OUTPUTS", "ENCODER_INPUTS", "ENCODER_OUTPUTS", "OPSET", "export_onnx", "set_metadata"]

log = logging.getLogger(__name__)

OPSET = 17  # as sherpa-onnx exports Whisper
ENCODER_INPUTS = ["mel"]
ENCODER_OUTPUTS = ["n_layer_cross_k", "n_layer_cross_v"]
DECODER_INPUTS = ["tokens", "in_n_layer_self_k_cache", "in_n_layer_self_v_cache", "n_layer_cross_k", "n_layer_cross_v", "offset"]
DECODER_OUTPUTS = ["logits", "out_n_layer_self_k_cache", "out_n_layer_self_v_cache"]


def _modules() -> Any:
    """The torch modules, defined on first use: importing this file must not import torch."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, mask: torch.Tensor | None) -> torch.Tensor:
        n, tq, d = q.shape
        dh = d // heads
        q = q.view(n, tq, heads, dh).transpose(1, 2)
        k = k.view(n, k.shape[1], heads, dh).transpose(1, 2)
        v = v.view(n, v.shape[1], heads, dh).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(2, 3)) * (dh ** -0.5)
        if mask is not None:
            scores = scores + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return out.transpose(1, 2).reshape(n, tq, d)

    def ffn(layer: Any, x: torch.Tensor) -> torch.Tensor:
        return x + layer.fc2(F.gelu(layer.fc1(layer.final_layer_norm(x))))

    class Encoder(nn.Module):
        def __init__(self, hf: WhisperForConditionalGeneration) -> None:
            super().__init__()
            self.enc, self.dec = hf.model.encoder, hf.model.decoder
            self.heads = hf.config.encoder_attention_heads

        def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = F.gelu(self.enc.conv2(F.gelu(self.enc.conv1(mel)))).permute(0, 2, 1)
            x = x + self.enc.embed_positions.weight[: x.shape[1]]
            for layer in self.enc.layers:
                h = layer.self_attn_layer_norm(x)
                a = layer.self_attn
                x = x + a.out_proj(attention(a.q_proj(h), a.k_proj(h), a.v_proj(h), self.heads, None))
                x = ffn(layer, x)
            x = self.enc.layer_norm(x)
            ks = [layer.encoder_attn.k_proj(x) for layer in self.dec.layers]
            vs = [layer.encoder_attn.v_proj(x) for layer in self.dec.layers]
            return torch.stack(ks), torch.stack(vs)

    class Decoder(nn.Module):
        def __init__(self, hf: WhisperForConditionalGeneration) -> None:
            super().__init__()
            self.dec = hf.model.decoder
            self.heads = hf.config.decoder_attention_heads

        def forward(self, tokens: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    cross_k: torch.Tensor, cross_v: torch.Tensor, offset: torch.Tensor) -> tuple[torch.Tensor, ...]:
            n_batch, n = tokens.shape
            positions = offset[0] + torch.arange(n, dtype=torch.int64)
            # F.embedding without transformers' padding_idx (it only matters for training).
            x = F.embedding(tokens, self.dec.embed_tokens.weight) + self.dec.embed_positions.weight[positions]
            slots = torch.arange(k_cache.shape[2], dtype=torch.int64)
            # Query i (at position offset+i) sees cache rows 0 … offset+i; later rows are unwritten.
            unwritten = slots.unsqueeze(0) > positions.unsqueeze(1)
            mask = torch.zeros_like(unwritten, dtype=x.dtype).masked_fill(unwritten, float("-inf"))
            rows = positions.view(1, n, 1).expand(n_batch, n, k_cache.shape[3])
            new_k, new_v = [], []
            for i, layer in enumerate(self.dec.layers):
                h = layer.self_attn_layer_norm(x)
                a = layer.self_attn
                k = k_cache[i].scatter(1, rows, a.k_proj(h))
                v = v_cache[i].scatter(1, rows, a.v_proj(h))
                new_k.append(k)
                new_v.append(v)
                x = x + a.out_proj(attention(a.q_proj(h), k, v, self.heads, mask))
                c = layer.encoder_attn
                h = layer.encoder_attn_layer_norm(x)
                x = x + c.out_proj(attention(c.q_proj(h), cross_k[i], cross_v[i], self.heads, None))
                x = ffn(layer, x)
            x = self.dec.layer_norm(x)
            # W @ xᵀ with the embedding as the constant operand (as sherpa-onnx's export does):
            # the graph then holds the [n_vocab, d] matrix once, shared with the token lookup.
            logits = torch.matmul(self.dec.embed_tokens.weight, x.permute(0, 2, 1)).permute(0, 2, 1)
            return logits, torch.stack(new_k), torch.stack(new_v)

    return Encoder, Decoder


def set_metadata(path: Path, metadata: dict[str, str]) -> None:
    """Replace ``path``'s metadata_props with ``metadata`` (sherpa-onnx reads the encoder's)."""
    import onnx

    model = onnx.load(str(path))
    del model.metadata_props[:]
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))


def export_onnx(hf: WhisperForConditionalGeneration, dims: WhisperDims, encoder_path: Path, decoder_path: Path,
                metadata: dict[str, str]) -> None:
    """Write the encoder (with ``metadata``) and the decoder ONNX files."""
    import torch

    encoder_cls, decoder_cls = _modules()
    encoder, decoder = encoder_cls(hf).eval(), decoder_cls(hf).eval()
    frames = 2 * dims.n_audio_ctx
    mel = torch.zeros(1, dims.n_mels, frames)
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter (dynamo=False) is deprecated, but torch.export's needs onnxscript,
        # one more dependency for the same graph; the deprecation notice is not the user's concern.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        cross_k, cross_v = encoder(mel)
        torch.onnx.export(
            encoder, (mel,), str(encoder_path), opset_version=OPSET, dynamo=False,
            input_names=ENCODER_INPUTS, output_names=ENCODER_OUTPUTS,
            dynamic_axes={"mel": {0: "n_audio", 2: "T"}, "n_layer_cross_k": {1: "n_audio", 2: "T"},
                          "n_layer_cross_v": {1: "n_audio", 2: "T"}},
        )
        cache = torch.zeros(dims.n_text_layer, 1, dims.n_text_ctx, dims.n_text_state)
        tokens = torch.zeros(1, 3, dtype=torch.int64)
        offset = torch.zeros(1, dtype=torch.int64)
        torch.onnx.export(
            decoder, (tokens, cache, cache.clone(), cross_k, cross_v, offset), str(decoder_path),
            opset_version=OPSET, dynamo=False, input_names=DECODER_INPUTS, output_names=DECODER_OUTPUTS,
            dynamic_axes={"tokens": {0: "n_audio", 1: "n_tokens"}, "in_n_layer_self_k_cache": {1: "n_audio"},
                          "in_n_layer_self_v_cache": {1: "n_audio"}, "n_layer_cross_k": {1: "n_audio", 2: "T"},
                          "n_layer_cross_v": {1: "n_audio", 2: "T"}},
        )
    set_metadata(encoder_path, metadata)

"""Reference Whisper decoders the importer is checked against: transformers, faster-whisper, sherpa-onnx.

All three decode greedily without timestamps from ``[sot] + [no_timestamps]`` (English-only
models). The comparisons take the plain argmax (faster-whisper with ``suppress_blank=False`` and
``suppress_tokens=[]``), because sherpa-onnx suppresses nothing; faster-whisper's default
suppression is also compared, with the same ids suppressed in the transformers decoding.

Front ends: transformers is given faster-whisper's own log-mel (numpy, Whisper's algorithm)
cut and padded to 3000 frames exactly as faster-whisper does for an utterance under 30 s,
so that comparison isolates the weight mapping. sherpa-onnx computes its own features and
pads only 1000 frames after the speech (offline-recognizer-whisper-impl.h).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.reference import read_wav

__all__ = ["faster_whisper_greedy", "sherpa_mel", "sherpa_whisper", "transformers_encode", "transformers_greedy", "whisper_mel"]

SEGMENT_FRAMES = 3000  # 30 s at 100 frames/s


def whisper_mel(samples: np.ndarray) -> np.ndarray:
    """[80, 3000] log-mel as faster-whisper feeds its first (and, under 30 s, only) window."""
    from faster_whisper.feature_extractor import FeatureExtractor

    features = FeatureExtractor(feature_size=80)(samples)
    content = features.shape[-1] - 1
    segment = features[:, : min(SEGMENT_FRAMES, content)]
    return np.pad(segment, ((0, 0), (0, SEGMENT_FRAMES - segment.shape[1])))


def sherpa_mel(samples: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """[n_mels, T] as sherpa-onnx 2.0.1 feeds its Whisper encoder (offline-recognizer-whisper-impl.h):
    kaldi-native-fbank's Whisper fbank, log10 / max-8 / (x+4)/4 over the speech frames only, at
    most 2950 of them, then 1000 zero frames of tail padding, 3000 frames at most."""
    import kaldi_native_fbank as knf

    opts = knf.WhisperFeatureOptions()
    opts.dim = n_mels
    fbank = knf.OnlineWhisperFbank(opts)
    fbank.accept_waveform(16000, samples.tolist())
    fbank.input_finished()
    frames = min(fbank.num_frames_ready, SEGMENT_FRAMES - 50)
    feats = np.stack([fbank.get_frame(i) for i in range(frames)]).astype(np.float32)
    feats = np.log10(np.maximum(feats, 1e-10))
    feats = (np.maximum(feats, feats.max() - 8.0) + 4.0) / 4.0
    total = min(frames + 1000, SEGMENT_FRAMES)
    return np.pad(feats, ((0, total - frames), (0, 0))).T.copy()


def transformers_encode(model: Any, mel: np.ndarray) -> Any:
    """The transformers encoder's output for [n_mels, T]; T may be under 3000 (the positional
    embedding is cut to the input, as sherpa-onnx's export does), which transformers' own
    forward refuses."""
    import torch
    import torch.nn.functional as F

    enc = model.model.encoder
    with torch.no_grad():
        x = F.gelu(enc.conv2(F.gelu(enc.conv1(torch.from_numpy(mel[None].astype(np.float32)))))).permute(0, 2, 1)
        x = x + enc.embed_positions.weight[: x.shape[1]]
        for layer in enc.layers:
            x = layer(x, None)
        return enc.layer_norm(x)


def transformers_greedy(model: Any, mel: np.ndarray, prompt: list[int], eot: int, max_tokens: int = 224,
                        suppress: tuple[list[int], list[int]] | None = None) -> list[int]:
    """Argmax decoding with a transformers Whisper model (encoder once, decoder with its own KV cache).
    ``suppress`` = (always, at the first step): token ids whose logits are set to -inf, as
    CTranslate2 does with faster-whisper's default ``suppress_tokens`` and ``suppress_blank``."""
    import torch

    with torch.no_grad():
        if mel.shape[-1] == SEGMENT_FRAMES:
            encoded = model.model.encoder(torch.from_numpy(mel[None].astype(np.float32))).last_hidden_state
        else:
            encoded = transformers_encode(model, mel)
        ids = torch.tensor([prompt])
        out = model(encoder_outputs=(encoded,), decoder_input_ids=ids, use_cache=True)
        result: list[int] = []
        while len(result) < max_tokens:
            row = out.logits[0, -1].clone()
            if suppress is not None:
                row[suppress[0]] = float("-inf")
                if not result:
                    row[suppress[1]] = float("-inf")
            token = int(row.argmax())
            if token == eot:
                break
            result.append(token)
            out = model(encoder_outputs=(encoded,), decoder_input_ids=torch.tensor([[token]]),
                        past_key_values=out.past_key_values, use_cache=True)
    return result


def faster_whisper_greedy(model: Any, samples: np.ndarray, suppress: bool = False) -> list[int]:
    """faster-whisper's tokens: beam 1, temperature 0, no timestamps, no conditioning, no VAD; its
    default token suppression only with ``suppress``."""
    extra: dict[str, Any] = {} if suppress else {"suppress_blank": False, "suppress_tokens": []}
    segments, _ = model.transcribe(
        samples, beam_size=1, temperature=0.0, without_timestamps=True, condition_on_previous_text=False,
        vad_filter=False, no_speech_threshold=None, compression_ratio_threshold=None, log_prob_threshold=None, **extra,
    )
    return [t for s in segments for t in s.tokens]


def sherpa_whisper(model_dir: Path, name: str, wavs: list[Path], int8: bool = False) -> list[dict[str, Any]]:
    """sherpa-onnx's ``OfflineRecognizer.from_whisper`` (greedy, 1 thread): text and token strings per file."""
    import sherpa_onnx

    suffix = ".int8" if int8 else ""
    recognizer = sherpa_onnx.OfflineRecognizer.from_whisper(
        encoder=str(model_dir / f"{name}-encoder{suffix}.onnx"), decoder=str(model_dir / f"{name}-decoder{suffix}.onnx"),
        tokens=str(model_dir / f"{name}-tokens.txt"), num_threads=1, decoding_method="greedy_search",
    )
    results = []
    for wav in wavs:
        stream = recognizer.create_stream()
        stream.accept_waveform(16000, read_wav(wav))
        recognizer.decode_stream(stream)
        results.append({"text": stream.result.text, "tokens": list(stream.result.tokens)})
    return results

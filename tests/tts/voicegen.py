"""Piper voices in the exact Piper ONNX layouts, with generated weights.

Layouts (rhasspy/piper ``piper_train/export_onnx.py`` and ``export_onnx_streaming.py``):

- whole model ``voice.onnx``: inputs ``input`` [1, N] int64, ``input_lengths`` [1] int64,
  ``scales`` [3] float32 (noise_scale, length_scale, noise_w), ``sid`` [1] int64 when
  multi-speaker; output ``output`` [1, 1, samples]; config ``voice.onnx.json`` beside it.
- streaming pair: ``encoder.onnx`` (same inputs) → ``z`` [1, C, frames], ``y_mask``
  [1, 1, frames] (+ ``g`` [1, gin, 1] multi-speaker); ``decoder.onnx`` ``z``, ``y_mask``
  (+ ``g``) → ``output`` [1, 1, frames * hop]; config ``config.json`` in the same folder.

Kinds:

- ``ids``: a whole model whose audio *encodes its inputs*: a 5-sample header
  [sid/64, noise_scale/4, length_scale/4, noise_w/4, N/2048], then per phoneme id a 1.0
  marker followed by ``samples_per_id - 1`` samples of id/512. The marker makes the peak
  exactly 1.0, so Piper's normalization maps it to 32767 and :func:`decode_id_audio`
  recovers ids, scales, sid and N exactly from the int16 output.
- ``split-ids``: a streaming pair doing the same per frame: each id becomes
  ``frames_per_id`` frames; each frame becomes ``hop`` samples [1.0, id/512, …]. Chunked
  decoding with wrong joins would lose, repeat or shift frames; :func:`decode_split_id_audio`
  would see it.
- ``vits``: a VITS-like network with Piper's compute: text encoder (embedding, multi-head
  attention + conv FFN blocks), duration predictor with ``ceil(exp(logw) * length_scale)``
  frames per phoneme, length regulation, ``z = m + randn * exp(logs) * noise_scale``,
  then the decoder: residual coupling flows with WaveNet layers, and a HiFi-GAN generator
  (Piper's default "resblock 2" config: upsample 8·8·4 = hop 256). ``size`` picks the
  widths: ``medium`` is sized like Piper's medium/low voices (hidden 192, 6 layers,
  4 flows × 4 WN layers, upsample_initial_channel 256), ``tiny`` keeps the decoder's
  receptive field within 10 frames (chunk joins then equal whole-sentence decoding),
  ``wide`` is tiny with 3 × 3 flow layers, so its receptive field (±18 frames) exceeds
  the 10-frame chunk padding as a real voice's does.

CLI: ``python -m tests.tts.voicegen OUT --kind vits --size medium [--split] [--config PATH]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from tests.tts.graphs import VoiceGraph, finish, synth_inputs
from tests.tts.vitsgen import VITS_SIZES, vits_models

__all__ = ["VITS_SIZES", "decode_id_audio", "decode_split_id_audio", "espeak_config", "make_voice",
           "multi_speaker", "read_config"]

HEADER = 5
ID_SCALE = 512.0
LENGTH_SCALE = 2048.0
SID_SCALE = 64.0


# ---------------------------------------------------------------------------- configs


def espeak_config(sample_rate: int = 16000, num_speakers: int = 1) -> dict[str, Any]:
    """A self-made Piper config: espeak-ng en-us, piper-tts's own default id map (256 symbols)."""
    from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

    config: dict[str, Any] = {
        "audio": {"sample_rate": sample_rate, "quality": "test"},
        "espeak": {"voice": "en-us"},
        "inference": {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8},
        "phoneme_type": "espeak",
        "phoneme_map": {},
        "phoneme_id_map": {k: list(v) for k, v in DEFAULT_PHONEME_ID_MAP.items()},
        "num_symbols": 256,
        "num_speakers": 1,
        "speaker_id_map": {},
        "piper_version": "1.0.0",
        "language": {"code": "en_US"},
    }
    return multi_speaker(config, num_speakers) if num_speakers > 1 else config


def read_config(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def multi_speaker(config: Mapping[str, Any], num_speakers: int) -> dict[str, Any]:
    """``config`` turned into a multi-speaker voice's: speakers named ``speaker_<i>``."""
    out = json.loads(json.dumps(config))
    out["num_speakers"] = num_speakers
    out["speaker_id_map"] = {f"speaker_{i}": i for i in range(num_speakers)}
    return out


# ---------------------------------------------------------------------------- ids voices


def id_model(multi: bool = False, samples_per_id: int = 2) -> onnx.ModelProto:
    """Whole model whose audio encodes its inputs (see the module docstring)."""
    g = VoiceGraph(np.random.default_rng(0))
    ids, lengths, scales, sid = synth_inputs(g, multi)
    values = g.op("Div", [g.op("Cast", [ids], to=TensorProto.FLOAT), g.f32(ID_SCALE)])  # [1, N]
    marker = g.op("Add", [g.op("Mul", [values, g.f32(0.0)]), g.f32(1.0)])
    columns = [g.unsqueeze(marker, [2])] + [g.unsqueeze(values, [2])] * (samples_per_id - 1)
    body = g.op("Reshape", [g.op("Concat", columns, axis=2), g.i64([1, 1, -1])])
    speaker = g.op("Div", [g.op("Cast", [sid], to=TensorProto.FLOAT), g.f32(SID_SCALE)]) if sid else g.f32([0.0])
    length = g.op("Div", [g.op("Cast", [lengths], to=TensorProto.FLOAT), g.f32(LENGTH_SCALE)])
    header = g.op("Concat", [speaker, g.op("Div", [scales, g.f32(4.0)]), length], axis=0)
    out = g.op("Concat", [g.op("Reshape", [header, g.i64([1, 1, HEADER])]), body], axis=2)
    g.output(out, "output", [1, 1, "time"])
    return finish(g)


def split_id_models(frames_per_id: int = 3, hop: int = 4) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Streaming pair: id → ``frames_per_id`` frames → ``hop`` samples each [1.0, id/512, …]."""
    g = VoiceGraph(np.random.default_rng(0))
    ids, _, _, _ = synth_inputs(g, False)
    values = g.op("Div", [g.op("Cast", [ids], to=TensorProto.FLOAT), g.f32(ID_SCALE)])  # [1, N]
    ones = g.op("Add", [g.op("Mul", [values, g.f32(0.0)]), g.f32(1.0)])
    per_frame = [g.unsqueeze(values, [2])] * frames_per_id
    z0 = g.op("Reshape", [g.op("Concat", per_frame, axis=2), g.i64([1, 1, -1])])  # [1, 1, N*F]
    z1 = g.op("Reshape", [g.op("Concat", [g.unsqueeze(ones, [2])] * frames_per_id, axis=2), g.i64([1, 1, -1])])
    g.output(g.op("Concat", [z0, z1], axis=1), "z", [1, 2, "time"])
    g.output(z1, "y_mask", [1, 1, "time"])
    encoder = finish(g)

    d = VoiceGraph(np.random.default_rng(1))
    z = d.input("z", [1, 2, "time"])
    y_mask = d.input("y_mask", [1, 1, "time"])
    masked = d.op("Mul", [z, y_mask])
    value, marker = d.slice(masked, 0, 1, 1), d.slice(masked, 1, 2, 1)  # [1, 1, T]
    columns = [d.unsqueeze(marker, [3])] + [d.unsqueeze(value, [3])] * (hop - 1)
    d.output(d.op("Reshape", [d.op("Concat", columns, axis=3), d.i64([1, 1, -1])]), "output", [1, 1, "time"])
    return encoder, finish(d)


@dataclass(frozen=True)
class DecodedIds:
    """What an ``ids`` voice was fed, read back from one sentence of its int16 output."""

    ids: list[int]
    sid: int
    noise_scale: float
    length_scale: float
    noise_w: float


def decode_id_audio(pcm: np.ndarray, samples_per_id: int = 2) -> list[DecodedIds]:
    """Split concatenated int16 output of an ``ids`` voice into sentences and decode each."""
    x = (np.asarray(pcm, dtype=np.float64) / 32767.0).tolist()
    out, pos = [], 0
    while pos < len(x):
        if len(x) - pos < HEADER:
            raise ValueError(f"{len(x) - pos} stray samples at {pos}")
        head = x[pos : pos + HEADER]
        n = round(head[4] * LENGTH_SCALE)
        body = x[pos + HEADER : pos + HEADER + n * samples_per_id]
        markers, values = body[0::samples_per_id], body[1::samples_per_id]
        if len(markers) != n or min(markers, default=1.0) < 0.999:
            raise ValueError(f"sentence at sample {pos}: markers missing")
        out.append(DecodedIds(ids=[round(v * ID_SCALE) for v in values], sid=round(head[0] * SID_SCALE),
                              noise_scale=head[1] * 4, length_scale=head[2] * 4, noise_w=head[3] * 4))
        pos += HEADER + n * samples_per_id
    return out


def decode_split_id_audio(pcm: np.ndarray, frames_per_id: int = 3, hop: int = 4) -> list[int]:
    """ids of one sentence of a ``split-ids`` voice; ValueError if any frame is lost, doubled or torn."""
    x = np.asarray(pcm, dtype=np.float64) / 32767.0
    if len(x) % (hop * frames_per_id):
        raise ValueError(f"{len(x)} samples are not whole ids of {frames_per_id} frames × {hop} samples")
    frames = x.reshape(-1, hop)
    if not np.all(frames[:, 0] > 0.999) or not np.allclose(frames[:, 1:], frames[:, 1:2], atol=1e-4):
        raise ValueError("frame markers missing or frames torn")
    per_id = frames[:, 1].reshape(-1, frames_per_id)
    if not np.allclose(per_id, per_id[:, :1], atol=1e-4):
        raise ValueError("an id's frames disagree: frames lost or repeated")
    return [round(v * ID_SCALE) for v in per_id[:, 0].tolist()]


# ---------------------------------------------------------------------------- writing


def make_voice(out_dir: str | Path, config: Mapping[str, Any], kind: str = "ids", *, size: str = "tiny",
               split: bool = False, seed: int = 0, samples_per_id: int = 2, frames_per_id: int = 3,
               hop: int = 4) -> Path:
    """Write a voice to ``out_dir`` and return what :meth:`PiperVoice.load` takes.

    Whole models: ``out_dir/voice.onnx`` + ``voice.onnx.json`` (returns the .onnx path);
    streaming pairs (``kind="split-ids"``, or ``split=True``): ``encoder.onnx``,
    ``decoder.onnx`` and ``config.json`` (returns ``out_dir``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    multi = int(config.get("num_speakers", 1)) > 1
    if kind == "ids":
        models = [id_model(multi, samples_per_id)]
    elif kind == "split-ids":
        if multi:
            raise ValueError("split-ids voices are single-speaker")
        models = list(split_id_models(frames_per_id, hop))
    elif kind == "vits":
        models = vits_models(size, int(config.get("num_symbols") or 256), int(config.get("num_speakers", 1)), split, seed)
    else:
        raise ValueError(f"kind must be ids, split-ids or vits, got {kind!r}")
    text = json.dumps(config, ensure_ascii=False, indent=2)
    if len(models) == 1:
        onnx.save(models[0], str(out / "voice.onnx"))
        (out / "voice.onnx.json").write_text(text, encoding="utf-8")
        return out / "voice.onnx"
    onnx.save(models[0], str(out / "encoder.onnx"))
    onnx.save(models[1], str(out / "decoder.onnx"))
    (out / "config.json").write_text(text, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a Piper-layout voice with generated weights.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--kind", choices=["ids", "split-ids", "vits"], default="vits")
    parser.add_argument("--size", choices=sorted(VITS_SIZES), default="medium")
    parser.add_argument("--split", action="store_true", help="write encoder.onnx + decoder.onnx (vits)")
    parser.add_argument("--config", type=Path, help="a real .onnx.json to use (default: a self-made espeak config)")
    parser.add_argument("--speakers", type=int, default=1)
    parser.add_argument("--sample-rate", type=int, default=22050, help="for the self-made config")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = read_config(args.config) if args.config else espeak_config(args.sample_rate)
    if args.speakers > 1:
        config = multi_speaker(config, args.speakers)
    print(make_voice(args.out_dir, config, args.kind, size=args.size, split=args.split, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A streaming transducer in the sherpa-onnx / icefall export layout, loaded once and shared.

One directory holds ``encoder.onnx``, ``decoder.onnx``, ``joiner.onnx`` and ``tokens.txt``
(``*.int8.onnx`` preferred when present). The encoder's states are handled generically:
every encoder input after ``x`` is a state whose next value is the output at the same
position after ``encoder_out``; its initial value is zeros of the input's declared shape
with the batch dimension set to 1, cross-checked against the metadata of the model type.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from voiced.asr.tokens import SymbolTable
from voiced.errors import ModelError
from voiced.models.manifest import validated_choice
from voiced.runtime.hugepages import advise_huge_pages
from voiced.runtime.onnx import SessionOptions, create_session

__all__ = ["ModelFiles", "ModelType", "TransducerModel"]

log = logging.getLogger(__name__)

_DTYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


class ModelType(Enum):
    """Encoder families whose streaming states we know."""

    ZIPFORMER2 = "zipformer2"
    LSTM = "lstm"


@dataclass(frozen=True)
class ModelFiles:
    """The files of one transducer directory."""

    encoder: Path
    decoder: Path
    joiner: Path
    tokens: Path

    @classmethod
    def find(cls, directory: str | Path) -> ModelFiles:
        """Pick the files of ``directory``, preferring INT8; ModelError names what is missing."""
        directory = Path(directory)
        if not directory.is_dir():
            if directory.exists():
                raise ModelError(f"ASR model {directory}: a file, not a model directory")
            raise ModelError(f"ASR model directory not found: {directory}")
        tokens = directory / "tokens.txt"
        if not tokens.is_file():
            whisper = sorted(directory.glob("*-encoder*.onnx"))
            if whisper:  # a Whisper export is told apart by its NAME-tokens.txt: say that one is missing
                name = whisper[0].name.split("-encoder")[0]
                raise ModelError(f"ASR model {directory}: {whisper[0].name} is a Whisper export's, but "
                                 f"{name}-tokens.txt is missing")
            raise ModelError(f"ASR model {directory}: tokens.txt is missing")
        picked = [_pick(directory, part) for part in ("encoder", "decoder", "joiner")]
        encoder, decoder, joiner = validated_choice(picked)
        return cls(encoder=encoder, decoder=decoder, joiner=joiner, tokens=tokens)


def _pick(directory: Path, part: str) -> Path:
    # Exact names first; released sherpa models name files like encoder-epoch-99-avg-1.int8.onnx.
    for name in (f"{part}.int8.onnx", f"{part}.onnx"):
        if (directory / name).is_file():
            return directory / name
    for pattern in (f"{part}*.int8.onnx", f"{part}*.onnx"):
        found = sorted(p for p in directory.glob(pattern) if pattern.endswith(".int8.onnx") or ".int8." not in p.name)
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise ModelError(f"ASR model {directory}: several {part} files ({names}); keep one or name it {part}.onnx")
    raise ModelError(f"ASR model {directory}: {part}.onnx (or {part}.int8.onnx) is missing")


@dataclass(frozen=True)
class StateSpec:
    name: str
    shape: tuple[int, ...]
    dtype: type


class TransducerModel:
    """Encoder, decoder and joiner sessions plus the facts the search needs; no per-utterance state."""

    def __init__(self, files: ModelFiles, options: SessionOptions) -> None:
        self.files = files
        self.tokens = SymbolTable.load(files.tokens)
        self.encoder = create_session(files.encoder, options)
        self.decoder = create_session(files.decoder, options)
        self.joiner = create_session(files.joiner, options)
        # The encoder reads all its weights every chunk: huge pages spare it the TLB misses.
        advise_huge_pages(collapse=options.collapse_huge_pages)
        meta = self.encoder.get_modelmeta().custom_metadata_map
        raw_type = meta.get("model_type", "")
        try:
            self.model_type = ModelType(raw_type)
        except ValueError:
            known = ", ".join(t.value for t in ModelType)
            raise ModelError(
                f"{files.encoder}: unsupported model_type {raw_type!r} in the encoder metadata (supported: {known})"
            ) from None
        self.chunk_size = _meta_int(meta, "T", files.encoder)
        """Feature frames the encoder reads per call."""
        self.chunk_shift = _meta_int(meta, "decode_chunk_len", files.encoder)
        """Feature frames the stream advances per call."""
        if not 0 < self.chunk_shift <= self.chunk_size:
            raise ModelError(f"{files.encoder}: need 0 < decode_chunk_len <= T, got {self.chunk_shift}, {self.chunk_size}")
        dmeta = self.decoder.get_modelmeta().custom_metadata_map
        self.context_size = _meta_int(dmeta, "context_size", files.decoder)
        self.vocab_size = _meta_int(dmeta, "vocab_size", files.decoder)
        self._check_io(meta)
        self.encoder_out_name = self.encoder.get_outputs()[0].name
        self.decoder_in_name = self.decoder.get_inputs()[0].name
        self.joiner_in_names = [i.name for i in self.joiner.get_inputs()]
        # Names looked up once: get_inputs()/get_outputs() build new lists of node descriptions per call.
        self._features_name = self.encoder.get_inputs()[0].name
        self._encoder_outputs = [o.name for o in self.encoder.get_outputs()]
        self._decoder_outputs = [self.decoder.get_outputs()[0].name]
        self._joiner_outputs = [self.joiner.get_outputs()[0].name]
        self.joiner_rows_independent = self._joiner_rows_independent()
        """Whether the joiner gives each row of a batch what it gives that row alone, bit for bit,
        so greedy search may score a chunk's frames in one call and stay exact."""

    @classmethod
    def load(cls, directory: str | Path, options: SessionOptions | None = None) -> TransducerModel:
        return cls(ModelFiles.find(directory), options or SessionOptions())

    # -- layout checks -------------------------------------------------------------------

    def _check_io(self, meta: dict[str, str]) -> None:
        enc_in, enc_out = self.encoder.get_inputs(), self.encoder.get_outputs()
        x = enc_in[0]
        if len(x.shape) != 3 or not isinstance(x.shape[2], int):
            raise ModelError(f"{self.files.encoder}: first input must be features [N, T, dim], got {x.name} {x.shape}")
        self.feature_dim = int(x.shape[2])
        if len(enc_out) != len(enc_in):
            raise ModelError(
                f"{self.files.encoder}: {len(enc_in) - 1} state inputs but {len(enc_out) - 1} state outputs;"
                " not a streaming transducer encoder"
            )
        expected = _expected_state_shapes(self.model_type, meta, self.feature_dim, self.files.encoder)
        if len(expected) != len(enc_in) - 1:
            raise ModelError(
                f"{self.files.encoder}: {self.model_type.value} metadata implies {len(expected)} states,"
                f" the graph has {len(enc_in) - 1}"
            )
        specs = []
        for inp, want in zip(enc_in[1:], expected):
            dtype = _DTYPES.get(inp.type)
            if dtype is None:
                raise ModelError(f"{self.files.encoder}: state {inp.name} has unsupported type {inp.type}")
            shape = tuple(_resolve_dim(d, w) for d, w in zip(inp.shape, want)) if len(inp.shape) == len(want) else None
            if shape is None or shape != want:
                raise ModelError(
                    f"{self.files.encoder}: state {inp.name} has shape {inp.shape}, metadata implies {list(want)}"
                )
            specs.append(StateSpec(inp.name, shape, dtype))
        self.states = tuple(specs)
        dec_in = self.decoder.get_inputs()
        if len(dec_in) != 1 or dec_in[0].type != "tensor(int64)" or len(dec_in[0].shape) != 2:
            raise ModelError(f"{self.files.decoder}: expected one int64 input [N, context_size]")
        if len(self.joiner.get_inputs()) != 2:
            raise ModelError(f"{self.files.joiner}: expected inputs encoder_out and decoder_out")

    def _joiner_rows_independent(self) -> bool:
        # Probed, not read from the file name: an FP32 joiner computes rows independently, one
        # quantized dynamically (its activation scale taken over the whole batch) does not. Rows of
        # very different magnitudes make any batch-wide statistic differ from the per-row one.
        enc_in, dec_in = self.joiner.get_inputs()
        dims = (enc_in.shape[-1], dec_in.shape[-1])
        if not all(isinstance(d, int) and d > 0 for d in dims):
            return False
        rng = np.random.default_rng(0)
        scales = np.array([[0.05], [0.5], [2.0], [8.0]], np.float32)
        enc = (rng.standard_normal((len(scales), dims[0])) * scales).astype(np.float32)
        dec = np.repeat(rng.standard_normal((1, dims[1])).astype(np.float32), len(scales), axis=0)
        try:
            batched = self.run_joiner(enc, dec)
            single = np.concatenate([self.run_joiner(enc[i : i + 1], dec[i : i + 1]) for i in range(len(scales))])
        except Exception:  # a joiner fixed to batch 1 (onnxruntime raises several types): frame by frame
            return False
        return batched.shape == single.shape and bool(np.array_equal(batched, single))

    # -- compute ---------------------------------------------------------------------------

    def initial_states(self) -> list[np.ndarray]:
        return [np.zeros(s.shape, dtype=s.dtype) for s in self.states]

    def run_encoder(self, features: np.ndarray, states: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One chunk: features [T, dim] → (encoder_out [frames, dim], next states)."""
        feeds = {self._features_name: features[np.newaxis]}
        feeds.update({s.name: v for s, v in zip(self.states, states)})
        out = self.encoder.run(self._encoder_outputs, feeds)
        return out[0][0], out[1:]

    def run_decoder(self, contexts: np.ndarray) -> np.ndarray:
        """Token contexts int64 [N, context_size] → decoder_out [N, dim]."""
        return self.decoder.run(self._decoder_outputs, {self.decoder_in_name: contexts})[0]

    def run_joiner(self, encoder_out: np.ndarray, decoder_out: np.ndarray) -> np.ndarray:
        """encoder_out [N, dim] and decoder_out [N, dim] → logits [N, vocab]."""
        enc, dec = self.joiner_in_names
        return self.joiner.run(self._joiner_outputs, {enc: encoder_out, dec: decoder_out})[0]


def _meta_int(meta: dict[str, str], key: str, path: Path) -> int:
    try:
        return int(meta[key])
    except KeyError:
        raise ModelError(f"{path}: metadata key {key!r} is missing (not a sherpa-onnx transducer export?)") from None
    except ValueError:
        raise ModelError(f"{path}: metadata {key}={meta[key]!r} is not an integer") from None


def _meta_ints(meta: dict[str, str], key: str, path: Path) -> list[int]:
    if key not in meta:
        raise ModelError(f"{path}: metadata key {key!r} is missing (not a sherpa-onnx transducer export?)")
    try:
        return [int(v) for v in meta[key].split(",")]
    except ValueError:
        raise ModelError(f"{path}: metadata {key}={meta[key]!r} is not a list of integers") from None


def _resolve_dim(declared: object, expected: int) -> int:
    # Symbolic dims (the batch "N", or any dim an exporter left dynamic) take the metadata value.
    return declared if isinstance(declared, int) else expected


def _expected_state_shapes(kind: ModelType, meta: dict[str, str], feature_dim: int, path: Path) -> list[tuple[int, ...]]:
    """Initial state shapes (batch 1) as sherpa-onnx derives them from the metadata."""
    if kind is ModelType.LSTM:
        layers = _meta_int(meta, "num_encoder_layers", path)
        return [(layers, 1, _meta_int(meta, "d_model", path)), (layers, 1, _meta_int(meta, "rnn_hidden_size", path))]
    dims = _meta_ints(meta, "encoder_dims", path)
    stacks = [
        _meta_ints(meta, key, path)
        for key in ("query_head_dims", "value_head_dims", "num_heads", "num_encoder_layers", "cnn_module_kernels", "left_context_len")
    ]
    if any(len(s) != len(dims) for s in stacks):
        raise ModelError(f"{path}: zipformer2 metadata lists have different lengths")
    shapes: list[tuple[int, ...]] = []
    for dim, qdim, vdim, heads, layers, kernel, left in zip(dims, *stacks):
        for _ in range(layers):
            shapes += [
                (left, 1, heads * qdim),
                (1, 1, left, 3 * dim // 4),
                (left, 1, heads * vdim),
                (left, 1, heads * vdim),
                (1, dim, kernel // 2),
                (1, dim, kernel // 2),
            ]
    shapes.append((1, 128, 3, ((feature_dim - 1) // 2 - 1) // 2))
    shapes.append((1,))
    return shapes

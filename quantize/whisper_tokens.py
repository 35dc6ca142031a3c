"""Whisper's vocabulary from a CTranslate2 directory → sherpa-onnx's ``tokens.txt`` and metadata.

A CTranslate2 Whisper directory holds ``vocabulary.txt`` (one token per line, line number =
id, byte-level BPE spelling such as ``Ġthe``) and ``tokenizer.json`` (the Hugging Face
tokenizer, used here to encode the few strings the metadata is computed from).

sherpa-onnx's ``tokens.txt`` for Whisper is tiktoken's rank file as Whisper ships it: one
``<base64 of the token's bytes> <id>`` line per ordinary token (ids below ``<|endoftext|>``);
the special tokens are not listed (sherpa-onnx base64-decodes every symbol and never prints
specials). The metadata keys and their meaning follow sherpa-onnx's ``scripts/whisper/
export-onnx.py``, which reads them from openai-whisper's tokenizer; the same values are derived
here from the CTranslate2 files.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from quantize.whisper_ct2 import WhisperDims
from voiced.errors import ModelError

__all__ = ["WhisperVocabulary", "byte_decoder", "encoder_metadata", "read_vocabulary", "write_tokens"]

# openai-whisper's Tokenizer.non_speech_tokens: symbols whose tokens Whisper's decoding may suppress.
_NON_SPEECH_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    ["<<", ">>", "<<<", ">>>", "--", "---", "-(", "-[", "('", '("', "((", "))", "(((", ")))", "[[", "]]", "{{", "}}", "♪♪", "♪♪♪"]
)
_MISCELLANEOUS = set("♩♪♫♬♭♮♯")


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the printable stand-in character → the byte it encodes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


@dataclass(frozen=True)
class WhisperVocabulary:
    """Ordinary tokens (as bytes) and the special-token ids."""

    tokens: list[bytes]
    """Bytes of every ordinary token; index = id (ids 0 … eot-1)."""
    special: dict[str, int]
    """Special token content (``<|startoftranscript|>`` …) → id."""
    tokenizer_json: Path
    """The tokenizer.json used to encode the strings the metadata needs."""

    def id(self, *names: str) -> int:
        """The id of the first special token present among ``names`` (Whisper renamed a few over time)."""
        for name in names:
            if name in self.special:
                return self.special[name]
        raise ModelError(f"{self.tokenizer_json}: no special token {' or '.join(names)}")

    def encode(self, text: str) -> list[int]:
        return _tokenizer(str(self.tokenizer_json)).encode(text, add_special_tokens=False).ids

    def ids(self) -> dict[str, int]:
        """The named specials sherpa-onnx's metadata and decoders use."""
        return {
            "eot": self.id("<|endoftext|>"), "sot": self.id("<|startoftranscript|>"),
            "translate": self.id("<|translate|>"), "transcribe": self.id("<|transcribe|>"),
            "sot_lm": self.id("<|startoflm|>"), "sot_prev": self.id("<|startofprev|>"),
            "no_speech": self.id("<|nospeech|>", "<|nocaptions|>"), "no_timestamps": self.id("<|notimestamps|>"),
        }

    def languages(self) -> list[tuple[int, str]]:
        """(id, code) of the language tokens: Whisper puts them between sot and translate."""
        ids = self.ids()
        by_id = {v: k for k, v in self.special.items()}
        return [(i, by_id[i][2:-2]) for i in range(ids["sot"] + 1, ids["translate"]) if i in by_id]

    def non_speech_tokens(self) -> list[int]:
        """openai-whisper's ``Tokenizer.non_speech_tokens``, computed the same way from this tokenizer."""
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in _NON_SPEECH_SYMBOLS + sorted(_MISCELLANEOUS):
            for ids in (self.encode(symbol), self.encode(" " + symbol)):
                if len(ids) == 1 or symbol in _MISCELLANEOUS:
                    result.add(ids[0])
        return sorted(result)


@cache
def _tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def read_vocabulary(ct2_dir: Path) -> WhisperVocabulary:
    """Read ``vocabulary.txt`` and ``tokenizer.json``; ModelError naming the file on anything odd."""
    vocab_file, tok_file = ct2_dir / "vocabulary.txt", ct2_dir / "tokenizer.json"
    try:
        lines = vocab_file.read_text(encoding="utf-8").split("\n")
        tok = json.loads(tok_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the Whisper vocabulary in {ct2_dir}: {exc}") from None
    if lines and lines[-1] == "":
        lines.pop()
    special = {t["content"]: int(t["id"]) for t in tok.get("added_tokens", []) if t.get("special", True)}
    eot = special.get("<|endoftext|>")
    if eot is None:
        raise ModelError(f"{tok_file}: no <|endoftext|> token")
    decode = byte_decoder()
    tokens: list[bytes] = []
    for i, text in enumerate(lines[:eot]):
        try:
            tokens.append(bytes(decode[c] for c in text))
        except KeyError as exc:
            raise ModelError(f"{vocab_file}:{i + 1}: {text!r} is not a byte-level BPE token ({exc})") from None
    if len(tokens) != eot:
        raise ModelError(f"{vocab_file}: {len(tokens)} ordinary tokens, expected {eot} (ids below <|endoftext|>)")
    for content, i in special.items():
        if i < len(lines) and lines[i] != content:
            raise ModelError(f"{vocab_file}:{i + 1}: {lines[i]!r}, but tokenizer.json says id {i} is {content!r}")
    return WhisperVocabulary(tokens=tokens, special=special, tokenizer_json=tok_file)


def write_tokens(vocab: WhisperVocabulary, path: Path) -> None:
    """``<base64> <id>`` per ordinary token, as sherpa-onnx's Whisper export writes ``<name>-tokens.txt``."""
    text = "".join(f"{base64.b64encode(t).decode('ascii')} {i}\n" for i, t in enumerate(vocab.tokens))
    path.write_text(text, encoding="utf-8")


def encoder_metadata(name: str, dims: WhisperDims, vocab: WhisperVocabulary, maintainer: str) -> dict[str, str]:
    """Every key sherpa-onnx's export script puts on the encoder, with this model's values."""
    ids = vocab.ids()
    langs = vocab.languages()
    sot_sequence = [ids["sot"]]
    if dims.is_multilingual:
        # openai-whisper's multilingual tokenizer defaults to English transcription: sot, <|en|>,
        # transcribe; sherpa-onnx overwrites index 1 (language) and 2 (task) as configured.
        english = [i for i, code in langs if code == "en"]
        if not english:
            raise ModelError(f"{vocab.tokenizer_json}: a multilingual vocabulary without <|en|>")
        sot_sequence = [ids["sot"], english[0], ids["transcribe"]]
    meta: dict[str, Any] = {
        "model_type": f"whisper-{name}", "version": "1", "maintainer": maintainer,
        "n_mels": dims.n_mels, "n_audio_ctx": dims.n_audio_ctx, "n_audio_state": dims.n_audio_state,
        "n_audio_head": dims.n_audio_head, "n_audio_layer": dims.n_audio_layer, "n_vocab": dims.n_vocab,
        "n_text_ctx": dims.n_text_ctx, "n_text_state": dims.n_text_state, "n_text_head": dims.n_text_head,
        "n_text_layer": dims.n_text_layer,
        "sot_sequence": ",".join(map(str, sot_sequence)),
        "all_language_tokens": ",".join(str(i) for i, _ in langs),
        "all_language_codes": ",".join(c for _, c in langs),
        "sot": ids["sot"], "sot_index": sot_sequence.index(ids["sot"]), "eot": ids["eot"],
        "blank_id": vocab.encode(" ")[0], "is_multilingual": int(dims.is_multilingual),
        "no_speech": ids["no_speech"], "non_speech_tokens": ",".join(map(str, vocab.non_speech_tokens())),
        "transcribe": ids["transcribe"], "translate": ids["translate"], "sot_prev": ids["sot_prev"],
        "sot_lm": ids["sot_lm"], "no_timestamps": ids["no_timestamps"],
    }
    return {k: str(v) for k, v in meta.items()}

"""Text → Whisper tokens, for a prompt: byte-level BPE from the model's own tokens file.

A sherpa-onnx ``*-tokens.txt`` holds each token's bytes and id but no merge list. Whisper's
vocabularies (GPT-2's for English-only models) number their tokens in merge order, so the id is
the merge rank, as in OpenAI's tiktoken files: split the text as GPT-2 does, then merge the
adjacent pair whose joined bytes have the lowest id until none is a token. That is Whisper's own
tokenization (checked against the Hugging Face tokenizer.json in the tests).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["BytePairEncoder", "prompt_text"]

# GPT-2's pre-tokenizer with stdlib ``re`` (letters: [^\W\d_], numbers: \d), for prompt text
_PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


class BytePairEncoder:
    """Encodes text with the ranks of ``tokens`` (id → bytes); special tokens are never produced."""

    def __init__(self, tokens: Mapping[int, bytes], first_special: int) -> None:
        self._ranks = {b: i for i, b in tokens.items() if i < first_special}

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _PIECES.findall(text):
            ids += self._piece(piece.encode("utf-8"))
        return ids

    def _piece(self, data: bytes) -> list[int]:
        if data in self._ranks:
            return [self._ranks[data]]
        parts = [data[i:i + 1] for i in range(len(data))]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                rank = self._ranks.get(parts[i] + parts[i + 1])
                if rank is not None and (best is None or rank < best):
                    best, at = rank, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return [self._ranks[p] for p in parts]


def prompt_text(phrases: list[str]) -> str:
    """The prompt for a home's phrases (names, areas): "Kitchen light, porch light, office." ("" for none)."""
    text = ", ".join(p.strip() for p in phrases if p.strip())
    return f"{text[:1].upper()}{text[1:]}." if text else ""

"""tokens.txt: the symbol table of a transducer, ids to text and phrases to ids."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from voiced.errors import ModelError

__all__ = ["WORD_START", "SymbolTable", "is_punct"]

WORD_START = "\u2581"
"""SentencePiece's word-boundary mark ('▁')."""

UNK = "<unk>"

# Punctuation that sheds the space before it in result text (ASCII, CJK and full-width marks).
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_PUNCT_RANGES = ((0x3001, 0x303F), (0xFF01, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65))


def is_punct(ch: str) -> bool:
    """Whether ``ch`` sheds the space before it in result text."""
    if ch.isascii():
        return ch in _ASCII_PUNCT
    return any(lo <= ord(ch) <= hi for lo, hi in _PUNCT_RANGES)


class SymbolTable:
    """Two-way map between token ids and symbols, read from ``tokens.txt``."""

    def __init__(self, symbols: dict[int, str], scores: dict[str, float] | None = None) -> None:
        self._by_id = symbols
        self._by_sym = {s: i for i, s in symbols.items()}
        # Shown form, as sherpa-onnx shows it: a leading word mark becomes one space.
        self._shown = {i: " " + s[1:] if s.startswith(WORD_START) else s for i, s in symbols.items()}
        self.unk_id = self._by_sym.get(UNK)
        self._scores = scores or {}
        self._max_piece = max((len(s) for s in self._by_sym), default=1)
        letters = "".join(s for s in self._by_sym if not s.startswith("<")).replace(WORD_START, "")
        # librispeech-style models use upper-case pieces; phrases are mapped to the table's case
        self._upper = any(c.isalpha() for c in letters) and letters == letters.upper()

    @classmethod
    def load(cls, path: str | Path) -> SymbolTable:
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise ModelError(f"tokens file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"cannot read tokens file {path}: {exc}") from exc
        symbols: dict[int, str] = {}
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            sym, _, idx = line.rpartition(" ")
            if not sym:  # a line holding only an id is the space symbol
                sym = " "
            try:
                symbols[int(idx)] = sym
            except ValueError:
                raise ModelError(f"{path}:{lineno}: expected 'symbol id', got {line!r}") from None
        if not symbols:
            raise ModelError(f"tokens file is empty: {path}")
        scores = _load_bpe_scores(path.with_name("bpe.vocab"))
        return cls(symbols, scores)

    def __len__(self) -> int:
        return len(self._by_id)

    def __getitem__(self, token_id: int) -> str:
        return self._by_id[token_id]

    def id(self, symbol: str) -> int | None:
        return self._by_sym.get(symbol)

    @property
    def shown(self) -> dict[int, str]:
        """Token id → the symbol as results show it (a leading word mark becomes one space)."""
        return self._shown

    def symbols(self, ids: Sequence[int]) -> list[str]:
        """Symbols of ``ids`` as results show them (word mark as a space, no ``<unk>``), like sherpa-onnx."""
        return [self._shown[i] for i in ids if i != self.unk_id]

    def text(self, ids: Sequence[int]) -> str:
        """Readable text, exactly as sherpa-onnx builds it from the same tokens.

        Pieces are joined; a space before punctuation is dropped, then leading spaces and
        one leading punctuation mark.
        """
        chars: list[str] = []
        for ch in "".join(self.symbols(ids)):
            if chars and chars[-1] == " " and is_punct(ch):
                chars.pop()
            chars.append(ch)
        text = "".join(chars).lstrip(" ")
        return text[1:] if text and is_punct(text[0]) else text

    def encode(self, phrase: str) -> list[int]:
        """Token ids for ``phrase`` (used for hotwords); empty when a word cannot be spelled.

        With a ``bpe.vocab`` beside tokens.txt, each word is segmented by the highest total
        piece score (SentencePiece unigram); otherwise the longest matching piece wins.
        """
        ids: list[int] = []
        for word in phrase.split():
            word = word.upper() if self._upper else word.lower()
            pieces = self._segment(WORD_START + word)
            if pieces is None:
                return []
            ids.extend(pieces)
        return ids

    def _segment(self, word: str) -> list[int] | None:
        n = len(word)
        # best[i]: (score, ids) of the best segmentation of word[:i]
        best: list[tuple[float, list[int]] | None] = [None] * (n + 1)
        best[0] = (0.0, [])
        for end in range(1, n + 1):
            for start in range(max(0, end - self._max_piece), end):
                prev = best[start]
                piece = word[start:end]
                token = self._by_sym.get(piece)
                if prev is None or token is None:
                    continue
                # without scores, fewer (longer) pieces win
                score = prev[0] + self._scores.get(piece, -1.0)
                if best[end] is None or score > best[end][0]:
                    best[end] = (score, prev[1] + [token])
        return best[n][1] if best[n] is not None else None


def _load_bpe_scores(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    scores: dict[str, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        piece, _, score = line.partition("\t")
        try:
            value = float(score)
        except ValueError:
            continue
        if math.isfinite(value):
            scores[piece] = value
    return scores

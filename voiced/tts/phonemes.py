"""Text → phonemes (espeak-ng through piper-tts's bridge, or codepoints) → Piper phoneme ids.

Phonemes come out as Piper itself (piper-tts 1.8, the maintained Piper) makes them: espeak-ng
clauses with their punctuation kept, a space after clause-internal punctuation, language-switch
flags dropped, Unicode NFD codepoints as phonemes, sentences where espeak-ng ends them, and the
voice's vowel clusters merged. espeak-ng is GPL-3.0 and comes with the optional ``voiced[tts]``
extra (the ``piper-tts`` package, which bundles espeak-ng and its data and has abi3 wheels for
CPython 3.9+ on x86_64 and aarch64); without it a Piper voice cannot be loaded.

The id convention is Piper's (``phoneme_ids``, which Piper's training data went through):
BOS ``^``, a pad ``_`` after it and after every phoneme, then EOS ``$``. Phonemes the voice has
no id for are skipped and counted.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from voiced.errors import ModelError
from voiced.tts.config import BOS, EOS, PAD, PhonemeType, VoiceConfig

__all__ = ["CodepointPhonemizer", "EspeakPhonemizer", "Phonemizer", "create_phonemizer", "phonemes_to_ids"]

log = logging.getLogger(__name__)

# espeak-ng keeps global state (data path, voice): one phonemization at a time per process.
_ESPEAK_LOCK = threading.Lock()
_ESPEAK_READY = False

_LANGUAGE_FLAG = re.compile(r"\([^)]+\)")
"""espeak-ng marks words it reads in another language as ``(en)word(fr)``; the marks are not phonemes."""
_CLAUSE_PAUSES = (",", ":", ";")
"""Clause ends inside a sentence: a space follows them, as in Piper's training data."""

TTS_EXTRA = "pip install 'voiced[tts]' (piper-tts: espeak-ng, GPL-3.0)"


def _espeak() -> Any:
    """piper-tts's espeak-ng bridge, initialized once with the espeak-ng data it ships."""
    global _ESPEAK_READY
    try:
        from pathlib import Path

        import piper
        from piper import espeakbridge
    except ImportError as exc:
        raise ModelError(f"speaking needs espeak-ng: {TTS_EXTRA}") from exc
    if not _ESPEAK_READY:
        data = Path(piper.__file__).parent / "espeak-ng-data"
        if not data.is_dir():
            raise ModelError(f"espeak-ng data is missing from the piper-tts package ({data}); reinstall: {TTS_EXTRA}")
        espeakbridge.initialize(str(data))
        _ESPEAK_READY = True
    return espeakbridge


def _merge_clusters(phonemes: list[str], clusters: frozenset[tuple[str, ...]]) -> list[str]:
    """Join runs of phonemes that form one of the voice's vowel clusters (longest first)."""
    longest = max(len(c) for c in clusters)
    out: list[str] = []
    i = 0
    while i < len(phonemes):
        for n in range(min(longest, len(phonemes) - i), 1, -1):
            if tuple(phonemes[i:i + n]) in clusters:
                out.append("".join(phonemes[i:i + n]))
                i += n
                break
        else:
            out.append(phonemes[i])
            i += 1
    return out


class Phonemizer(Protocol):
    """Turns text into sentences of phonemes (one string per phoneme)."""

    def phonemize(self, text: str) -> list[list[str]]: ...


class EspeakPhonemizer:
    """espeak-ng phonemes, split into sentences by espeak-ng itself, exactly as Piper gets them."""

    def __init__(self, voice: str, vowel_clusters: frozenset[tuple[str, ...]] = frozenset()) -> None:
        self.voice = voice
        self.vowel_clusters = vowel_clusters
        with _ESPEAK_LOCK:
            bridge = _espeak()
            try:
                bridge.set_voice(voice)
            except Exception as exc:  # the bridge raises RuntimeError for an unknown voice
                raise ModelError(f"espeak-ng has no voice {voice!r} (espeak.voice in the voice's .onnx.json)") from exc
        self._bridge = bridge

    def phonemize(self, text: str) -> list[list[str]]:
        with _ESPEAK_LOCK:
            self._bridge.set_voice(self.voice)  # another voice may have switched it
            clauses = self._bridge.get_phonemes(text)
        sentences: list[list[str]] = []
        current: list[str] = []
        for phonemes, terminator, end_of_sentence in clauses:
            clause = _LANGUAGE_FLAG.sub("", phonemes) + terminator
            if terminator in _CLAUSE_PAUSES:
                clause += " "
            current.extend(unicodedata.normalize("NFD", clause))
            if end_of_sentence:
                sentences.append(current)
                current = []
        if current:  # text without a final terminator
            sentences.append(current)
        if self.vowel_clusters:
            sentences = [_merge_clusters(s, self.vowel_clusters) for s in sentences]
        return sentences


class CodepointPhonemizer:
    """The text's codepoints (NFD) as phonemes, one sentence (``phoneme_type: text`` voices)."""

    def phonemize(self, text: str) -> list[list[str]]:
        return [list(unicodedata.normalize("NFD", text))]


def create_phonemizer(config: VoiceConfig) -> Phonemizer:
    """The phonemizer the voice was trained with."""
    if config.phoneme_type is PhonemeType.ESPEAK:
        return EspeakPhonemizer(config.espeak_voice, config.vowel_clusters)
    return CodepointPhonemizer()


def phonemes_to_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]],
                    phoneme_map: Mapping[str, Sequence[str]] | None = None,
                    missing: Counter[str] | None = None) -> list[int]:
    """Piper's ids for one sentence: ``^ _ (phoneme _)* $``; unknown phonemes are skipped and counted."""
    ids = [*id_map[BOS], *id_map[PAD]]
    pad = id_map[PAD]
    for phoneme in phonemes:
        for mapped in (phoneme_map.get(phoneme, (phoneme,)) if phoneme_map else (phoneme,)):
            known = id_map.get(mapped)
            if known is None:
                if missing is not None:
                    missing[mapped] += 1
                continue
            ids.extend(known)
            ids.extend(pad)
    ids.extend(id_map[EOS])
    return ids

"""Text → phonemes (piper-phonemize's bundled espeak-ng, or codepoints) → Piper phoneme ids.

The id convention is piper-phonemize's (``phoneme_ids_espeak``, which Piper's training
data went through): BOS ``^``, a pad ``_`` after it and after every phoneme, then EOS
``$``. Phonemes the voice has no id for are skipped and counted, as piper-phonemize does.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from voiced.errors import ModelError
from voiced.tts.config import BOS, EOS, PAD, PhonemeType, VoiceConfig

__all__ = ["CodepointPhonemizer", "EspeakPhonemizer", "Phonemizer", "create_phonemizer", "phonemes_to_ids"]

log = logging.getLogger(__name__)

# espeak-ng keeps global state: one phonemization at a time per process.
_ESPEAK_LOCK = threading.Lock()


class Phonemizer(Protocol):
    """Turns text into sentences of phonemes (one string per phoneme)."""

    def phonemize(self, text: str) -> list[list[str]]: ...


def _piper_phonemize():  # type: ignore[no-untyped-def]
    try:
        import piper_phonemize
    except ImportError as exc:
        raise ModelError("piper-phonemize is not installed (pip install piper-phonemize); "
                         "Piper voices need it to turn text into phonemes") from exc
    return piper_phonemize


class EspeakPhonemizer:
    """espeak-ng phonemes, split into sentences by espeak-ng itself, exactly as Piper gets them."""

    def __init__(self, voice: str) -> None:
        self.voice = voice
        self._pp = _piper_phonemize()

    def phonemize(self, text: str) -> list[list[str]]:
        with _ESPEAK_LOCK:
            if self.voice == "ar":  # Arabic needs its diacritics restored first, as Piper does
                text = self._pp.tashkeel_run(text)
            return [list(s) for s in self._pp.phonemize_espeak(text, self.voice)]


class CodepointPhonemizer:
    """The text's codepoints as phonemes (``phoneme_type: text`` voices)."""

    def __init__(self) -> None:
        self._pp = _piper_phonemize()

    def phonemize(self, text: str) -> list[list[str]]:
        return [list(s) for s in self._pp.phonemize_codepoints(text)]


def create_phonemizer(config: VoiceConfig) -> Phonemizer:
    """The phonemizer the voice was trained with."""
    if config.phoneme_type is PhonemeType.ESPEAK:
        return EspeakPhonemizer(config.espeak_voice)
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

"""piper-tts 1.8 (the maintained Piper) as the reference: its espeak-ng phonemes and its phoneme ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

pytest.importorskip("piper", reason="piper-tts (the reference and voiced's espeak-ng) is not installed: "
                    "pip install -e '.[test]'")

from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP  # noqa: E402
from piper.phoneme_ids import phonemes_to_ids as piper_phonemes_to_ids  # noqa: E402
from piper.phonemize_espeak import EspeakPhonemizer as PiperEspeak  # noqa: E402

__all__ = ["DEFAULT_PHONEME_ID_MAP", "piper_ids", "piper_phonemes"]

_PHONEMIZER: PiperEspeak | None = None


def piper_phonemes(text: str, voice: str = "en-us") -> list[list[str]]:
    """Phonemes per sentence, as piper-tts's espeak phonemizer gives them."""
    global _PHONEMIZER
    if _PHONEMIZER is None:
        _PHONEMIZER = PiperEspeak()
    return _PHONEMIZER.phonemize(voice, text)


def piper_ids(text: str, voice: str = "en-us",
              id_map: Mapping[str, Sequence[int]] | None = None) -> list[list[int]]:
    """What piper-tts feeds its model, sentence by sentence (empty sentences dropped, as it does)."""
    return [piper_phonemes_to_ids(s, id_map) for s in piper_phonemes(text, voice) if s]

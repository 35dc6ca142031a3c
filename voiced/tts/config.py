"""A Piper voice's ``.onnx.json`` config, per-call synthesis options, and how voiced runs a voice.

``VoiceConfig`` reads the keys Piper's own runtime reads (``audio.sample_rate``,
``espeak.voice``, ``inference.{noise_scale,length_scale,noise_w}``, ``phoneme_type``,
``phoneme_id_map``, ``phoneme_map``, ``num_symbols``, ``num_speakers``, ``speaker_id_map``)
with Piper's defaults for the optional ones; any problem is a ModelError naming the file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from voiced.errors import ConfigError, ModelError
from voiced.runtime.onnx import SessionOptions

__all__ = ["BOS", "EOS", "PAD", "PhonemeType", "SynthesisOptions", "VoiceConfig", "VoiceSettings"]

BOS = "^"
"""Piper's beginning-of-sentence phoneme."""
EOS = "$"
"""Piper's end-of-sentence phoneme."""
PAD = "_"
"""Piper's pad phoneme, put after BOS and after every phoneme."""

# Piper's defaults when a config has no "inference" section (piper/config.py).
_DEFAULT_NOISE_SCALE = 0.667
_DEFAULT_LENGTH_SCALE = 1.0
_DEFAULT_NOISE_W = 0.8


class PhonemeType(Enum):
    """How text becomes phonemes (``phoneme_type`` in the config)."""

    ESPEAK = "espeak"
    """espeak-ng IPA phonemes (the espeak-ng that piper-tts bundles: the ``voiced[tts]`` extra)."""
    TEXT = "text"
    """The text's own Unicode codepoints, case-folded."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class VoiceConfig:
    """What a Piper voice's ``.onnx.json`` says about its model."""

    sample_rate: int
    """Output rate of the model, in Hz (``audio.sample_rate``)."""
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    """Phoneme → model input ids; must hold ``^``, ``_`` and ``$``."""
    espeak_voice: str = "en-us"
    """espeak-ng voice for phonemization (``espeak.voice``)."""
    phoneme_type: PhonemeType = PhonemeType.ESPEAK
    """How text becomes phonemes."""
    num_symbols: int | None = None
    """Size of the model's phoneme embedding; every id must be below it."""
    num_speakers: int = 1
    """Speakers of a multi-speaker voice; such a model takes a ``sid`` input."""
    speaker_id_map: Mapping[str, int] = field(default_factory=dict)
    """Speaker name → speaker id."""
    phoneme_map: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Phoneme → phonemes substituted before the id lookup (usually empty)."""
    noise_scale: float = _DEFAULT_NOISE_SCALE
    """Default noise added to the prior (``inference.noise_scale``)."""
    length_scale: float = _DEFAULT_LENGTH_SCALE
    """Default speaking slowness: > 1 is slower (``inference.length_scale``)."""
    noise_w: float = _DEFAULT_NOISE_W
    """Default phoneme-duration noise (``inference.noise_w``)."""
    language: str | None = None
    """``language.code`` (e.g. ``en_US``), informational."""
    vowel_clusters: frozenset[tuple[str, ...]] = frozenset()
    """Runs of phonemes the model takes as one (``vowel_clusters``, e.g. ``["a", "ɪ"]``); usually none."""

    def __post_init__(self) -> None:
        if not _is_int(self.sample_rate) or not 4_000 <= self.sample_rate <= 192_000:
            raise ConfigError("audio.sample_rate", f"must be an integer rate within 4000..192000, got {self.sample_rate!r}")
        if not isinstance(self.espeak_voice, str) or not self.espeak_voice:
            raise ConfigError("espeak.voice", f"must be a non-empty string, got {self.espeak_voice!r}")
        if self.num_symbols is not None and (not _is_int(self.num_symbols) or self.num_symbols < 3):
            raise ConfigError("num_symbols", f"must be an integer >= 3, got {self.num_symbols!r}")
        for phoneme in (BOS, PAD, EOS):
            if phoneme not in self.phoneme_id_map:
                raise ConfigError("phoneme_id_map", f"has no id for {phoneme!r} (Piper needs ^, _ and $)")
        for phoneme, ids in self.phoneme_id_map.items():
            if not ids or not all(_is_int(i) and i >= 0 for i in ids):
                raise ConfigError("phoneme_id_map", f"{phoneme!r} maps to {list(ids)!r}, not a list of ids >= 0")
            if self.num_symbols is not None and max(ids) >= self.num_symbols:
                raise ConfigError("phoneme_id_map", f"{phoneme!r} maps to {max(ids)}, not below num_symbols "
                                  f"{self.num_symbols}")
        if not _is_int(self.num_speakers) or self.num_speakers < 1:
            raise ConfigError("num_speakers", f"must be an integer >= 1, got {self.num_speakers!r}")
        for name, sid in self.speaker_id_map.items():
            if not _is_int(sid) or not 0 <= sid < self.num_speakers:
                raise ConfigError("speaker_id_map", f"{name!r} maps to {sid!r}, not within 0..{self.num_speakers - 1}")
        for key in ("noise_scale", "noise_w"):
            if not _is_number(getattr(self, key)) or getattr(self, key) < 0:
                raise ConfigError(f"inference.{key}", f"must be a number >= 0, got {getattr(self, key)!r}")
        if not _is_number(self.length_scale) or self.length_scale <= 0:
            raise ConfigError("inference.length_scale", f"must be a number > 0, got {self.length_scale!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VoiceConfig:
        """Build from a parsed ``.onnx.json``; raises ConfigError naming the key."""

        def section(key: str) -> Mapping[str, Any]:
            value = data.get(key, {})
            if not isinstance(value, Mapping):
                raise ConfigError(key, f"must be an object, got {type(value).__name__}")
            return value

        audio, espeak, inference, language = section("audio"), section("espeak"), section("inference"), section("language")
        if "sample_rate" not in audio:
            raise ConfigError("audio.sample_rate", "is missing")
        raw_map = data.get("phoneme_id_map")
        if not isinstance(raw_map, Mapping):
            raise ConfigError("phoneme_id_map", "is missing or not an object")
        try:
            phoneme_type = PhonemeType(data.get("phoneme_type", PhonemeType.ESPEAK.value))
        except ValueError:
            known = ", ".join(t.value for t in PhonemeType)
            raise ConfigError("phoneme_type", f"{data.get('phoneme_type')!r} is not supported (known: {known})") from None
        return cls(
            sample_rate=audio["sample_rate"],
            phoneme_id_map=MappingProxyType({str(k): _id_list(k, v) for k, v in raw_map.items()}),
            espeak_voice=espeak.get("voice", "en-us"),
            phoneme_type=phoneme_type,
            num_symbols=data.get("num_symbols"),
            num_speakers=data.get("num_speakers", 1),
            speaker_id_map=MappingProxyType(dict(_mapping(data, "speaker_id_map"))),
            phoneme_map=MappingProxyType({str(k): tuple(str(p) for p in _as_list(v, "phoneme_map"))
                                          for k, v in _mapping(data, "phoneme_map").items()}),
            noise_scale=inference.get("noise_scale", _DEFAULT_NOISE_SCALE),
            length_scale=inference.get("length_scale", _DEFAULT_LENGTH_SCALE),
            noise_w=inference.get("noise_w", _DEFAULT_NOISE_W),
            language=language.get("code"),
            vowel_clusters=frozenset(tuple(str(p) for p in _as_list(c, "vowel_clusters"))
                                     for c in _as_list(data.get("vowel_clusters", []), "vowel_clusters")),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> VoiceConfig:
        """Read a ``.onnx.json``; a missing, unreadable or invalid file raises ModelError naming it."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelError(f"voice config not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"cannot read voice config {path}: {exc}") from None
        except ValueError as exc:
            raise ModelError(f"voice config {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ModelError(f"voice config {path} must hold a JSON object, got {type(data).__name__}")
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise ModelError(f"voice config {path}: {exc}") from None

    def speaker_id(self, speaker: int | str | None) -> int | None:
        """The ``sid`` to feed for ``speaker`` (an id or a name); None for single-speaker voices.

        As in Piper, a multi-speaker voice speaks as speaker 0 when none is asked for, and a
        single-speaker voice ignores the request.
        """
        if self.num_speakers <= 1:
            return None
        if speaker is None:
            return 0
        if isinstance(speaker, str):
            if speaker in self.speaker_id_map:
                return self.speaker_id_map[speaker]
            if speaker.isdigit():
                speaker = int(speaker)
            else:
                names = ", ".join(sorted(self.speaker_id_map)) or "none"
                raise ConfigError("speaker", f"{speaker!r} is not a speaker of this voice (names: {names})")
        if not 0 <= speaker < self.num_speakers:
            raise ConfigError("speaker", f"must be within 0..{self.num_speakers - 1}, got {speaker}")
        return speaker


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be an object, got {type(value).__name__}")
    return value


def _as_list(value: Any, key: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ConfigError(key, f"values must be lists, got {type(value).__name__}")


def _id_list(phoneme: object, value: Any) -> tuple[int, ...]:
    ids = value if isinstance(value, (list, tuple)) else [value]
    if not all(_is_int(i) for i in ids):
        raise ConfigError("phoneme_id_map", f"{phoneme!r} maps to {value!r}, not a list of integer ids")
    return tuple(ids)


@dataclass(frozen=True)
class SynthesisOptions:
    """Per-call settings; None means the voice's default from its config."""

    speaker: int | str | None = None
    """Speaker id or name of a multi-speaker voice (default: speaker 0); ignored by single-speaker voices."""
    length_scale: float | None = None
    """Speaking slowness: 1 is the voice's pace, 2 half as fast."""
    noise_scale: float | None = None
    """Variation of the voice (prior noise)."""
    noise_w: float | None = None
    """Variation of phoneme durations."""
    volume: float = 1.0
    """Gain after Piper's peak normalization: 1 is full scale, 0 silence, above 1 clips."""
    sentence_silence: float = 0.0
    """Seconds of silence after each sentence but the last."""

    def __post_init__(self) -> None:
        speaker = self.speaker
        valid = speaker is None or (isinstance(speaker, str) and speaker != "") or (
            isinstance(speaker, int) and not isinstance(speaker, bool) and speaker >= 0)
        if not valid:
            raise ConfigError("speaker", f"must be an id >= 0 or a name, got {speaker!r}")
        if self.length_scale is not None and (not _is_number(self.length_scale) or not 0.05 <= self.length_scale <= 20):
            raise ConfigError("length_scale", f"must be within 0.05..20, got {self.length_scale!r}")
        for key in ("noise_scale", "noise_w"):
            value = getattr(self, key)
            if value is not None and (not _is_number(value) or not 0 <= value <= 10):
                raise ConfigError(key, f"must be within 0..10, got {value!r}")
        if not _is_number(self.volume) or not 0 <= self.volume <= 4:
            raise ConfigError("volume", f"must be within 0..4, got {self.volume!r}")
        if not _is_number(self.sentence_silence) or not 0 <= self.sentence_silence <= 10:
            raise ConfigError("sentence_silence", f"must be within 0..10 seconds, got {self.sentence_silence!r}")


@dataclass(frozen=True)
class VoiceSettings:
    """How voiced runs a voice: ONNX Runtime threads, streaming chunk sizes, text limits."""

    session: SessionOptions = field(default_factory=SessionOptions)
    """Threads and affinities of the voice's ONNX sessions (one factory for all models)."""
    chunk_frames: int = 45
    """Split voices: spectrogram frames decoded per step (Piper's streaming default, ~0.5 s)."""
    chunk_padding: int = 10
    """Split voices: frames of context decoded on each side of a chunk and trimmed at the joins."""
    max_text_chars: int = 5000
    """Longer text is refused with TextError instead of tying up the speaker."""
    max_sentence_phonemes: int = 400
    """A longer sentence is cut at a clause or word boundary: one model call stays bounded in time and memory."""
    release_after_phonemes: int = 150
    """Whole-model voices: after a sentence of more phonemes than this, ONNX Runtime's arena gives
    back what it grew by for it. Its memory is otherwise kept for good: one reply of long run-on
    sentences (400 phonemes each) took the joe voice from 237 to 527 MB RSS, and two Wyoming
    requests at once to ~1 GB; released, 159 MB after it, for ~10 % more CPU on such sentences only
    (shorter ones run as before). A sentence that starts while another runs is released whatever its
    length: two at a time kept up to 358-370 MB, 254-278 released (``voiced bench tts --memory``;
    42.8-43.8 vs 45.3-46.4 s of CPU, in two runs). 0: never."""
    strip_markup: bool = True
    """Markdown marks, SSML/HTML tags and pictographs (emoji) are dropped before phonemes, the words
    they mark kept (``voiced.tts.markup``): espeak-ng would read "asterisk asterisk", "hash",
    "slightly smiling face", "speak hello break". False: the text is phonemized as it is."""

    def __post_init__(self) -> None:
        if not isinstance(self.session, SessionOptions):
            raise ConfigError("session", f"must be SessionOptions, got {type(self.session).__name__}")
        if not _is_int(self.chunk_frames) or not 1 <= self.chunk_frames <= 10_000:
            raise ConfigError("chunk_frames", f"must be within 1..10000, got {self.chunk_frames!r}")
        if not _is_int(self.chunk_padding) or not 0 <= self.chunk_padding <= 1000:
            raise ConfigError("chunk_padding", f"must be within 0..1000, got {self.chunk_padding!r}")
        if not _is_int(self.max_text_chars) or self.max_text_chars < 1:
            raise ConfigError("max_text_chars", f"must be >= 1, got {self.max_text_chars!r}")
        if not _is_int(self.max_sentence_phonemes) or self.max_sentence_phonemes < 8:
            raise ConfigError("max_sentence_phonemes", f"must be >= 8, got {self.max_sentence_phonemes!r}")
        if not _is_int(self.release_after_phonemes) or self.release_after_phonemes < 0:
            raise ConfigError("release_after_phonemes", f"must be >= 0, got {self.release_after_phonemes!r}")
        if not isinstance(self.strip_markup, bool):
            raise ConfigError("strip_markup", f"must be true or false, got {self.strip_markup!r}")

"""A loaded Piper voice: text → sentences → phoneme ids → audio chunks, streamed.

    voice = PiperVoice.load("en_US-lessac-medium.onnx")      # + .onnx.json beside it
    for chunk in voice.synthesize("Hello. How are you?"):   # one chunk per sentence,
        play(chunk.samples)                                   # or per ~0.5 s (split voices)

The voice is immutable after ``load`` and may be shared between threads; each
``synthesize`` call keeps its own state in its generator. Text is checked and
phonemized when ``synthesize`` is called (so bad text raises there, not at the first
``next``); sentences are synthesized only as the generator is consumed, so the first
sentence can play while the rest is being synthesized.

Loudness: a whole-model voice normalizes every sentence to full scale exactly as piper-tts
1.8 does (divide by the peak, clip, × 32767). A split voice cannot know a sentence's peak
before decoding all of it; it takes its first chunk's peak and keeps it for the whole
sentence (Piper's own streaming script normalizes every chunk on its own,
which makes the level jump at the joins); later peaks above full scale clip.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.errors import ModelError
from voiced.runtime.onnx import RunCancel
from voiced.tts.audio import AudioChunk, audio_peak, float_to_int16
from voiced.tts.config import SynthesisOptions, VoiceConfig, VoiceSettings
from voiced.tts.errors import NothingToSpeak
from voiced.tts.markup import speakable
from voiced.tts.model import ModelInputs, SplitModel, WholeModel, chunk_plan
from voiced.tts.phonemes import Phonemizer, create_phonemizer, phonemes_to_ids
from voiced.tts.sentences import Sentence, check_text, split_long

__all__ = ["PiperVoice", "VoiceFiles"]

log = logging.getLogger(__name__)

ENCODER = "encoder.onnx"
DECODER = "decoder.onnx"


@dataclass(frozen=True)
class VoiceFiles:
    """Where a voice's model(s) and config are."""

    config: Path
    """The ``.onnx.json``."""
    model: Path | None = None
    """The whole model, or None for a split voice."""
    encoder: Path | None = None
    """Split voices: ``encoder.onnx``."""
    decoder: Path | None = None
    """Split voices: ``decoder.onnx``."""

    @classmethod
    def find(cls, path: str | Path, config: str | Path | None = None) -> VoiceFiles:
        """Resolve ``path``: a ``voice.onnx`` (config ``voice.onnx.json`` beside it), or a directory.

        A directory holds ``encoder.onnx`` + ``decoder.onnx`` (Piper's streaming export) or
        exactly one ``*.onnx``, and one config: ``config.json`` or a single ``*.onnx.json``.
        """
        path = Path(path)
        if path.is_dir():
            if (path / ENCODER).is_file() or (path / DECODER).is_file():
                for part in (ENCODER, DECODER):
                    if not (path / part).is_file():
                        raise ModelError(f"split voice {path}: {part} is missing")
                return cls(config=Path(config) if config else _dir_config(path, None),
                           encoder=path / ENCODER, decoder=path / DECODER)
            models = sorted(path.glob("*.onnx"))
            if len(models) != 1:
                found = ", ".join(p.name for p in models) or "none"
                raise ModelError(f"voice directory {path}: need one *.onnx or encoder.onnx + decoder.onnx, "
                                 f"found {found}")
            return cls(config=Path(config) if config else _dir_config(path, models[0]), model=models[0])
        if not path.is_file():
            raise ModelError(f"voice model not found: {path}")
        return cls(config=Path(config) if config else path.with_name(path.name + ".json"), model=path)


def _dir_config(directory: Path, model: Path | None) -> Path:
    candidates = [model.with_name(model.name + ".json")] if model else []
    candidates.append(directory / "config.json")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    found = sorted(directory.glob("*.onnx.json"))
    if len(found) == 1:
        return found[0]
    raise ModelError(f"voice directory {directory}: no config "
                     f"({', '.join(p.name for p in candidates)} or a single *.onnx.json)")


@dataclass(frozen=True)
class _Resolved:
    """Options with the voice's defaults filled in."""

    noise_scale: float
    length_scale: float
    noise_w: float
    sid: int | None
    volume: float
    silence_samples: int


class PiperVoice:
    """A Piper voice loaded once; immutable and shareable between threads."""

    def __init__(self, config: VoiceConfig, files: VoiceFiles, settings: VoiceSettings,
                 model: WholeModel | SplitModel, phonemizer: Phonemizer) -> None:
        self.config = config
        self.files = files
        self.settings = settings
        self._model = model
        self._phonemizer = phonemizer

    @classmethod
    def load(cls, path: str | Path, config: str | Path | None = None,
             settings: VoiceSettings | None = None) -> PiperVoice:
        """Load a voice (see :meth:`VoiceFiles.find`); any problem raises ModelError naming the file."""
        settings = settings or VoiceSettings()
        files = VoiceFiles.find(path, config)
        voice_config = VoiceConfig.from_file(files.config)
        multi = voice_config.num_speakers > 1
        model: WholeModel | SplitModel
        if files.model is not None:
            model = WholeModel.load(files.model, multi, settings.session)
        else:
            assert files.encoder is not None and files.decoder is not None  # find() sets both
            model = SplitModel.load(files.encoder, files.decoder, multi, settings.session)
        voice = cls(voice_config, files, settings, model, create_phonemizer(voice_config))
        log.info("loaded Piper voice %s (%d Hz, %s, %d speaker(s))", files.model or files.encoder,
                 voice_config.sample_rate, "streaming encoder/decoder" if voice.streaming else "whole model",
                 voice_config.num_speakers)
        return voice

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def streaming(self) -> bool:
        """True for a split encoder/decoder voice: sentences come in chunks of ``chunk_frames``."""
        return isinstance(self._model, SplitModel)

    @property
    def model(self) -> WholeModel | SplitModel:
        """The ONNX model(s), for benchmarks and tests that run them directly."""
        return self._model

    # -- text ------------------------------------------------------------------------------

    def phonemize(self, text: str) -> list[list[str]]:
        """Phonemes per sentence, as the voice's phonemizer gives them (no checks, no cutting)."""
        return self._phonemizer.phonemize(text)

    def sentences(self, text: str) -> list[Sentence]:
        """``text`` as the sentences :meth:`synthesize` speaks; TextError if it is empty or too long,
        NothingToSpeak (a TextError) if no sentence of it has anything to say."""
        text = check_text(text, self.settings.max_text_chars)
        if self.settings.strip_markup:
            text = speakable(text)
        missing: Counter[str] = Counter()
        out: list[Sentence] = []
        for phonemes in self.phonemize(text):
            if not any(p.strip() for p in phonemes):
                continue  # espeak-ng gives an empty sentence for text of punctuation only
            for part in split_long(phonemes, self.settings.max_sentence_phonemes):
                ids = phonemes_to_ids(part, self.config.phoneme_id_map, self.config.phoneme_map, missing)
                out.append(Sentence(index=len(out), phonemes=tuple(part), ids=tuple(ids)))
        if missing:
            log.warning("phonemes missing from the voice's id map were skipped: %s",
                        ", ".join(f"{p!r}×{n}" for p, n in missing.most_common()))
        if not out:
            raise NothingToSpeak(f"nothing to speak in {text[:40]!r}")
        return out

    # -- audio -----------------------------------------------------------------------------

    def _resolve(self, options: SynthesisOptions | None) -> _Resolved:
        o = options or SynthesisOptions()
        c = self.config
        return _Resolved(
            noise_scale=c.noise_scale if o.noise_scale is None else o.noise_scale,
            length_scale=c.length_scale if o.length_scale is None else o.length_scale,
            noise_w=c.noise_w if o.noise_w is None else o.noise_w,
            sid=c.speaker_id(o.speaker),
            volume=o.volume,
            silence_samples=round(o.sentence_silence * c.sample_rate),
        )

    def inputs(self, ids: list[int] | tuple[int, ...], options: SynthesisOptions | None = None) -> ModelInputs:
        """The model inputs for one sentence's ids."""
        r = self._resolve(options)
        return ModelInputs.build(ids, r.noise_scale, r.length_scale, r.noise_w, r.sid)

    def synthesize(self, text: str, options: SynthesisOptions | None = None,
                   cancel: RunCancel | None = None) -> Iterator[AudioChunk]:
        """Audio of ``text``, sentence by sentence (split voices: chunk by chunk), as it is made.

        Raises TextError (empty, too long, nothing speakable) or ConfigError (options)
        here, before any synthesis. ``cancel``: once cancelled, the model run under way stops
        and the iterator raises SynthesisCancelled.
        """
        resolved = self._resolve(options)  # bad options fail now, not at the first next()
        return self._chunks(self.sentences(text), resolved, cancel)

    def synthesize_ids(self, ids: list[int] | tuple[int, ...], options: SynthesisOptions | None = None) -> np.ndarray:
        """Float audio of one sentence's ids in one go (split voices: the whole sentence in one decoder call)."""
        inputs = self.inputs(ids, options)
        if isinstance(self._model, SplitModel):
            return self._model.decode(self._model.encode(inputs))
        return self._model.run(inputs)

    def _chunks(self, sentences: list[Sentence], r: _Resolved, cancel: RunCancel | None) -> Iterator[AudioChunk]:
        model = self._model
        for sentence in sentences:
            inputs = ModelInputs.build(sentence.ids, r.noise_scale, r.length_scale, r.noise_w, r.sid)
            silence = r.silence_samples if sentence.index < len(sentences) - 1 else 0
            if isinstance(model, WholeModel):
                limit = self.settings.release_after_phonemes
                audio = model.run(inputs, release=0 < limit < len(sentence.phonemes), release_if_shared=limit > 0,
                                  cancel=cancel)
                yield self._chunk(float_to_int16(audio, volume=r.volume), sentence, True, silence)
                continue
            encoded = model.encode(inputs, cancel)
            plan = chunk_plan(encoded.frames, self.settings.chunk_frames, self.settings.chunk_padding)
            peak: float | None = None
            for i, span in enumerate(plan):
                audio = model.decode_span(encoded, span, cancel)
                if peak is None:
                    peak = audio_peak(audio)
                final = i == len(plan) - 1
                yield self._chunk(float_to_int16(audio, peak=peak, volume=r.volume), sentence, final,
                                  silence if final else 0)

    def _chunk(self, pcm: np.ndarray, sentence: Sentence, final: bool, silence: int) -> AudioChunk:
        if silence:
            pcm = np.concatenate([pcm, np.zeros(silence, np.int16)])
        return AudioChunk(pcm, self.config.sample_rate, sentence=sentence.index, final=final)

"""Whisper as a voiced recognizer: the same Recognizer/Stream surface as the transducer.

    recognizer = WhisperRecognizer.load("models/whisper-tiny.en")
    stream = recognizer.create_stream()
    stream.accept_waveform(samples)          # audio in ...
    result = recognizer.finish(stream)       # ... decoded once, at the utterance's end

Whisper reads whole utterances, so ``is_ready`` stays False until the endpoint (no partials
unless ``partial_every_s`` asks for a re-decode of the growing utterance). The front end and
padding are sherpa-onnx's: Whisper log-mel (kaldi-native-fbank's bits, computed in numpy where they
are the same: ``voiced.asr.whisper_fbank``), log10 clamped to 8 below the
maximum, (x + 4) / 4, then ``tail_padding_frames`` zero frames, at most 30 s in all; a stream
computes them while the audio comes (``voiced.asr.whisper_features``), so an utterance's end waits for
its last frame only, not for the whole utterance's. Longer
utterances are cut at their quietest moment and decoded piece by piece. The features are bit for bit
sherpa-onnx 2.0.1's with kaldi-native-fbank 1.22 (pinned below 1.23, whose Whisper fbank differs in
the last bits): INT8 encoders quantize their activations on the fly, so a last-bit difference in the
input is enough to change a token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

import numpy as np

from voiced.asr.result import RecognitionResult
from voiced.asr.whisper_features import HOP, LogMelFrames, log10_mel, log_mel, normalize
from voiced.asr.whisper_model import WhisperModel
from voiced.asr.whisper_templates import Choice, TemplateDecoding, decode_with_templates
from voiced.audio.dereverb import DereverbConfig, dereverberate
from voiced.audio.frames import SAMPLE_RATE
from voiced.errors import ConfigError
from voiced.runtime.onnx import SessionOptions
from voiced.sentencespace import SentenceSpace

__all__ = ["WhisperConfig", "WhisperRecognizer", "WhisperStream", "encoder_input", "log_mel"]

log = logging.getLogger(__name__)

MAX_FRAMES = 3000
"""Whisper's 30 s window, in feature frames."""
MAX_SPEECH_FRAMES = MAX_FRAMES - 50
"""sherpa-onnx keeps at least 50 frames of padding after the speech."""


@dataclass(frozen=True)
class WhisperConfig:
    """How a Whisper model is decoded."""

    language: str | None = None
    """Language code for multilingual models ("de", "fr" …); None detects it. English-only models ignore it."""
    translate: bool = False
    """Multilingual models: translate to English instead of transcribing."""
    tail_padding_frames: int = 1000
    """Zero frames after the speech so Whisper finds its end (sherpa-onnx's default 1000; capped at 30 s)."""
    partial_every_s: float = 0.0
    """Re-decode the growing utterance this often for partial results; 0 = final results only.
    Each partial costs a whole decode of what was said so far."""
    decode_at_pause: bool = True
    """Honour ``decode_at_pause`` (the listener asks at the first silent window of a pause, only
    with intent-aware endpointing): a whole command is then known while its short silence runs,
    partials on or off. Costs one decode of what was said so far per pause."""
    threads: int = 1
    """ONNX Runtime intra-op threads per session."""
    dereverb: DereverbConfig | None = None
    """Remove late room reverberation from each utterance before its features (``dereverberate``,
    WPE); None: the audio as heard, features bit for bit sherpa-onnx's."""
    release_after_s: float = 10.0
    """After encoding more speech than this (seconds), ONNX Runtime's arena gives back what it grew
    by for it: otherwise a long utterance keeps its memory for good (tiny.en INT8, a 44-s reading
    in pieces of ~30 and ~14 s: +112 MB RSS kept, +18 MB released), for ~2 % more CPU on such
    utterances only. 0: never."""

    def __post_init__(self) -> None:
        if self.tail_padding_frames < 0:
            raise ConfigError("asr.whisper_tail_padding_frames", f"must be >= 0, got {self.tail_padding_frames}")
        if self.partial_every_s < 0:
            raise ConfigError("asr.partial_every_s", f"must be >= 0, got {self.partial_every_s}")
        if self.threads < 1:
            raise ConfigError("asr.threads", f"must be at least 1, got {self.threads}")
        if self.release_after_s < 0:
            raise ConfigError("release_after_s", f"must be >= 0, got {self.release_after_s}")


def encoder_input(mel: np.ndarray, tail_padding_frames: int) -> tuple[np.ndarray, int]:
    """What the encoder is fed for one piece's normalized ``mel`` [frames, n_mels], as sherpa-onnx feeds it:
    at most MAX_SPEECH_FRAMES of speech, then zero frames, MAX_FRAMES in all; and the speech frames kept."""
    num_frames = min(len(mel), MAX_SPEECH_FRAMES)
    frames = min(num_frames + tail_padding_frames, MAX_FRAMES)
    padded = np.zeros((frames, mel.shape[1]), np.float32)
    padded[:num_frames] = mel[:num_frames]
    return padded, num_frames


class _Decode(Enum):
    """How one piece is decoded."""

    FREE = "free"
    TEMPLATES = "templates"
    """Template-aware, judged by ``TemplateDecoding.margin`` (final results)."""
    AT_PAUSE = "at_pause"
    """Template-aware only when the free transcript is no command nor the beginning of one,
    judged by ``TemplateDecoding.pause_margin``."""


class WhisperStream:
    """One utterance's audio; Whisper decodes it whole at the end."""

    def __init__(self, recognizer: WhisperRecognizer) -> None:
        self._recognizer = recognizer
        self.reset()

    def reset(self) -> None:
        """Forget everything: ready for a new utterance."""
        self._chunks: list[np.ndarray] = []
        # features as the audio comes (not when it is dereverberated: that needs the whole utterance)
        self._mel = None if self._recognizer.config.dereverb is not None else LogMelFrames(self._recognizer.model.n_mels)
        self.num_samples = 0
        self.finished = False
        self.decoded_samples = 0  # audio covered by the last (partial) decode
        self._result = RecognitionResult("", (), (), (), 0.0)

    def accept_waveform(self, samples: np.ndarray) -> None:
        """Add mono float32 samples at 16 kHz in [-1, 1]."""
        if self.finished:
            raise RuntimeError("accept_waveform after input_finished; call reset() first")
        if len(samples):
            self._chunks.append(np.asarray(samples, np.float32))
            self.num_samples += len(samples)
            if self._mel is not None:
                self._mel.accept_waveform(self._chunks[-1])

    def input_finished(self) -> None:
        self.finished = True
        if self._mel is not None:
            self._mel.input_finished()

    def samples(self) -> np.ndarray:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, np.float32)

    def log10_mel(self) -> np.ndarray | None:
        """``log10_mel`` of everything heard so far, mostly computed already; None when dereverberating."""
        return None if self._mel is None else self._mel.frames(self.samples())

    @property
    def result(self) -> RecognitionResult:
        return self._result


class WhisperRecognizer:
    """A loaded Whisper model; create one stream per concurrent utterance."""

    def __init__(self, model: WhisperModel, config: WhisperConfig) -> None:
        self.model = model
        self.config = config
        # a language a multilingual model lacks: said at load, not at every utterance
        model.initial_tokens(config.language, config.translate)
        if config.language not in (None, "en") and not model.multilingual:
            log.warning("%s is English-only: language %r does nothing (a multilingual Whisper model uses it)",
                        model.files.encoder, config.language)
        self._partial_samples = int(config.partial_every_s * SAMPLE_RATE)
        self._commands: SentenceSpace | None = None
        self._template_decoding = TemplateDecoding()
        self._prompt: list[int] = []

    def use_prompt(self, text: str) -> None:
        """Decode every utterance as if ``text`` had been said before it (Whisper's previous-text
        prompt): the home's names and areas make a similar-sounding word less likely. "" for none.
        Costs the prompt's tokens in one decoder call per utterance (and per scoring call)."""
        self._prompt = self.model.prompt_tokens(text)
        if text.strip() and not self._prompt:
            log.warning("%s: the export names no sot_prev token; decoding without a prompt", self.model.files.encoder)

    def use_templates(self, commands: SentenceSpace | None, settings: TemplateDecoding | None = None) -> None:
        """Decode final results template-aware over ``commands`` (None: free decoding only).
        Partial results stay free (they are re-decoded anyway), but for the decode at a pause
        (``decode_at_pause``), which may end the utterance."""
        self._commands = commands
        self._template_decoding = settings or TemplateDecoding()

    @classmethod
    def load(cls, directory: str | Path, config: WhisperConfig | None = None,
             session: SessionOptions | None = None) -> WhisperRecognizer:
        """``session`` (threads and their cores, from a hardware profile) overrides ``config.threads``."""
        config = config or WhisperConfig()
        return cls(WhisperModel.load(directory, session or SessionOptions(threads=config.threads)), config)

    def create_stream(self, hotwords: object = None) -> WhisperStream:
        """A new stream (``hotwords`` is accepted for the common surface and not used)."""
        return WhisperStream(self)

    def is_ready(self, stream: WhisperStream) -> bool:
        """True only when partials are on and enough new audio came since the last decode."""
        return (self._partial_samples > 0 and not stream.finished
                and stream.num_samples - stream.decoded_samples >= self._partial_samples)

    def decode(self, stream: WhisperStream) -> None:
        """A partial result: decode everything heard so far."""
        self._decode(stream, _Decode.FREE)

    def _decode(self, stream: WhisperStream, how: _Decode) -> None:
        stream.decoded_samples = stream.num_samples
        stream._result = self._recognize(stream.samples(), how, stream.log10_mel())

    def decode_all(self, stream: WhisperStream) -> None:
        if self.is_ready(stream):
            self.decode(stream)

    def decode_at_pause(self, stream: WhisperStream) -> None:
        """Speech paused: decode what was said now rather than at the next ``partial_every_s``
        mark (or at the end), so a whole command is known while its trailing silence runs. With
        templates in use, a transcript that is no command nor the beginning of one is decoded
        template-aware too, judged by ``TemplateDecoding.pause_margin``: a misheard command is
        then known as one at the pause, not only at the end of the full silence."""
        if self.config.decode_at_pause and not stream.finished and stream.num_samples > stream.decoded_samples:
            self._decode(stream, _Decode.AT_PAUSE if self._commands is not None else _Decode.FREE)

    def finish(self, stream: WhisperStream) -> RecognitionResult:
        """End the utterance and decode it (template-aware when templates are in use)."""
        stream.input_finished()
        self._decode(stream, _Decode.TEMPLATES)
        return stream._result

    def result(self, stream: WhisperStream) -> RecognitionResult:
        return stream.result

    # -- decoding ----------------------------------------------------------------------------

    def recognize(self, samples: np.ndarray, templates: bool = False,
                  log10_energies: np.ndarray | None = None) -> RecognitionResult:
        """The transcript of one utterance of any length (pieces of < 30 s cut at quiet moments).

        ``templates``: a single piece may be decoded template-aware (see ``use_templates``).
        ``log10_energies``: ``log10_mel`` of ``samples`` when already known (a stream's, as heard)."""
        return self._recognize(samples, _Decode.TEMPLATES if templates else _Decode.FREE, log10_energies)

    def _recognize(self, samples: np.ndarray, how: _Decode, log10_energies: np.ndarray | None) -> RecognitionResult:
        if log10_energies is None:
            samples = self._heard(samples)
            log10_energies = log10_mel(samples, self.model.n_mels) if len(samples) else np.zeros(
                (0, self.model.n_mels), np.float32)
        mel = normalize(log10_energies)
        if len(mel) == 0:
            return RecognitionResult("", (), (), (), 0.0)
        ids: list[int] = []
        probs: list[float] = []
        pieces = _pieces(samples, len(mel))
        from_templates = False
        for begin, end in pieces:
            # each piece is normalized on its own, as sherpa-onnx normalizes each utterance
            piece = mel[begin:end] if begin == 0 and end == len(mel) else log_mel(
                samples[begin * HOP:end * HOP], self.model.n_mels)
            tokens, p, from_templates = self._decode_piece(piece, how if len(pieces) == 1 else _Decode.FREE)
            ids += tokens
            probs += p
        return RecognitionResult(
            text=self.model.text(ids).strip(),
            tokens=tuple(self.model.symbols(ids)),
            token_ids=tuple(ids),
            timestamps=(),  # Whisper decoded without timestamps gives no token times
            confidence=float(np.mean(probs)) if probs else 0.0,
            from_templates=from_templates,
        )

    def _decode_piece(self, mel: np.ndarray, how: _Decode) -> tuple[list[int], list[float], bool]:
        if how is _Decode.FREE or self._commands is None:
            tokens, probs = self._free(mel)[0]
            return tokens, probs, False
        if how is _Decode.TEMPLATES:
            choice = self._choose(mel)
            return choice.tokens, choice.probs, choice.from_templates
        free, encoded = self._free(mel)
        if self._commands.only_begun(self.model.text(free[0])):
            return free[0], free[1], False  # a command may be under way: the speaker may go on after the pause
        settings = self._template_decoding
        # no word-edit alignment at a pause: on development commands it found no sentence the search
        # missed, and on read speech it was 40 % of the pause's cost (see TemplateDecoding.pause_margin)
        at_pause = replace(settings, margin=min(settings.margin, settings.pause_margin), align=None)
        choice = decode_with_templates(self.model, self._commands, at_pause, *encoded, free)
        return choice.tokens, choice.probs, choice.from_templates

    def choose(self, samples: np.ndarray) -> Choice:
        """Both transcripts of one utterance (< 30 s) with their scores, for measuring the margin;
        needs ``use_templates``."""
        return self._choose(log_mel(self._heard(samples), self.model.n_mels))

    def _heard(self, samples: np.ndarray) -> np.ndarray:
        """What is decoded of ``samples``: dereverberated when the config asks for it."""
        if self.config.dereverb is None or not len(samples):
            return samples
        return dereverberate(samples, self.config.dereverb)

    def _choose(self, mel: np.ndarray) -> Choice:
        if self._commands is None:
            raise ValueError("template-aware decoding needs use_templates(...) first")
        free, encoded = self._free(mel)
        return decode_with_templates(self.model, self._commands, self._template_decoding, *encoded, free)

    def _free(self, mel: np.ndarray) -> tuple[tuple[list[int], list[float]], tuple]:
        """Greedy tokens of one piece, and what a second decoding of it needs (cross K/V, frames, sot)."""
        model = self.model
        padded, num_frames = encoder_input(mel, self.config.tail_padding_frames)
        release = 0 < self.config.release_after_s * SAMPLE_RATE / HOP < num_frames
        cross_k, cross_v = model.encode(padded, release)
        language = self.config.language
        initial = model.initial_tokens(language, self.config.translate)
        if model.multilingual and language is None:
            initial[1] = model.detect_language(cross_k, cross_v)
        initial = [*self._prompt, *initial]
        return model.greedy(cross_k, cross_v, num_frames, initial), (cross_k, cross_v, num_frames, initial)


def _pieces(samples: np.ndarray, frames: int) -> list[tuple[int, int]]:
    """[begin, end) frame ranges of at most MAX_SPEECH_FRAMES, each cut at the quietest 100 ms."""
    pieces: list[tuple[int, int]] = []
    begin = 0
    while frames - begin > MAX_SPEECH_FRAMES:
        # search the last third of the allowed span for the 10-frame stretch with the least energy
        lo, hi = begin + MAX_SPEECH_FRAMES * 2 // 3, begin + MAX_SPEECH_FRAMES
        energy = np.square(samples[lo * HOP:hi * HOP]).reshape(-1, HOP).sum(axis=1)
        window = np.convolve(energy, np.ones(10), mode="valid")
        cut = lo + int(np.argmin(window)) + 5
        pieces.append((begin, cut))
        begin = cut
    pieces.append((begin, frames))
    return pieces

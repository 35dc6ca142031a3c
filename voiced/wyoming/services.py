"""The work behind Wyoming requests, free of asyncio: audio in any format, transcription, wake words, text.

Each object here belongs to one connection and is used from one worker thread at a time;
the models it runs are the core's (immutable, shared): a stream per request, like the daemon's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from voiced.audio.frames import Window, Windower
from voiced.audio.resample import StreamingResampler, to_mono
from voiced.core.models import Models
from voiced.errors import AudioError
from voiced.listener import ListenEventType, Listener
from voiced.wake import Detection, WakeStream
from voiced.wyoming.info import wake_key

__all__ = ["AsrRequest", "AudioFormat", "AudioInput", "SentenceBuffer", "WakeRequest"]

SAMPLE_RATE = 16_000
_WIDTHS = {1: np.uint8, 2: np.int16, 4: np.int32}
_MAX_RATE = 384_000
_MAX_CHANNELS = 16


@dataclass(frozen=True)
class AudioFormat:
    rate: int
    width: int
    channels: int

    @classmethod
    def from_data(cls, data: dict[str, object]) -> AudioFormat:
        """From an audio-start/audio-chunk's data; AudioError names what is wrong."""
        rate, width, channels = data.get("rate"), data.get("width"), data.get("channels")
        for key, value, ok in (("rate", rate, lambda v: 1 <= v <= _MAX_RATE),
                               ("width", width, lambda v: v in _WIDTHS),
                               ("channels", channels, lambda v: 1 <= v <= _MAX_CHANNELS)):
            if not isinstance(value, int) or isinstance(value, bool) or not ok(value):
                raise AudioError(f"audio {key} {value!r} is not supported")
        return cls(int(rate), int(width), int(channels))  # type: ignore[arg-type]


class AudioInput:
    """Wyoming PCM (any rate, 8/16/32-bit, interleaved channels) → 16 kHz float32 mono."""

    def __init__(self, fmt: AudioFormat, max_seconds: float | None) -> None:
        self.format = fmt
        self._resampler = StreamingResampler(fmt.rate, SAMPLE_RATE)
        self._frame_bytes = fmt.width * fmt.channels
        self._left = b""  # a frame split across chunks
        self.max_samples = None if max_seconds is None else int(max_seconds * SAMPLE_RATE)
        """None: no limit (audio that is not kept)."""
        self.samples = 0
        """16 kHz samples produced so far."""
        self.over_limit = False

    def convert(self, payload: bytes, last: bool = False) -> np.ndarray:
        data = self._left + payload
        usable = len(data) - len(data) % self._frame_bytes
        self._left = data[usable:]
        raw = np.frombuffer(data[:usable], _WIDTHS[self.format.width])
        if self.format.width == 1:
            samples = (raw.astype(np.float32) - 128.0) / 128.0
        else:
            samples = raw.astype(np.float32) / float(2 ** (8 * self.format.width - 1))
        if self.format.channels > 1:
            samples = to_mono(samples.reshape(-1, self.format.channels))
        out = self._resampler.process(samples, last=last)
        room = len(out) if self.max_samples is None else self.max_samples - self.samples
        if len(out) > room:
            out, self.over_limit = out[:max(room, 0)], True
        self.samples += len(out)
        return out


class AsrRequest:
    """One ``transcribe``: the whole audio is one utterance (Home Assistant runs its own VAD), as
    ``voiced transcribe --vad none`` does; partial results become transcript chunks."""

    def __init__(self, models: Models, fmt: AudioFormat, max_seconds: float) -> None:
        if models.recognizer is None:
            raise AudioError("no speech recognizer is configured ([asr] model)")
        self.input = AudioInput(fmt, max_seconds)
        self._listener = Listener(models.recognizer, None, models.config.audio.window_frames)
        self._windower = Windower(models.config.audio.window_frames)
        self._end = 0.0
        self._text = ""

    def feed(self, payload: bytes) -> list[str]:
        """Audio in; the partial transcripts it produced (each a longer or changed text)."""
        return self._windows(self._windower.push(self.input.convert(payload)))

    def finish(self) -> str:
        """The final transcript (empty when nothing was heard)."""
        self._windows(self._windower.push(self.input.convert(b"", last=True)))
        self._windows(self._windower.flush())
        text = ""
        for ev in self._listener.finish(self._end):
            if ev.type is ListenEventType.FINAL:
                text = ev.text.strip()
        return text

    def _windows(self, windows: Iterable[Window]) -> list[str]:
        partials: list[str] = []
        for window in windows:
            self._end = window.end
            for ev in self._listener.process(window):
                if ev.type is ListenEventType.PARTIAL and ev.text.strip() and ev.text != self._text:
                    self._text = ev.text
                    partials.append(ev.text.strip())
        return partials


class WakeRequest:
    """One ``detect``: the first detection of any wanted wake word, or none by the audio's end.

    The audio has no length limit: it is scored as it comes and not kept, and Home Assistant's wake
    word stage streams one request until a wake word is heard, however long that takes."""

    def __init__(self, stream: WakeStream, fmt: AudioFormat, names: tuple[str, ...] | None) -> None:
        self.input = AudioInput(fmt, None)
        self._stream = stream
        # Home Assistant asks by model name (alexa_v0.1), satellites and people by the phrase (hey_jarvis)
        self._keys = frozenset(wake_key(n) for n in names) if names else None

    def wants(self, label: str) -> bool:
        """Whether a detection of ``label`` answers this request."""
        return self._keys is None or wake_key(label) in self._keys

    def feed(self, payload: bytes) -> Detection | None:
        for detection in self._stream.accept_waveform(self.input.convert(payload)):
            if self.wants(detection.label):
                return detection
        return None


_SENTENCE_END = re.compile(r"[.!?;:。！？]+[\"')\]]*\s+|\n\s*")


class SentenceBuffer:
    """Text streamed in pieces (an LLM's reply) → whole sentences as soon as they are complete."""

    def __init__(self, max_chars: int) -> None:
        self._text = ""
        self._max = max_chars

    def add(self, text: str) -> list[str]:
        """The sentences ``text`` completes. A run of ``max_chars`` with no sentence end (an LLM's
        reply without punctuation) is cut at its last space and spoken, not refused: nothing is lost,
        and no piece is longer than the voice takes."""
        self._text += text
        done: list[str] = []
        last = None
        for match in _SENTENCE_END.finditer(self._text):
            last = match
        if last is not None:
            done.append(self._text[:last.end()].strip())
            self._text = self._text[last.end():]
        while len(self._text) > self._max:
            cut = self._text.rfind(" ", 1, self._max + 1)
            cut = cut if cut > 0 else self._max
            done.append(self._text[:cut].strip())
            self._text = self._text[cut:].lstrip()
        return [d for d in done if d]

    def rest(self) -> list[str]:
        done, self._text = self._text.strip(), ""
        return [done] if done else []

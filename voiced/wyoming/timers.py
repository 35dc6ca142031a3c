"""Voice timers on the satellite: Home Assistant keeps the time, the satellite rings.

"Set a timer for five minutes" said to a Wyoming satellite starts a timer in Home Assistant,
which tells the satellite how it goes: ``timer-started``, ``timer-updated`` (paused, resumed,
time added), ``timer-cancelled`` and ``timer-finished``. Home Assistant makes no sound when a
timer finishes: a satellite that ignores ``timer-finished`` lets the pasta boil over. Here the
satellite rings: a bell (``[wyoming] timer_finished_wav``, or a built-in two-note chime)
``timer_rings`` times with ``timer_ring_gap_s`` of silence between rings. The microphone is
muted while a ring plays (half-duplex, as for any speech) and live in the gaps, so saying the
wake word in a gap stops the ringing and starts a pipeline as usual; ``pause-satellite`` and
the connection closing stop it too.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voiced.errors import AudioError, ConfigError
from voiced.tts.audio import AudioChunk, wav_file_to_chunk

if TYPE_CHECKING:
    from voiced.core.engine import Core

__all__ = ["CHIME_RATE", "Ringer", "chime", "load_bell"]

log = logging.getLogger(__name__)

CHIME_RATE = 22_050

# Two bell notes, a falling major third (E6 then C6), each with two inharmonic partials that
# decay quickly: heard across a kitchen, not mistaken for speech.
_NOTES_HZ = (1318.5, 1046.5)
_NOTE_S = 0.45
_PARTIALS = ((1.0, 1.0), (2.76, 0.35))
"""(frequency ratio, amplitude) of each note's partials."""
_DECAY_S = 0.12
_BELL_KEY = "wyoming.timer_finished_wav"
_PEAK = 0.5
"""Full scale fraction: loud enough to hear, with headroom for the device's own gain."""


def chime(rate: int = CHIME_RATE) -> AudioChunk:
    """The built-in bell: two notes, ~0.9 s, mono int16 at ``rate``."""
    t = np.arange(round(_NOTE_S * rate)) / rate
    envelope = np.exp(-t / _DECAY_S) * np.minimum(1.0, t * rate / 64)  # 64-sample attack: no click
    notes = [sum(a * np.sin(2 * np.pi * f0 * r * t) for r, a in _PARTIALS) * envelope for f0 in _NOTES_HZ]
    audio = np.concatenate(notes)
    audio *= _PEAK / np.max(np.abs(audio))
    return AudioChunk(np.round(audio * 32767).astype(np.int16), rate)


def load_bell(path: Path | None, source: str | None = None) -> AudioChunk:
    """The WAV at ``path`` (any rate, 16-bit, channels averaged), or the built-in chime when None;
    ConfigError naming ``timer_finished_wav``, the file and the config ``source`` if it cannot be played."""
    if path is None:
        return chime()
    try:
        bell = wav_file_to_chunk(path)
    except OSError as exc:
        raise ConfigError(_BELL_KEY, f"{path}: {exc.strerror or exc}", source) from None
    except AudioError as exc:  # its message names the file
        raise ConfigError(_BELL_KEY, str(exc), source) from None
    if bell.frames == 0:
        raise ConfigError(_BELL_KEY, f"{path}: no audio in it", source)
    return bell


class Ringer:
    """Rings for finished timers through the core's speaker; lives on the Wyoming loop."""

    def __init__(self, core: Core, bell: AudioChunk, rings: int, gap_s: float) -> None:
        self.core = core
        self.bell = bell
        self.rings = rings
        self.gap_s = gap_s
        self._stopped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def ringing(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, timer_id: str) -> None:
        """Ring for ``timer_id`` (on the loop); a timer finishing while another rings joins its ringing."""
        self.core.counters.add("wyoming_timers_finished")
        if self.ringing:
            log.info("wyoming: timer %s finished while another rings", timer_id)
            return
        log.info("wyoming: timer %s finished: ringing", timer_id)
        self._stopped = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._ring())

    def stop(self) -> None:
        """Stop ringing after the ring that plays now (on the loop)."""
        self._stopped.set()

    def stop_threadsafe(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """:meth:`stop` from another thread (the core's, when the wake word is heard)."""
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stopped.set)

    async def _ring(self) -> None:
        for n in range(self.rings):
            if self._stopped.is_set():
                break
            request = self.core.play(self.bell, tag=self)
            if request is None:
                log.warning("wyoming: a timer finished but there is no speaker ([playback]) to ring")
                return
            self.core.counters.add("wyoming_timer_rings")
            await asyncio.to_thread(request.wait)
            if n + 1 < self.rings:
                try:
                    await asyncio.wait_for(self._stopped.wait(), self.gap_s)
                except asyncio.TimeoutError:
                    continue
                break
        if self._stopped.is_set():
            log.info("wyoming: timer ringing stopped")

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

from voiced.tts.audio import AudioChunk
from voiced.tts.tones import TONE_RATE, bell, load_sound

if TYPE_CHECKING:
    from voiced.core.engine import Core

__all__ = ["CHIME_RATE", "Ringer", "chime", "load_bell"]

log = logging.getLogger(__name__)

CHIME_RATE = TONE_RATE

# Two bell notes, a falling major third (E6 then C6), that decay quickly: heard across a
# kitchen, not mistaken for speech.
_NOTES_HZ = (1318.5, 1046.5)
_NOTE_S = 0.45
_DECAY_S = 0.12
_BELL_KEY = "wyoming.timer_finished_wav"


def chime(rate: int = CHIME_RATE) -> AudioChunk:
    """The built-in bell: two notes, ~0.9 s, mono int16 at ``rate``."""
    return bell(_NOTES_HZ, _NOTE_S, _DECAY_S, rate=rate)


def load_bell(path: Path | None, source: str | None = None) -> AudioChunk:
    """The WAV at ``path`` (any rate, 16-bit, channels averaged), or the built-in chime when None;
    ConfigError naming ``timer_finished_wav``, the file and the config ``source`` if it cannot be played."""
    return load_sound(path, _BELL_KEY, chime, source)


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
            log.info("wyoming: timer %r finished while another rings", timer_id)
            return
        log.info("wyoming: timer %r finished: ringing", timer_id)
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

"""Feedback sounds around a wake word's command: a rising blip says "speak now", a falling one "heard you".

Without them a user says the wake word to a headless box and cannot tell whether it heard.
Wake mode only (``voiced run --listen-mode wake``, a Wyoming satellite): the blips frame the
one command a wake word opens. The daemon is half-duplex, so the microphone is muted from the
wake word until the blip and ``[tts] tail_ms`` have played (with arbitration, from the claim);
the command is heard from then on, by an endpointer that has not heard the wake word
(``[wake] timeout_s`` counts from then too). Hermes ``hermes/feedback/sound/toggleOff``
/ ``toggleOn`` silence and restore them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from voiced.core.events import CoreEvent, ListenMode, SpeechEnded, WakeDetected
from voiced.tts.audio import AudioChunk
from voiced.tts.cues import FeedbackConfig, heard_blip, wake_blip
from voiced.tts.requests import SpeechRequest
from voiced.tts.tones import load_sound

if TYPE_CHECKING:
    from voiced.core.engine import Core

__all__ = ["Feedback"]

log = logging.getLogger(__name__)


class Feedback:
    """Plays the sounds through the core's speaker; the core asks :meth:`holding` for every window."""

    def __init__(self, core: Core, config: FeedbackConfig, source: str | None = None) -> None:
        self.core = core
        self.enabled = True
        """hermes/feedback/sound/toggleOff clears it (any thread)."""
        self.wake_sound = load_sound(config.wake_wav, "feedback.wake_wav", wake_blip, source) if config.wake else None
        self.heard_sound = (load_sound(config.heard_wav, "feedback.heard_wav", heard_blip, source)
                            if config.heard else None)
        self._cue: SpeechRequest | None = None  # the wake sound, until it has played
        self._session: str | None = None  # the session the last wake word opened, for the heard sound

    def on_event(self, ev: CoreEvent) -> None:
        """A core event handler; the events it plays for come on the listen thread, as :meth:`holding` is asked."""
        if self.core.mode is not ListenMode.WAKE or not self.enabled:
            return
        if isinstance(ev, WakeDetected):
            self._session = ev.session_id
            if self.wake_sound is not None:
                self._cue = self._play(self.wake_sound)
        elif isinstance(ev, SpeechEnded) and ev.session_id == self._session:
            self._session = None
            if self.heard_sound is not None:
                self._play(self.heard_sound)

    def holding(self) -> bool:
        """True while the microphone must wait for the wake sound: from the wake word (or the claim,
        while rooms arbitrate) until it has played; the speaker's tail mutes it after that."""
        if self.wake_sound is None or not self.enabled or self.core.mode is not ListenMode.WAKE:
            return False
        if self._cue is not None and self._cue.done.is_set():
            self._cue = None
        return self._cue is not None or self.core.wake.deciding

    def _play(self, sound: AudioChunk) -> SpeechRequest | None:
        request = self.core.play(sound, tag=self)
        if request is None:
            log.warning("feedback: no speaker ([playback]) to play the sound through")
        else:
            self.core.counters.add("feedback_sounds")
        return request

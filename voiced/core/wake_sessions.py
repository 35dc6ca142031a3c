"""Wake words on the listen thread: detection, arbitration between rooms, the session a wake word opens.

Without an arbiter a detection is announced at once. With one (``[wake] arbitration_group``)
the detection is a claim: in wake mode the session opens provisionally (the speech after the
wake word is heard, its events held back), and when the arbiter has decided, the winner
announces the wake word and lets the held events go; a loser drops them and stands down.
"""

from __future__ import annotations

import collections
import uuid
from typing import TYPE_CHECKING

from voiced.audio.frames import Window
from voiced.core.events import ListenMode, SessionEnded, SessionReason, WakeDetected
from voiced.listener import ListenEvent
from voiced.wake import Detection
from voiced.wake.arbitration import Arbiter, Claim, SnrTracker

if TYPE_CHECKING:
    from voiced.core.engine import Core

__all__ = ["WakeSessions"]


class WakeSessions:
    """The core's wake word state; every method runs on the listen thread unless it says otherwise."""

    def __init__(self, core: Core) -> None:
        self.core = core
        detector = core.models.wake
        self.stream = detector.create_stream() if detector is not None else None
        self.enabled = True
        """hermes/hotword/toggleOff clears it (any thread)."""
        self.arbiter: Arbiter | None = None
        self.session: str | None = None
        """The session a wake word opened (wake mode), until its utterance ends."""
        self._until = 0.0  # stream time by which speech must start after the wake word (and our sounds)
        self._snr = SnrTracker()
        self._pending: str | None = None  # a session waiting for the arbiter
        self._held: list[ListenEvent] = []
        self._decisions: collections.deque[tuple[str, Detection, bool]] = collections.deque()  # from any thread

    def process(self, window: Window) -> None:
        """Score the window; open sessions for detections; apply the arbiter's decisions."""
        if self.stream is None:
            return
        self._snr.push(window.samples)
        if self.enabled:
            for detection in self.stream.accept_waveform(window.samples):
                self._detected(detection, window.end)
        self.settle()

    def settle(self) -> None:
        """Apply the arbiter's decisions; also called for muted windows (a wake sound waits on one)."""
        while self._decisions:
            self._decided(*self._decisions.popleft())

    def hold(self, ev: ListenEvent) -> bool:
        """True when ``ev`` must wait for the arbiter (wake mode, a claim not yet decided)."""
        if self._pending is not None and self.core.mode is ListenMode.WAKE:
            self._held.append(ev)
            return True
        return False

    def wait(self, seconds: float) -> None:
        """The microphone was muted for ``seconds`` (our sound, our speech): the open session's timeout
        waits as long, since nothing said meanwhile could be heard."""
        if self.session is not None:
            self._until += seconds

    @property
    def deciding(self) -> bool:
        """A wake word's claim waits for the arbiter (any thread may ask)."""
        return self._pending is not None

    def listening(self, now: float) -> bool:
        """Wake mode: feed VAD and ASR only between a wake word and the end of the utterance (or the timeout)."""
        if self.session is None:
            return False
        if self.core.listener.active or now <= self._until:
            return True
        if self._pending is None:  # a claim still undecided is not a session to end
            self.core.counters.add("wake_timeouts")
            self.core._emit(SessionEnded(self.session, SessionReason.TIMEOUT))
        self.session = None
        return False

    # -- detections and decisions --------------------------------------------------------------

    def _threshold(self, detection: Detection) -> float:
        """The threshold ``detection`` passed: its head's, at the sensitivity Home Assistant set."""
        assert self.stream is not None  # detections come from it
        return self.stream.config.threshold_for(detection.label)

    def _detected(self, detection: Detection, now: float) -> None:
        core = self.core
        session = str(uuid.uuid4())
        core.counters.add("wake_detections")
        if core.mode is ListenMode.WAKE:
            core.listener = core.models.new_listener()  # a fresh endpointer: the wake word is not part of the utterance
            self.session, self._until = session, now + core.config.wake.timeout_s
        if self.arbiter is None:
            core._emit(WakeDetected(detection, session, self._threshold(detection)))
            return
        self._pending, self._held = session, []
        claim = Claim(core.config.site.id, detection.label, detection.score, self._snr.snr_db(), session)
        self.arbiter.contest(claim, lambda won: self._decisions.append((session, detection, won)))

    def _decided(self, session: str, detection: Detection, won: bool) -> None:
        if session != self._pending:
            return  # superseded by a later wake word
        core = self.core
        self._pending, held, self._held = None, self._held, []
        if won:
            core.counters.add("wake_arbitration_won")
            core._emit(WakeDetected(detection, session, self._threshold(detection)))
            for ev in held:
                core._on_listen_event(ev)
            return
        core.counters.add("wake_stood_down")
        if self.session == session:  # another room answers: forget what we heard since
            self.session = None
            core.listener = core.models.new_listener()

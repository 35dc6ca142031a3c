"""Listening requests (listen mode on_request): hermes/asr/startListening and stopListening.

As Rhasspy's ASR services answer them: a request starts hearing at once (speech already under
way is heard from the request on), ``stopOnSilence`` ends it with the utterance, and
``stopListening`` for its session ends it then and there: the utterance heard so far is
transcribed, and a request that heard none is answered with an empty transcript, so the dialogue
manager waiting for ``textCaptured`` goes on. Between requests nothing is decoded. A request
with a session id is its caller's (``ListenRequest.callers_session``): the core transcribes and
leaves the intent and the end of the session to the caller.

The adapters call ``open`` and ``close`` on their threads; the rest runs on the listen thread.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from voiced.core.events import ListenRequest, SessionEnded, SessionReason, Transcript
from voiced.listener import ListenEvent, ListenEventType

if TYPE_CHECKING:
    from voiced.core.engine import Core

__all__ = ["ListenRequests"]


class ListenRequests:
    """The core's listening requests."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._lock = threading.Lock()
        self._open: ListenRequest | None = None
        self._fresh = False  # opened since the listen thread last looked: hear from now on
        self._stopped: ListenRequest | None = None  # closed by stopListening, not yet answered
        self.hearing: ListenRequest | None = None
        """The request in force when the utterance being heard began (listen thread)."""

    # -- any thread ---------------------------------------------------------------------------

    def open(self, request: ListenRequest) -> None:
        with self._lock:
            self._open, self._fresh, self._stopped = request, True, None

    def close(self, session_id: str | None = None) -> bool:
        """stopListening: True if it closed the open request (``session_id`` None: whichever it is)."""
        with self._lock:
            request = self._open
            if request is None or (session_id is not None and request.session_id is not None
                                   and session_id != request.session_id):
                return False
            self._open, self._stopped = None, request
            return True

    # -- listen thread ------------------------------------------------------------------------

    def take_fresh(self) -> bool:
        """True once after each ``open``: the listener starts afresh (no half-heard utterance)."""
        with self._lock:
            fresh, self._fresh = self._fresh, False
            return fresh

    def wanted(self) -> bool:
        """Whether windows go to the VAD and the recognizer: while a request is open or its utterance is heard."""
        with self._lock:
            return self._open is not None or self._stopped is not None or self.hearing is not None

    def wants_audio(self) -> bool:
        """Whether an utterance beginning now belongs to a request that asked for its audio."""
        with self._lock:
            return self._open is not None and self._open.send_audio

    def began(self) -> ListenRequest | None:
        """An utterance began: the request it belongs to (None: no request, not to be heard)."""
        with self._lock:
            self.hearing = self._open
            return self._open

    def ended(self) -> ListenRequest | None:
        """The utterance's final result is in: its request, closed now if it stops on silence."""
        with self._lock:
            request, self.hearing = self.hearing, None
            if request is not None and request.stop_on_silence and self._open is request:
                self._open = None
            return request

    def answer_stop(self, at: float) -> list[ListenEvent]:
        """A stopListening to answer: the utterance under way ends at ``at`` (its events, to be
        handled as any), or, when none was heard, an empty transcript ends the request's session."""
        with self._lock:
            stopped, self._stopped = self._stopped, None
        if stopped is None:
            return []
        core = self.core
        session = stopped.session_id
        if self.hearing is stopped:
            events = list(core.listener.finish(at))
            if any(ev.type is ListenEventType.FINAL for ev in events):
                return events
            self.hearing, session = None, core._utterance_session  # nothing came of it: heard nothing
        session = session or str(uuid.uuid4())
        core.counters.add("empty_transcripts")
        core._emit(Transcript(session, "", 0.0, at, at))
        if not stopped.callers_session:  # the caller ends its own session
            core._emit(SessionEnded(session, SessionReason.INTENT_NOT_RECOGNIZED))
        return []

"""Listening requests (listen mode on_request): hermes/asr/startListening and stopListening.

As Rhasspy's ASR services answer them: a request starts hearing at once (speech already under
way is heard from the request on), ``stopOnSilence`` ends it with the utterance, and
``stopListening`` for its session ends it then and there: the utterance heard so far is
transcribed, and a request that heard none is answered with an empty transcript, so the dialogue
manager waiting for ``textCaptured`` goes on. Between requests nothing is decoded. A request
with a session id is its caller's (``ListenRequest.callers_session``): the core transcribes and
leaves the intent and the end of the session to the caller.

A request replaced by a newer one before it was stopped is answered as if stopped then (a dialogue
manager waiting for its ``textCaptured`` would wait for its timeout). A caller's request that does
not stop on silence is answered once, at its stop, with everything heard since it began (as
Rhasspy's ASR answers it), not with a transcript per utterance and an empty one at the end.

The adapters call ``open`` and ``close`` on their threads; the rest runs on the listen thread.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from voiced.core.events import ListenRequest, SessionEnded, SessionReason, Transcript
from voiced.listener import ListenEventType

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
        self._stopped: list[ListenRequest] = []  # closed (stopListening, or replaced), not yet answered
        self._held: dict[int, list[Transcript]] = {}
        """id(request) → the transcripts of a caller's request that does not stop on silence, answered
        as one at its stop (listen thread)."""
        self.hearing: ListenRequest | None = None
        """The request in force when the utterance being heard began (listen thread)."""
        self._answering: ListenRequest | None = None  # the stopped request whose last utterance ends now
        self._waited = 0.0  # seconds of audio the open request has heard without speech beginning

    # -- any thread ---------------------------------------------------------------------------

    def open(self, request: ListenRequest) -> None:
        with self._lock:
            old = self._open
            # replaced: answered as stopped now, not left waiting for ever (its own session continued
            # by a dialogue's next turn is not another request: nothing to answer)
            if old is not None and (old.session_id is None or old.session_id != request.session_id):
                self._stopped.append(old)
            self._open, self._fresh, self._waited = request, True, 0.0

    def cancel(self, session_id: str) -> bool:
        """Drop the open request of ``session_id`` unanswered (its session ended otherwise)."""
        with self._lock:
            if self._open is None or self._open.session_id != session_id:
                return False
            self._open = None
            return True

    def close(self, session_id: str | None = None) -> bool:
        """stopListening: True if it closed the open request (``session_id`` None: whichever it is)."""
        with self._lock:
            request = self._open
            if request is None or (session_id is not None and request.session_id is not None
                                   and session_id != request.session_id):
                return False
            self._open = None
            self._stopped.append(request)
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
            return self._open is not None or bool(self._stopped) or self.hearing is not None

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

    def hold(self, request: ListenRequest, transcript: Transcript) -> bool:
        """Keep ``transcript`` for its stop if ``request`` is answered once at its stop (a caller's that
        does not stop on silence); False: publish it now."""
        if not request.callers_session or request.stop_on_silence:
            return False
        with self._lock:  # the cloud's transcripts come on its threads
            if not (request is self._open or request is self._answering or any(r is request for r in self._stopped)):
                return False  # answered already (a late cloud transcript): out on its own
            self._held.setdefault(id(request), []).append(transcript)
        return True

    def expire(self, seconds: float) -> None:
        """A window of ``seconds`` was heard (listen thread): an open request with a timeout that
        has heard that long without speech beginning ends, a dialogue's session with reason timeout."""
        with self._lock:
            request = self._open
            if request is None or request.timeout_s is None or self.hearing is not None:
                return
            self._waited += seconds
            if self._waited < request.timeout_s:
                return
            self._open = None
        self.core.counters.add("listen_timeouts")
        if not request.callers_session:
            self.core._emit(SessionEnded(request.session_id or str(uuid.uuid4()), SessionReason.TIMEOUT))

    def answer_stop(self, at: float) -> None:
        """Answer the requests closed since the last call: an utterance of theirs under way ends at
        ``at`` (its events handled as any), what a request held goes out as one transcript, and a
        request that heard nothing gets an empty one, which ends its session if the core's own."""
        with self._lock:
            stopped, self._stopped = self._stopped, []
        for request in stopped:
            self._answer(request, at)

    def _answer(self, request: ListenRequest, at: float) -> None:
        core = self.core
        session = request.session_id
        self._answering = request
        try:
            if self.hearing is request:
                events = list(core.listener.finish(at))
                for ev in events:
                    core._on_listen_event(ev)
                if not any(ev.type is ListenEventType.FINAL for ev in events):
                    self.hearing, session = None, core._utterance_session  # nothing came of it: heard nothing
                elif not request.callers_session or request.stop_on_silence:
                    return  # answered by that utterance's transcript
        finally:
            self._answering = None
        with self._lock:
            held = self._held.pop(id(request), None)
        if held:
            core._emit(_joined(held))
            return
        session = session or str(uuid.uuid4())
        core.counters.add("empty_transcripts")
        core._emit(Transcript(session, "", 0.0, at, at))
        if not request.callers_session:  # the caller ends its own session
            core._emit(SessionEnded(session, SessionReason.INTENT_NOT_RECOGNIZED))


def _joined(held: list[Transcript]) -> Transcript:
    """One transcript of a request's utterances, in order."""
    said = [t for t in held if t.text]
    words = tuple(w for t in said for w in t.words or ()) if said and all(t.words is not None for t in said) else None
    return Transcript(held[0].session_id, " ".join(t.text for t in said),
                      min((t.confidence for t in said), default=0.0), held[0].start, held[-1].end, words)

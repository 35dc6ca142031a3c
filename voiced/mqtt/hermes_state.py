"""What the Hermes adapter keeps of earlier messages: toggles by reason, and sessions' tags.

Toggles: a component stays off while any reason to keep it off stands.

Rhasspy's services keep the set of reasons they were toggled off for: ``toggleOff`` adds its
reason, ``toggleOn`` removes its own, and the unknown reason ("") overrides all others
(rhasspyhermes ``HotwordToggleReason.UNKNOWN``): a ``toggleOn`` without one clears every reason.
So a dialogue manager's session and a playing sound can both hold the wake word off, and the
sound ending does not turn it back on in the middle of the session.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

__all__ = ["MAX_REASONS", "MAX_SESSIONS", "OwnSessions", "SessionTags", "StartedSessions", "ToggleReasons"]

MAX_SESSIONS = 32
"""Recent sessions whose wake word and language are kept; the oldest go first."""
MAX_REASONS = 16
"""Distinct reasons kept (they come from outside); beyond them a toggleOff counts as the unknown
reason, which only a toggleOn without a reason ends."""


class ToggleReasons:
    """Why one component is off; on when no reason is left."""

    def __init__(self) -> None:
        self._off: set[str] = set()

    def toggle(self, enabled: bool, reason: str) -> bool:
        """Apply a toggleOn (``enabled``) or toggleOff for ``reason``; True if the component is on after it."""
        if enabled:
            if reason:
                self._off.discard(reason)
            else:
                self._off.clear()
        else:
            self._off.add(reason if reason in self._off or len(self._off) < MAX_REASONS else "")
        return not self._off

    @property
    def reasons(self) -> tuple[str, ...]:
        """The reasons holding the component off, sorted ("" for the unknown one)."""
        return tuple(sorted(self._off))


_V = TypeVar("_V")


def _remember(recent: OrderedDict[str, _V], session_id: str, value: _V) -> None:
    """Set ``session_id``'s ``value`` as the most recent; the oldest beyond ``MAX_SESSIONS`` go
    (every session kept here comes from outside: none may grow without bound)."""
    recent[session_id] = value
    recent.move_to_end(session_id)
    while len(recent) > MAX_SESSIONS:
        recent.popitem(last=False)


class SessionTags:
    """The ``wakewordId`` and ``lang`` a session came with (its wake word's detection, its
    ``startListening``), handed back on its ``textCaptured`` and intent as Rhasspy's services do."""

    def __init__(self) -> None:
        self._tags: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()

    def tag(self, session_id: str, wakeword_id: str | None, lang: str | None) -> None:
        _remember(self._tags, session_id, (wakeword_id, lang))

    def of(self, session_id: str | None) -> tuple[str | None, str | None]:
        """(wakewordId, lang) of ``session_id``; (None, None) for one not tagged."""
        return self._tags.get(session_id, (None, None)) if session_id is not None else (None, None)

    def known(self, session_id: str | None) -> bool:
        return session_id is not None and session_id in self._tags


class StartedSessions:
    """Where voiced's own sessions stand (the most recent ``MAX_SESSIONS``): each gets exactly one
    ``sessionStarted`` ahead of its ``sessionEnded``, whichever of its events comes first, and one
    ``sessionEnded``; a session an app continues after its end starts again."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, bool] = OrderedDict()  # session → started and not yet ended

    def __contains__(self, session_id: object) -> bool:
        """Started and not ended."""
        return self._open.get(session_id) is True  # type: ignore[call-overload]

    def any_open(self) -> bool:
        return any(self._open.values())

    def start(self, session_id: str) -> bool:
        """Mark ``session_id`` started; True if it was not open (its sessionStarted is due now)."""
        if self._open.get(session_id) is True:
            return False
        _remember(self._open, session_id, True)
        return True

    def end(self, session_id: str) -> bool | None:
        """Mark ``session_id`` ended: True if it had never started (its sessionStarted is due first),
        False if it was open, None if it has ended already (nothing is due)."""
        state = self._open.get(session_id)
        if state is False:
            return None
        _remember(self._open, session_id, False)
        return state is None


class OwnSessions:
    """voiced's own recent sessions (the most recent ``MAX_SESSIONS``) and the ``customData`` an app
    gave each: only these may an app continue or end (several satellites share one broker, and
    continueSession and endSession carry no siteId), and the data is echoed on their messages."""

    def __init__(self) -> None:
        self._data: OrderedDict[str, str | None] = OrderedDict()
        self._keep_open: set[str] = set()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._data

    def add(self, session_id: str, custom_data: str | None = None) -> None:
        """Know ``session_id`` (again), with ``custom_data`` if given (None keeps what it had)."""
        if custom_data is None:
            custom_data = self._data.get(session_id)
        _remember(self._data, session_id, custom_data)

    def custom_data(self, session_id: str | None) -> str | None:
        return self._data.get(session_id) if session_id is not None else None

    def keep_open_unrecognized(self, session_id: str, keep: bool) -> None:
        """Whether the app asked ``session_id``'s turn to be told of an answer no intent matches
        (``sendIntentNotRecognized``) instead of the session ending."""
        if keep:
            self._keep_open.add(session_id)
        else:
            self._keep_open.discard(session_id)
        self._keep_open &= self._data.keys()  # bounded with the sessions

    def keeps_open_unrecognized(self, session_id: str | None) -> bool:
        return session_id in self._keep_open

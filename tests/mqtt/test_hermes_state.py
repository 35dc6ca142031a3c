"""Hermes toggles by reason, as Rhasspy's services keep them (rhasspyhermes ``HotwordToggleReason``), and sessions' tags."""

from __future__ import annotations

from rhasspyhermes.wake import HotwordToggleReason

from voiced.mqtt.hermes_state import MAX_REASONS, MAX_SESSIONS, SessionTags, ToggleReasons

SESSION, AUDIO, UNKNOWN = (HotwordToggleReason.DIALOGUE_SESSION.value, HotwordToggleReason.PLAY_AUDIO.value,
                           HotwordToggleReason.UNKNOWN.value)


def test_the_end_of_one_reason_leaves_the_others_standing() -> None:
    """A reply played during a dialogue session used to turn the wake word back on mid-session."""
    t = ToggleReasons()
    assert not t.toggle(False, SESSION) and not t.toggle(False, AUDIO)
    assert not t.toggle(True, AUDIO) and t.reasons == (SESSION,)
    assert t.toggle(True, SESSION) and t.reasons == ()


def test_the_unknown_reason_overrides_all() -> None:
    t = ToggleReasons()
    t.toggle(False, SESSION)
    t.toggle(False, AUDIO)
    assert t.toggle(True, UNKNOWN) and t.reasons == ()
    assert not t.toggle(False, UNKNOWN) and not t.toggle(True, SESSION), "off without a reason: only on without one"
    assert t.toggle(True, UNKNOWN)
    assert t.toggle(True, AUDIO), "on for a reason never given changes nothing"


def test_reasons_from_outside_are_bounded() -> None:
    t = ToggleReasons()
    for n in range(MAX_REASONS + 50):
        t.toggle(False, f"r{n}")
    assert len(t.reasons) == MAX_REASONS + 1 and "" in t.reasons
    for n in range(MAX_REASONS):
        t.toggle(True, f"r{n}")
    assert t.reasons == ("",) and t.toggle(True, "")


def test_a_sessions_wake_word_and_language_are_kept_for_the_recent_ones() -> None:
    tags = SessionTags()
    tags.tag("s-0", "alexa_v0.1", None)
    tags.tag("s-1", None, "de")
    assert tags.of("s-0") == ("alexa_v0.1", None) and tags.of("s-1") == (None, "de")
    assert tags.of("never") == (None, None) and tags.of(None) == (None, None)
    for n in range(2, MAX_SESSIONS + 1):
        tags.tag(f"s-{n}", "w", None)
    tags.tag("s-1", None, "de")  # used again: kept
    tags.tag("s-new", "w", None)
    assert tags.of("s-0") == (None, None) and tags.of("s-1") == (None, "de")

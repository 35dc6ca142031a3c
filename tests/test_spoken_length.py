"""Syllables a transcript takes to say (``voiced.asr.spoken_length``), from its spelling alone."""

from __future__ import annotations

import pytest

from voiced.asr.spoken_length import syllables, without_repeats


@pytest.mark.parametrize(("text", "count"), [
    ("time", 1),  # a final e is silent
    ("table", 2),  # but not in -le
    ("unpause the shows", 4),
    ("and pause the shows", 4),  # what Whisper writes for "unpause": as long
    ("pause the shows", 3),
    ("Cancel all timers.", 5),
    ("cancel all timers in our bedroom", 9),
    ("Set the fan to 13%.", 8),  # thir-teen per-cent
    ("to 39.5°", 8),  # thir-ty nine point five de-grees
    ("", 0),
    ("!?", 0),
])
def test_syllables_are_counted_from_the_spelling(text: str, count: int) -> None:
    assert syllables(text) == count


def test_a_number_counts_as_its_words() -> None:
    assert syllables("1234") == syllables("one thousand two hundred thirty four")
    assert syllables("70") == syllables("seventy") == 3


def test_a_looped_phrase_is_kept_once() -> None:
    looped = "Open up the lines of garage. Open up the lines of garage. Open this"
    assert without_repeats(looped) == "Open up the lines of garage. Open this"
    assert without_repeats("turn it up up") == "turn it up up"  # a single word repeated is speech
    assert without_repeats("the the lamp the the lamp") == "the the lamp"

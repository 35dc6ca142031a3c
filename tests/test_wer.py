"""The WER normalizers every benchmark scores with: as written, and with numbers read out."""

from __future__ import annotations

import pytest

from voiced.asr.wer import normalize, numbers_as_words, wer, word_errors


def test_the_default_normalizer_drops_marks_and_case_but_keeps_the_number_form() -> None:
    assert normalize("Set the fan to 50%, please!") == ["set", "the", "fan", "to", "50", "please"]
    assert normalize("don't 'quote'") == ["don't", "quote"]
    assert word_errors("add 1 hour", "Add one hour.") == (1, 3)
    assert word_errors("set it to 50 percent", "Set it to 50%.") == (1, 5)


@pytest.mark.parametrize(("written", "spoken"), [
    ("Set the fan to 50%.", "set the fan to fifty percent"),
    ("set the temp to 21.5°", "set the temp to twenty one point five degrees"),
    ("add 4-hours to my timer", "add four hours to my timer"),
    ("28,000 people", "twenty eight thousand people"),
    ("start a timer for 1 hours and 87 minutes", "start a timer for one hours and eighty seven minutes"),
])
def test_numbers_read_out_agree_with_numbers_written(written: str, spoken: str) -> None:
    assert normalize(numbers_as_words(written)) == spoken.split()
    assert word_errors(spoken, written, spoken_numbers=True) == (0, len(spoken.split()))


def test_a_wrong_number_is_still_an_error_read_out() -> None:
    """"16" for "60" is one word wrong either way; "70" for "17" costs the words it reads out as."""
    assert word_errors("set the fan speed to 60", "Set the fan speed to 16.", spoken_numbers=True) == (1, 6)
    assert word_errors("to 17", "to 70", spoken_numbers=True) == (1, 2)
    pairs = [("set the fan to 50 percent", "Set the fan to 50%."), ("add 1 hour", "Add one hour.")]
    assert wer(pairs) == round(100 * 2 / 9, 2) and wer(pairs, spoken_numbers=True) == 0.0

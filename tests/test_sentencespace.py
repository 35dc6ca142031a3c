"""The sentence space: which transcripts are whole commands that nothing longer extends."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiced.config import Config
from voiced.intents import IntentRecognizer
from voiced.sentencespace import Completion

TEMPLATES = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences:
          - "turn on [the] {name}"
          - "switch on [the] {name} in [the] {area}"
  HassLightSet:
    data:
      - sentences:
          - "set [the] {name} to {brightness} percent"
  HassNevermind:
    data:
      - sentences:
          - "(never mind|cancel)"
  Remind:
    data:
      - sentences:
          - "remind me to {task}"
          - "note {task} please"
lists:
  name:
    values: ["kitchen light", "lamp", "kitchen"]
  area:
    values: ["kitchen", "living room"]
  brightness:
    range: {from: 0, to: 100}
"""


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> IntentRecognizer:
    path = tmp_path_factory.mktemp("space") / "intents.yaml"
    path.write_text(TEMPLATES)
    return IntentRecognizer.load([path])


@pytest.mark.parametrize(("text", "expected"), [
    ("turn on the kitchen light", Completion.FINAL),
    ("Turn on the kitchen light.", Completion.FINAL),  # as a recognizer writes it
    ("turn on kitchen", Completion.EXTENDABLE),  # "kitchen light" is a longer name
    ("turn on the", Completion.PREFIX),
    ("turn on the garage", Completion.NONE),  # not a name in the list
    ("switch on the lamp in the living room", Completion.FINAL),
    ("switch on the lamp", Completion.PREFIX),
    ("never mind", Completion.FINAL),
    ("cancel", Completion.FINAL),
    ("set the lamp to 50 percent", Completion.FINAL),
    ("set the lamp to 50", Completion.PREFIX),  # a range is an open slot: it may take more words
    ("remind me to", Completion.PREFIX),
    ("remind me to water the plants", Completion.EXTENDABLE),  # a trailing wildcard never ends early
    ("note buy milk please", Completion.EXTENDABLE),  # "please" may still be part of the wildcard
    ("hello there", Completion.NONE),  # only a leading wildcard could take it: not a command
])
def test_completion_of_transcripts(recognizer: IntentRecognizer, text: str, expected: Completion) -> None:
    assert recognizer.sentence_space().complete(text) is expected


def test_walker_reuses_the_shared_prefix_and_gives_the_same_answers(recognizer: IntentRecognizer) -> None:
    space = recognizer.sentence_space()
    walker = space.walker()
    growing = ["turn", "turn on", "turn on the", "turn on the kitchen", "turn on the kitchen light",
               "turn on the lamp", "switch on the lamp in the kitchen", "turn on the kitchen light"]
    assert [walker.complete(t) for t in growing] == [space.complete(t) for t in growing]


def test_final_needs_the_recognizers_match_too(recognizer: IntentRecognizer) -> None:
    space = recognizer.sentence_space()
    assert space.complete("turn on the lamp") is Completion.FINAL
    refusing = space.with_verifier(lambda text: False)
    assert refusing.complete("turn on the lamp") is Completion.EXTENDABLE


def test_home_assistant_builtin_set_compiles_and_answers(tmp_path: Path) -> None:
    (tmp_path / "voiced.toml").write_text("""
[intents]
builtin = "home-assistant"
[intents.lists]
name = ["kitchen light", "porch light"]
area = ["kitchen", "bedroom"]
""")
    recognizer = IntentRecognizer.from_section(Config.from_file(tmp_path / "voiced.toml").intents)
    space = recognizer.sentence_space()
    assert space.state_count > 1000
    assert space.complete("never mind") is Completion.FINAL
    # Home Assistant's sentences go on after a name ("... in the kitchen"): no early end there
    assert space.complete("turn on the kitchen light") is Completion.EXTENDABLE
    # "{name}" is also a timer's wildcard name there: the walk alone may take "the" for one, hassil not
    assert not space.walker().is_whole("turn on the") and space.walker(wildcards=False).may_begin("turn on the kit")
    assert not space.walker().is_whole("the quick brown fox")
    assert space.walker(wildcards=False).may_begin("close up the awn")
    assert not space.walker(wildcards=False).may_begin("close up the quick")  # only wildcard text could


@pytest.fixture(scope="module")
def home_assistant(tmp_path_factory: pytest.TempPathFactory) -> IntentRecognizer:
    """Home Assistant's built-in English sentences with a timer's name and three areas."""
    path = tmp_path_factory.mktemp("home") / "voiced.toml"
    path.write_text("""
[intents]
builtin = "home-assistant"
[intents.lists]
name = ["office timer"]
area = ["office", "garage", "kitchen"]
""")
    return IntentRecognizer.from_section(Config.from_file(path).intents)


def test_a_word_glued_to_a_number_is_that_number_then_exactly_its_text(home_assistant: IntentRecognizer) -> None:
    """Home Assistant's "{hours}-hours", "{brightness}%": one word, a number, then the label's text.
    Any word with a digit in it once passed, so a decoder could wander through "n000zj" words."""
    walker = home_assistant.sentence_space().walker(wildcards=False)
    assert walker.is_whole("add 4-hours to my office timer")
    assert walker.may_begin("add 4") and walker.may_begin("add 4-ho") and walker.may_begin("add 12.5-")
    assert not walker.may_begin("add n000")  # a digit in it is not enough
    assert not walker.may_begin("add 4-hx")  # nor a number followed by other text
    assert not walker.is_whole("add 4-hour to my office timer x")


def test_a_glued_number_is_read_as_hassil_reads_it_and_no_larger_than_its_range(
        home_assistant: IntentRecognizer) -> None:
    """"{brightness}%" once took any run of digits, dots and commas ("150%", "28,000,000%"),
    unbounded where a plain range was bounded: the depth-first rest could follow Whisper's runs of
    ",000" through it. Now the number is one hassil reads, at most the range's end (100)."""
    recognizer = home_assistant
    walker = recognizer.sentence_space().walker(wildcards=False)
    for text in ("set the brightness in the kitchen to 50%", "set the brightness in the kitchen to 100%",
                 "set the temp in the kitchen to 21,5°", "add 100-hours to my office timer"):
        assert walker.is_whole(text) and recognizer.recognize(text) is not None, text
    assert walker.may_begin("set the brightness in the kitchen to 10") and walker.may_begin("add 12.")
    for text in ("set the brightness in the kitchen to 150", "set the brightness in the kitchen to 101%",
                 "set the brightness in the kitchen to 28,000,000%", "set the brightness in the kitchen to 5.0.1%",
                 "add 101-hours"):
        assert not walker.may_begin(text), text
    assert recognizer.recognize("set the brightness in the kitchen to 150%") is None


def test_a_number_in_digits_closes_a_range_with_a_decimal_comma_too(recognizer: IntentRecognizer) -> None:
    """A range in digits is one word ("50", not "50 five"); a decimal comma ("21,5", which hassil
    reads as 21.5) once left the range open for more number words."""
    walker = recognizer.sentence_space().walker()
    assert walker.may_begin("set the lamp to 21,5 percent") and walker.may_begin("set the lamp to 21.5 percent")
    for text in ("set the lamp to 21,5 five", "set the lamp to 21.5 five", "set the lamp to 50 five"):
        assert not walker.may_begin(text), text
    assert walker.may_begin("set the lamp to twenty five")


def test_digits_fit_a_range_as_hassil_reads_them_and_no_larger_than_it_goes(recognizer: IntentRecognizer) -> None:
    """Whisper writes "28,000,000" and "150": a range once took any run of digits, dots and commas,
    and the constrained search followed such runs for its whole budget. hassil reads one decimal
    point or comma ("21,5" is 21.5, "28,000" is 28) and takes no value above the range's end."""
    walker = recognizer.sentence_space().walker()
    for text in ("set the lamp to 50 percent", "set the lamp to 100 percent", "set the lamp to 0 percent"):
        assert walker.is_whole(text) and recognizer.recognize(text) is not None, text
    assert walker.may_begin("set the lamp to 5") and walker.may_begin("set the lamp to 10")
    assert walker.may_begin("set the lamp to 2,") and walker.may_begin("set the lamp to 28,000 percent")
    for text in ("set the lamp to 150", "set the lamp to 101 percent", "set the lamp to 28,000,000",
                 "set the lamp to 2,8,5", "set the lamp to 5.0.1"):
        assert not walker.may_begin(text), text
    assert recognizer.recognize("set the lamp to 150 percent") is None

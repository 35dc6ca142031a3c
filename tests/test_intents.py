"""hassil templates → intents."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from voiced.errors import ConfigError
from voiced.intents import IntentRecognizer, IntentSource, SlotKind

LIGHTS = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences:
          - "turn on [the] {name}"
          - "<switch> on [the] lights in [the] {area}"
  HassTurnOff:
    data:
      - sentences: ["turn off [the] {name}"]
"""

LISTS = """
language: en
intents:
  HassLightSet:
    data:
      - sentences: ["set [the] {area} lights to {brightness} percent"]
        slots:
          domain: light
lists:
  area:
    values:
      - in: "living room"
        out: living_room
      - in: "(bed|sleeping) room"
        out: bedroom
      - kitchen
  brightness:
    range: {from: 0, to: 100}
expansion_rules:
  switch: "(turn|switch)"
"""


@pytest.fixture
def recognizer(tmp_path: Path) -> IntentRecognizer:
    (tmp_path / "lights.yaml").write_text(LIGHTS)
    (tmp_path / "lists.yaml").write_text(LISTS)
    return IntentRecognizer.load([tmp_path / "*.yaml"])


def test_turn_on_the_kitchen_light(recognizer: IntentRecognizer) -> None:
    intent = recognizer.recognize("turn on the kitchen light")
    assert intent is not None
    assert intent.name == "HassTurnOn"
    assert intent.source is IntentSource.TEMPLATE and intent.confidence == 1.0
    assert intent.text == "turn on the kitchen light"
    (slot,) = intent.slots
    assert (slot.name, slot.raw_value, slot.value, slot.kind) == ("name", "kitchen light", "kitchen light", SlotKind.WILDCARD)
    assert intent.text[slot.start : slot.end] == "kitchen light"  # type: ignore[misc]


def test_an_undefined_list_is_a_wildcard_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "lights.yaml").write_text(LIGHTS)
    (tmp_path / "lists.yaml").write_text(LISTS)
    with caplog.at_level(logging.INFO, logger="voiced"):
        IntentRecognizer.load([tmp_path / "lights.yaml", tmp_path / "lists.yaml"])
    assert sum("{name}" in r.getMessage() for r in caplog.records) == 1


def test_list_values_are_normalized_with_in_and_out(recognizer: IntentRecognizer) -> None:
    intent = recognizer.recognize("switch on the lights in the living room")
    assert intent is not None and intent.name == "HassTurnOn"
    area = intent.slot("area")
    assert area is not None
    assert (area.raw_value, area.value, area.kind, area.entity) == ("living room", "living_room", SlotKind.LIST, "area")
    assert intent.text[area.start : area.end] == "living room"  # type: ignore[misc]
    sleeping = recognizer.recognize("set the sleeping room lights to 40 percent")
    assert sleeping is not None and sleeping.name == "HassLightSet"
    assert sleeping.slot_values == {"area": "bedroom", "brightness": 40, "domain": "light"}
    brightness, domain = sleeping.slot("brightness"), sleeping.slot("domain")
    assert brightness is not None and brightness.kind is SlotKind.NUMBER and brightness.raw_value == "40"
    assert domain is not None and domain.kind is SlotKind.FIXED and domain.start is None
    plain = recognizer.recognize("set kitchen lights to 5 percent")
    assert plain is not None and plain.slot_values["area"] == "kitchen"


def test_case_and_punctuation_do_not_matter(recognizer: IntentRecognizer) -> None:
    shouted = recognizer.recognize("SWITCH ON THE LIGHTS IN THE LIVING ROOM")
    assert shouted is not None and shouted.slot_values["area"] == "living_room"
    area = shouted.slot("area")
    assert area is not None and area.raw_value == "LIVING ROOM"  # raw: as the text had it
    punctuated = recognizer.recognize("Turn off the porch light!")
    assert punctuated is not None and punctuated.name == "HassTurnOff"
    assert punctuated.slot_values["name"] == "porch light"
    words = recognizer.recognize("Set the Kitchen lights to twenty percent.")
    assert words is not None and words.slot_values["brightness"] == 20


def test_no_match_is_none(recognizer: IntentRecognizer) -> None:
    assert recognizer.recognize("what is the weather like") is None
    assert recognizer.recognize("") is None
    assert recognizer.recognize("   ") is None


def test_vocabulary_holds_template_words_and_list_phrases(recognizer: IntentRecognizer) -> None:
    vocabulary = recognizer.vocabulary()
    for word in ("turn", "on", "off", "the", "switch", "lights", "set", "percent"):
        assert word in vocabulary
    for phrase in ("living room", "kitchen", "sleeping", "room"):
        assert phrase in vocabulary
    assert len(vocabulary) == len(set(vocabulary))
    assert all(w == w.lower() for w in vocabulary)


def test_intent_names_and_reload(tmp_path: Path, recognizer: IntentRecognizer) -> None:
    assert recognizer.intent_names == ("HassLightSet", "HassTurnOff", "HassTurnOn")
    assert recognizer.language == "en"
    (tmp_path / "more.yaml").write_text('language: en\nintents:\n  GetTime:\n    data:\n      - sentences: ["what time is it"]\n')
    again = recognizer.reload()
    assert "GetTime" in again.intent_names and "GetTime" not in recognizer.intent_names
    time = again.recognize("What time is it?")
    assert time is not None and time.name == "GetTime" and time.slots == ()


def test_a_directory_loads_its_yaml_files(tmp_path: Path) -> None:
    (tmp_path / "lights.yaml").write_text(LIGHTS)
    (tmp_path / "lists.yaml").write_text(LISTS)  # defines the <switch> rule lights.yaml uses
    (tmp_path / "notes.txt").write_text("not a template")
    assert IntentRecognizer.load([tmp_path]).intent_names == ("HassLightSet", "HassTurnOff", "HassTurnOn")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("language: en\nintents: [\n", "not valid YAML"),
        ("- just\n- a list\n", "mapping at the top level"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['turn (on']\n", "does not parse"),
        ("language: en\nintents:\n  X:\n    data: nope\n", "needs a list under 'data'"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: [3]\n", "must be text"),
        # found by fuzzing (seed 15): a list value is a template to hassil, and its ParseError escaped
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['turn on {name}']\n"
         "lists:\n  name:\n    values: ['k(tchen light']\n", "template 'k(tchen light' does not parse"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['turn on {name}']\n"
         "lists:\n  name:\n    values: [{in: 'k(tchen', out: k}]\n", "lists.name.values[0]"),
        # found by a helper: these passed doctor, then failed at the first match (RecursionError,
        # AttributeError: six of them stopped the daemon) or spelled out a billion numbers
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['go <loop>']\n"
         "expansion_rules:\n  loop: '[x] <loop>'\n", "expansion_rules.loop in"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['go <a>']\n"
         "expansion_rules:\n  a: 'x <b>'\n  b: 'y <a>'\n", "refers to itself (<a> -> <b> -> <a>)"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['hi there']\n        slots: [1, 2]\n",
         "intents.X.data[0].slots"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['hi']\n        requires_context: [a]\n",
         "intents.X.data[0].requires_context"),
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['hi']\n        metadata: 5\n",
         "intents.X.data[0].metadata"),
        ("language: en\nskip_words: [5, um]\nintents: {}\n", "skip_words"),
        ("language: en\nintents: {}\nlists:\n  x: [a, b]\n", "lists.x in"),  # was AttributeError's repr
        ("language: en\nintents: {}\nlists:\n  x:\n    values: [{out: a}]\n", "lists.x.values[0] in"),  # KeyError('in')
        ("language: en\nintents:\n  X:\n    data:\n      - sentences: ['set to {n}']\n"
         "lists:\n  n:\n    range: {from: 0, to: 1000000000}\n", "0..1000000000 holds 1,000,000,001 numbers"),
    ],
)
def test_bad_files_are_config_errors_naming_the_file(tmp_path: Path, content: str, fragment: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    with pytest.raises(ConfigError) as err:
        IntentRecognizer.load([bad])
    assert str(bad) in str(err.value) and fragment in str(err.value)


def test_missing_files_and_rules(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=str(missing)):
        IntentRecognizer.load([missing])
    with pytest.raises(ConfigError, match="no template file matches"):
        IntentRecognizer.load([str(tmp_path / "*.yaml")])
    rule = tmp_path / "rule.yaml"
    rule.write_text("language: en\nintents:\n  X:\n    data:\n      - sentences: ['<nope> it']\n")
    with pytest.raises(ConfigError, match="undefined rule <nope>") as err:
        IntentRecognizer.load([rule])
    assert str(rule) in str(err.value)
    nolang = tmp_path / "nolang.yaml"
    nolang.write_text("intents: {}\n")
    with pytest.raises(ConfigError, match="language"):
        IntentRecognizer.load([nolang])


def test_a_config_list_value_is_literal_text_even_with_a_stray_bracket(tmp_path: Path) -> None:
    """Found by fuzzing (seed 15): hassil parsed [intents.lists] values as templates, and a stray "("
    raised its ParseError out of the config load; then it was a ConfigError blaming the template
    file. The README says they are literal: "TV (den" is a name."""
    from voiced.intentconfig import IntentsSection, SlotLists

    templates = tmp_path / "on.yaml"
    templates.write_text("language: en\nintents:\n  X:\n    data:\n      - sentences: ['turn on {name}']\n")
    lists = SlotLists.from_config({"name": ["k(tchen light", "TV (den)"]}, "intents.lists", "voiced.toml")
    recognizer = IntentRecognizer.from_section(IntentsSection(templates=(str(templates),), lists=lists), "voiced.toml")
    assert [s.value for s in recognizer.recognize("turn on k(tchen light").slots] == ["k(tchen light"]
    assert recognizer.recognize("turn on TV den") is None  # "(den)" is no optional group


def test_an_intent_filter_chooses_among_the_intents_it_allows(tmp_path: Path) -> None:
    """Rhasspy filters before it picks the best; voiced picked the best of all and then dropped it,
    so an allowed intent that also matched was lost (a dialogue manager's yes/no follow-up)."""
    both = tmp_path / "both.yaml"
    both.write_text("language: en\nintents:\n  Lights:\n    data:\n      - sentences: ['turn on the lamp']\n"
                    "  Power:\n    data:\n      - sentences: ['turn on the (lamp|fan)']\n")
    recognizer = IntentRecognizer.load([both])
    best = recognizer.recognize("turn on the lamp").name
    other = ({"Lights", "Power"} - {best}).pop()
    assert recognizer.recognize("turn on the lamp", only=[other]).name == other
    assert recognizer.recognize("turn on the lamp", only=["Nothing"]) is None
    assert recognizer.recognize("turn on the lamp").name == best  # unfiltered: as before


def test_a_backwards_range_names_its_list_and_file(tmp_path: Path) -> None:
    """hassil refuses it with a bare AssertionError ("start cannot be greater than stop")."""
    bad = tmp_path / "timer.yaml"
    bad.write_text("language: en\nintents:\n  T:\n    data:\n      - sentences: ['set {minutes} minutes']\n"
                   "lists:\n  minutes:\n    range: {from: 10, to: 1}\n")
    with pytest.raises(ConfigError, match=r"^lists\.minutes\.range in .*timer\.yaml: from 10 is greater than to 1"):
        IntentRecognizer.load([bad])


def test_a_key_written_twice_is_an_error_naming_the_file_and_lines(tmp_path: Path) -> None:
    """PyYAML keeps the last of two equal keys: a second ``lists:`` dropped the first one's lists
    (the sentences needing them became wildcards) without a word."""
    from voiced.intentconfig import SlotLists

    twice = tmp_path / "lights.yaml"
    twice.write_text("language: en\nintents:\n  On:\n    data:\n      - sentences: ['turn on [the] {name}']\n"
                     "lists:\n  name:\n    values: [lamp]\n"
                     "intents:\n  Off:\n    data:\n      - sentences: ['turn off [the] {name}']\n")
    with pytest.raises(ConfigError, match=r"lights\.yaml is not valid YAML: line 9: 'intents' a second time \(first on line 2\)$"):
        IntentRecognizer.load([twice])
    names = tmp_path / "names.yaml"
    names.write_text("name: [attic fan]\narea: [attic]\nname: [cellar fan]\n")
    with pytest.raises(ConfigError, match=r"^intents\.list_files in .*names\.yaml: .*'name' a second time"):
        SlotLists.from_file(names)
    # YAML's merge key may be overridden, and equal keys in different mappings are no duplicates
    merged = tmp_path / "merged.yaml"
    merged.write_text("language: en\nintents:\n  Up:\n    data:\n      - &up\n        sentences: ['switch on {name}']\n"
                      "        slots: {domain: light}\n      - <<: *up\n        slots: {domain: fan}\n"
                      "  Down:\n    data:\n      - sentences: ['switch off {name}']\n"
                      "lists:\n  name:\n    values: [lamp]\n")
    recognizer = IntentRecognizer.load([merged])
    assert recognizer.recognize("switch on lamp").name == "Up"  # type: ignore[union-attr]
    assert recognizer.recognize("switch off lamp").name == "Down"  # type: ignore[union-attr]
    # YAML 1.1 reads an intent named On as true: it was published as {"intentName": true}
    merged.write_text(merged.read_text().replace("Up:", "On:"))
    with pytest.raises(ConfigError, match=r"^intents\.True in .*merged\.yaml: an intent name must be text, YAML read this one as True: put it in quotes"):
        IntentRecognizer.load([merged])


def test_an_empty_recognizer_recognizes_nothing_and_boosts_nothing() -> None:
    from voiced.intentconfig import IntentsSection

    empty = IntentRecognizer.from_section(IntentsSection())
    assert not empty.enabled and empty.intent_names == () and empty.language == "en"
    assert empty.recognize("turn on the kitchen light") is None
    assert empty.hotwords() == [] and empty.vocabulary() == []
    assert IntentRecognizer.from_section(IntentsSection(language="de")).language == "de"
    again = empty.reload()
    assert not again.enabled
    with pytest.raises(ConfigError, match="no template files given"):
        IntentRecognizer.load([])


def test_hotwords_are_bounded_and_put_list_values_first(tmp_path: Path) -> None:
    from voiced.intentconfig import BuiltinSet, IntentsSection, SlotLists

    (tmp_path / "lights.yaml").write_text(LIGHTS)
    (tmp_path / "lists.yaml").write_text(LISTS)
    names = [f"lamp number {i}" for i in range(40)]
    section = IntentsSection(templates=(str(tmp_path / "*.yaml"),), builtin=BuiltinSet.HOME_ASSISTANT,
                             lists=SlotLists.from_config({"name": names, "area": ["scullery"]}, "lists"))
    rec = IntentRecognizer.from_section(section)
    everything = rec.vocabulary()
    assert len(everything) > 300  # the built-in set has hundreds of words
    top = rec.hotwords(60)
    assert len(top) == 60 and len(set(top)) == 60
    assert set(top[:41]) == {*names, "scullery"}  # the config's lists first
    assert {"turn", "on", "off", "switch", "percent"} <= set(top[41:])  # then the user's words
    assert rec.hotwords(0) == [] and len(rec.hotwords(10_000)) == len([p for p in everything if len(p) > 1])
    assert all(any(c.isalpha() for c in p) and len(p) > 1 for p in rec.hotwords(10_000))
    # Whisper's prompt: the config's phrases only (not the templates' lists), each once
    assert sorted(rec.list_phrases()) == sorted([*names, "scullery"])
    assert IntentRecognizer.from_section(IntentsSection()).list_phrases() == []


def test_a_sentence_a_decoder_confirmed_is_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoders confirm a template sentence with hassil's match (the sentence space's
    verifier); the intent stage's ``recognize`` of that transcript is then a lookup, not a second
    parse, and gives what a parse gives. Long texts are parsed and not kept."""
    import hassil

    from voiced.intents import RECENT_TEXT_CHARS
    from voiced.sentencespace import Completion

    (tmp_path / "lists.yaml").write_text(LISTS)
    recognizer = IntentRecognizer.load([tmp_path / "lists.yaml"])
    space = recognizer.sentence_space()
    fresh = IntentRecognizer.load([tmp_path / "lists.yaml"]).recognize("Set the kitchen lights to 40 percent.")
    parsed: list[str] = []
    real = hassil.recognize_best

    def counted(text, *args, **kwargs):  # the real parse, counted
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(hassil, "recognize_best", counted)
    assert space.complete(" Set the kitchen lights to 40 percent.") is Completion.FINAL  # as Whisper writes it
    assert parsed == ["Set the kitchen lights to 40 percent."]
    intent = recognizer.recognize("Set the kitchen lights to 40 percent.")  # the transcript, stripped
    assert parsed == ["Set the kitchen lights to 40 percent."]
    assert intent is not None and intent.name == "HassLightSet"
    assert intent == fresh
    assert recognizer.recognize("set the living room lights to 5 percent") is not None and len(parsed) == 2
    long_text = "set the kitchen lights " * (RECENT_TEXT_CHARS // 20)
    for _ in range(2):
        assert recognizer.recognize(long_text) is None
    assert parsed.count(long_text) == 2

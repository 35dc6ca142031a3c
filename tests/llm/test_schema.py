"""Templates → what the LLM may answer; the prompt; the check every answer passes."""

from __future__ import annotations

import json

import pytest

from voiced.intents import IntentRecognizer, IntentSource, SlotKind
from voiced.llm.catalog import IntentCatalog, NumberRange
from voiced.llm.prompt import build_prompt
from voiced.llm.schema import (
    LLM_CONFIDENCE,
    AnswerKind,
    answer_schema,
    parse_answer,
    wildcard_spans,
)

TEXT = "Set the sleeping room lights to 40 percent, please!"


def test_the_catalog_has_every_intent_with_its_slots_values_and_fixed_slots(catalog: IntentCatalog,
                                                                             recognizer: IntentRecognizer) -> None:
    assert catalog.names == recognizer.intent_names
    light_set = catalog.get("HassLightSet")
    assert light_set is not None and light_set.fixed == (("domain", "light"),)
    area, brightness = light_set.slots
    (domain,) = area.domains
    assert domain.kind is SlotKind.LIST and domain.entity == "area"
    assert [(v.value, v.phrases) for v in domain.values] == [
        ("living_room", ("living room",)), ("bedroom", ("bed room", "sleeping room")), ("kitchen", ("kitchen",))]
    assert brightness.domains[0].numbers == NumberRange(0, 100)
    turn_on = catalog.get("HassTurnOn")
    assert turn_on is not None and [s.name for s in turn_on.slots] == ["name", "area"]
    assert turn_on.slots[0].domains[0].kind is SlotKind.WILDCARD  # {name} is defined nowhere
    assert catalog.restricted(["HassTurnOff", "Unknown"]).names == ("HassTurnOff",)
    assert catalog.restricted(None) is catalog


def test_wildcards_take_runs_of_the_utterances_words_without_punctuation() -> None:
    spans = wildcard_spans("Turn on the kitchen light, now!")
    assert "kitchen light" in spans and "Turn on the kitchen light now" in spans
    assert not any("," in s or "!" in s for s in spans)
    assert len(wildcard_spans(" ".join(f"w{i}" for i in range(30)))) == 30 * 8 - 28  # runs of at most 8 words


def test_the_schema_lists_every_intent_and_none(catalog: IntentCatalog) -> None:
    schema = answer_schema(catalog, "turn on the lamp")
    branches = schema["anyOf"]
    assert [b["properties"]["intent"] for b in branches] == [{"const": n} for n in catalog.names] + [{"type": "null"}]
    turn_on = branches[catalog.names.index("HassTurnOn")]["properties"]["slots"]
    assert turn_on["additionalProperties"] is False
    assert "the lamp" in turn_on["properties"]["name"]["enum"]
    assert turn_on["properties"]["area"] == {"enum": ["living_room", "bedroom", "kitchen"]}
    json.dumps(schema)  # what is handed to the runtime


def test_a_valid_answer_becomes_an_llm_intent_with_positions_where_the_text_says_it(catalog: IntentCatalog) -> None:
    raw = '{"intent": "HassLightSet", "slots": {"brightness": 40, "area": "bedroom"}}'
    parsed = parse_answer(raw, catalog, TEXT)
    assert parsed.kind is AnswerKind.INTENT and parsed.intent is not None
    intent = parsed.intent
    assert (intent.name, intent.text, intent.source, intent.confidence) == ("HassLightSet", TEXT, IntentSource.LLM, LLM_CONFIDENCE)
    area, brightness, domain = intent.slots  # in order of appearance, FIXED last
    assert (area.value, area.raw_value, area.kind) == ("bedroom", "sleeping room", SlotKind.LIST)
    assert TEXT[area.start:area.end] == "sleeping room"  # type: ignore[misc]
    assert (brightness.value, brightness.kind, TEXT[brightness.start:brightness.end]) == (40, SlotKind.NUMBER, "40")  # type: ignore[misc]
    assert (domain.value, domain.kind, domain.start) == ("light", SlotKind.FIXED, None)


def test_a_value_the_text_does_not_say_has_no_position(catalog: IntentCatalog) -> None:
    parsed = parse_answer('{"intent": "HassTurnOn", "slots": {"area": "kitchen", "name": "lights"}}', catalog, TEXT)
    assert parsed.intent is not None
    name, area = parsed.intent.slots
    assert (name.value, TEXT[name.start:name.end]) == ("lights", "lights")  # type: ignore[misc]
    assert (area.value, area.raw_value, area.start, area.end) == ("kitchen", "kitchen", None, None)


def test_none_is_an_answer_too(catalog: IntentCatalog) -> None:
    assert parse_answer('{"intent": null, "slots": {}}', catalog, TEXT).kind is AnswerKind.NONE


@pytest.mark.parametrize("raw", [
    "",
    '{"intent": "HassTurnOn", "slots": {}',  # cut short
    '{"intent": "HassTurnOn"}',
    '{"intent": "HassTurnOn", "slots": {}, "why": "x"}',
    '["HassTurnOn", {}]',
    '{"intent": "HassOpenDoor", "slots": {}}',
    '{"intent": 3, "slots": {}}',
    '{"intent": "HassTurnOn", "slots": []}',
    '{"intent": "HassTurnOff", "slots": {"area": "kitchen"}}',  # a slot this intent has not
    '{"intent": "HassTurnOn", "slots": {"area": "garage"}}',
    '{"intent": "HassTurnOn", "slots": {"area": 1}}',
    '{"intent": "HassLightSet", "slots": {"brightness": 101}}',
    '{"intent": "HassLightSet", "slots": {"brightness": true}}',
    '{"intent": "HassLightSet", "slots": {"brightness": 40.5}}',
    '{"intent": "HassLightSet", "slots": {"brightness": "40"}}',
    '{"intent": "HassTurnOn", "slots": {"name": "garage door"}}',  # words the user did not say
    '{"intent": null, "slots": {"area": "kitchen"}}',
])
def test_anything_else_is_refused(catalog: IntentCatalog, raw: str) -> None:
    parsed = parse_answer(raw, catalog, TEXT)
    assert parsed.kind is AnswerKind.INVALID and parsed.intent is None and parsed.problem


def test_ranges_check_step_fraction_and_apply_the_multiplier() -> None:
    r = NumberRange(10, 30, step=5, fractions=(0.5,), multiplier=0.1)
    assert [r.accepts(n) for n in (10, 15.5, 12, 31, 15.2, False)] == [True, True, False, False, False, False]
    assert r.normalized(20) == 2 and r.normalized(15.5) == pytest.approx(1.55)


def test_the_prompt_names_the_intents_slots_and_values(catalog: IntentCatalog) -> None:
    prompt = build_prompt(catalog, "  dim the bedroom  ")
    assert prompt.user == "dim the bedroom"
    for needle in ("HassLightSet", "HassTurnOn", "brightness = a number from 0 to 100", '"bedroom" (bed room, sleeping room)',
                   "name = words of the command", '"intent": null'):
        assert needle in prompt.system
    assert [m["role"] for m in prompt.messages()] == ["system", "user"]
    assert prompt.plain().endswith("Command: dim the bedroom\nJSON: ")

"""What the cloud may answer, from the templates, and how its answer is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from voiced.cloud import CloudError, CloudErrorKind, IntentCatalog
from voiced.intents import IntentRecognizer, IntentSource, SlotKind

from .conftest import TEMPLATES


def test_from_recognizer_reads_its_files(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TEMPLATES[0]))
    recognizer = IntentRecognizer.load([tmp_path / "t.yaml"])
    catalog = IntentCatalog.from_recognizer(recognizer)
    assert set(catalog.names) == set(recognizer.intent_names)
    assert catalog.language == "en"
    described = catalog.describe()
    assert described["HassLightSet"]["area"] == ["living_room", "kitchen"]
    assert described["HassLightSet"]["brightness"] == "number from 0 to 100"
    assert described["HassTurnOn"]["name"] == "free text from the sentence"  # an undefined list: any text


def test_interpret_normalizes_values_and_adds_fixed_slots(catalog: IntentCatalog) -> None:
    text = "set the living room lights to fifty percent"
    intent = catalog.interpret({"intent": "HassLightSet", "slots": {"area": "Living Room", "brightness": "50"}}, text)
    assert intent is not None and intent.source is IntentSource.CLOUD
    assert intent.slot_values == {"area": "living_room", "brightness": 50, "domain": "light"}
    area = intent.slot("area")
    assert area is not None and area.kind is SlotKind.LIST
    assert (area.start, area.end) == (8, 19) and text[8:19] == "living room"
    assert intent.slot("domain").kind is SlotKind.FIXED  # type: ignore[union-attr]


@pytest.mark.parametrize("answer", [
    {"intent": None, "slots": {}},
    {"intent": "HassUnlockEverything", "slots": {}},  # not a known intent
    {"intent": "HassLightSet", "slots": {"area": "garage"}},  # not in the list
    {"intent": "HassLightSet", "slots": {"brightness": 250}},  # out of range
    {"intent": "HassTurnOn", "slots": {"colour": "red"}},  # a slot the intent does not have
    {"intent": "HassTurnOn", "slots": {"name": True}},
])
def test_answers_outside_the_known_set_give_no_intent(catalog: IntentCatalog, answer: dict) -> None:
    assert catalog.interpret(answer, "whatever") is None


@pytest.mark.parametrize("answer", [[], "HassTurnOn", {"slots": {}}, {"intent": 3}, {"intent": "HassTurnOn", "slots": []}])
def test_wrong_shapes_are_malformed(catalog: IntentCatalog, answer: object) -> None:
    with pytest.raises(CloudError) as err:
        catalog.interpret(answer, "whatever")
    assert err.value.kind is CloudErrorKind.MALFORMED


def test_restricted_to_an_intent_filter(catalog: IntentCatalog) -> None:
    only = catalog.restricted(["HassTurnOff"])
    assert only.names == ("HassTurnOff",)
    assert only.interpret({"intent": "HassTurnOn", "slots": {}}, "x") is None
    assert catalog.restricted(None) is catalog


def test_from_names_accepts_slots_as_text() -> None:
    catalog = IntentCatalog.from_names(["Timer"])
    intent = catalog.interpret({"intent": "Timer", "slots": {"minutes": 5}}, "a timer for 5 minutes")
    assert intent is not None and intent.slot_values == {"minutes": "5"}

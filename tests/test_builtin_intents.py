"""Home Assistant's built-in sentences (home-assistant-intents) through voiced's recognizer.

The expected intents and slots are what Home Assistant's own conversation agent gives for
the same sentence with the same areas and names: intent names, slot names, numbers as
numbers, fixed slots such as ``domain``, the device's area filled in from ``site_area``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from voiced.config import Config
from voiced.errors import ConfigError
from voiced.intentconfig import BuiltinSet, IntentsSection, SlotLists
from voiced.intents import IntentRecognizer, SlotKind

LISTS: dict[str, Any] = {
    "name": ["kitchen light", "porch light", "desk lamp",
             {"in": "front door", "context": {"domain": "lock"}},
             {"in": "ceiling fan", "context": {"domain": "fan"}},
             {"in": "garage door", "context": {"domain": "cover"}},
             {"in": "thermostat", "context": {"domain": "climate"}},
             {"in": "outdoor temperature", "context": {"domain": "sensor"}}],
    "area": ["kitchen", "living room", "bedroom", "office", {"in": "lounge", "out": "living room"}],
    "floor": ["upstairs", "downstairs"],
}


def builtin(**extra: Any) -> IntentsSection:
    lists = SlotLists.from_config(extra.pop("lists", LISTS), "intents.lists")
    return IntentsSection(builtin=BuiltinSet.HOME_ASSISTANT, lists=lists, **extra)


@pytest.fixture(scope="module")
def home() -> IntentRecognizer:
    return IntentRecognizer.from_section(builtin(site_area="office"))


COMMANDS = [
    # lights by name, by area, by floor, and here (the device's area)
    ("turn on the kitchen light", "HassTurnOn", {"name": "kitchen light"}),
    ("Turn off the porch light.", "HassTurnOff", {"name": "porch light"}),
    ("switch on the desk lamp", "HassTurnOn", {"name": "desk lamp"}),
    ("please turn on the kitchen light", "HassTurnOn", {"name": "kitchen light"}),
    ("TURN ON THE KITCHEN LIGHT", "HassTurnOn", {"name": "kitchen light"}),
    ("turn on the lights in the living room", "HassTurnOn", {"area": "living room", "domain": "light"}),
    ("turn off the lights in the lounge", "HassTurnOff", {"area": "living room", "domain": "light"}),
    ("turn off the bedroom lights", "HassTurnOff", {"area": "bedroom", "domain": "light"}),
    ("lights on in the kitchen", "HassTurnOn", {"area": "kitchen", "domain": "light"}),
    ("turn on the lights", "HassTurnOn", {"area": "office", "domain": "light"}),
    ("turn off all the lights upstairs", "HassTurnOff", {"floor": "upstairs", "domain": "light"}),
    # brightness and colour
    ("set the kitchen light brightness to 30 percent", "HassLightSet", {"name": "kitchen light", "brightness": 30}),
    ("set the brightness in the bedroom to fifty percent", "HassLightSet",
     {"area": "bedroom", "brightness": 50, "domain": "light"}),
    ("set brightness to 40 percent", "HassLightSet", {"brightness": 40, "domain": "light", "area": "office"}),
    ("turn the porch light red", "HassLightSet", {"name": "porch light", "color": "red"}),
    ("make the kitchen light green", "HassLightSet", {"name": "kitchen light", "color": "green"}),
    # timers
    ("set a timer for 5 minutes", "HassStartTimer", {"minutes": 5}),
    ("start a 10 minute timer", "HassStartTimer", {"minutes": 10}),
    ("set a timer for 1 hour and 30 minutes", "HassStartTimer", {"hours": 1, "minutes": 30}),
    ("set a timer for 45 seconds", "HassStartTimer", {"seconds": 45}),
    ("set a 2 minute timer called pasta", "HassStartTimer", {"minutes": 2, "name": "pasta"}),
    ("in 10 minutes turn off the kitchen light", "HassStartTimer",
     {"minutes": 10, "conversation_command": "turn off the kitchen light"}),
    ("cancel the timer", "HassCancelTimer", {}),
    ("cancel my pasta timer", "HassCancelTimer", {"name": "pasta"}),
    ("cancel all timers", "HassCancelAllTimers", {}),
    ("how much time is left on my timer", "HassTimerStatus", {}),
    ("pause the timer", "HassPauseTimer", {}),
    ("resume the timer", "HassUnpauseTimer", {}),
    ("add 5 minutes to my timer", "HassIncreaseTimer", {"minutes": 5}),
    ("remove 2 minutes from the timer", "HassDecreaseTimer", {"minutes": 2}),
    # state questions
    ("is the kitchen light on", "HassGetState", {"name": "kitchen light", "state": "on"}),
    ("is the porch light off", "HassGetState", {"name": "porch light", "state": "off"}),
    ("is the front door locked", "HassGetState", {"name": "front door", "state": "locked"}),
    ("are any lights on in the kitchen", "HassGetState", {"state": "on", "area": "kitchen", "domain": "light"}),
    ("which lights are on", "HassGetState", {"state": "on", "domain": "light"}),
    ("what's the state of the desk lamp", "HassGetState", {"name": "desk lamp"}),
    ("what is the outdoor temperature", "HassGetState", {"name": "outdoor temperature"}),
    ("what's the temperature", "HassClimateGetTemperature", {"area": "office"}),
    ("what time is it", "HassGetCurrentTime", {}),
    ("what is today's date", "HassGetCurrentDate", {}),
    ("what's the weather", "HassGetWeather", {}),
    # cancel / never mind
    ("never mind", "HassNevermind", {}),
    ("nevermind", "HassNevermind", {}),
    # other domains, each name only in its own domain's sentences
    ("unlock the front door", "HassTurnOff", {"name": "front door"}),
    ("lock the front door", "HassTurnOn", {"name": "front door"}),
    ("open the garage door", "HassTurnOn", {"name": "garage door"}),
    ("set the thermostat to 21 degrees", "HassClimateSetTemperature", {"name": "thermostat", "temperature": 21}),
    ("set the ceiling fan speed to 50 percent", "HassFanSetSpeed", {"name": "ceiling fan", "percentage": 50}),
    ("add milk to my shopping list", "HassShoppingListAddItem", {"item": "milk"}),
]


@pytest.mark.parametrize(("text", "intent", "slots"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_builtin_english_commands(home: IntentRecognizer, text: str, intent: str, slots: dict[str, Any]) -> None:
    got = home.recognize(text)
    assert got is not None, f"{text!r} was not recognized"
    assert (got.name, got.slot_values) == (intent, slots)


@pytest.mark.parametrize("text", ["make me a sandwich", "tell me a joke", "turn on the front door",
                                  "turn on the garden hose", "the", ""])
def test_what_home_assistant_would_not_understand_is_none(home: IntentRecognizer, text: str) -> None:
    # "turn on the front door": the front door is a lock, and locks are locked, not turned on
    assert home.recognize(text) is None


def test_slots_say_where_their_values_came_from(home: IntentRecognizer) -> None:
    light = home.recognize("set the brightness in the lounge to 20 percent")
    assert light is not None
    area, brightness, domain = light.slot("area"), light.slot("brightness"), light.slot("domain")
    assert area is not None and (area.raw_value, area.value, area.kind) == ("lounge", "living room", SlotKind.LIST)
    assert brightness is not None and brightness.kind is SlotKind.NUMBER and isinstance(brightness.value, int)
    assert domain is not None and domain.kind is SlotKind.FIXED
    here = home.recognize("turn on the lights")
    assert here is not None and here.slot("area") is not None and here.slot("area").start is None  # type: ignore[union-attr]


def test_a_name_without_a_domain_takes_every_name_sentence(home: IntentRecognizer) -> None:
    # "desk lamp" has no domain: voiced cannot know it is a light, Home Assistant will
    fan_like = home.recognize("set the desk lamp to 75%")
    assert fan_like is not None and fan_like.slot_values["name"] == "desk lamp"
    typed = IntentRecognizer.from_section(builtin(lists={**LISTS, "name": [
        {"in": "desk lamp", "context": {"domain": "light"}}]}))
    light = typed.recognize("set the desk lamp to 75%")
    assert light is not None and (light.name, light.slot_values) == ("HassLightSet", {"name": "desk lamp", "brightness": 75})
    assert typed.recognize("unlock the desk lamp") is None


def test_user_templates_win_over_builtin_sentences(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("""
language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["wake up [the] {name}"]
  MovieTime:
    data:
      - sentences: ["turn on the lights in the living room"]
lists:
  color:
    values: [{in: "sunset", out: "orange"}]
expansion_rules:
  light: "(light|lights|lamp|glow)"
""")
    rec = IntentRecognizer.from_section(builtin(templates=(str(tmp_path / "mine.yaml"),)))
    # the same sentence in both: the user's intent wins
    movie = rec.recognize("turn on the lights in the living room")
    assert movie is not None and (movie.name, movie.slots) == ("MovieTime", ())
    # a user block joins the built-in intent of the same name, which keeps its own sentences
    woke = rec.recognize("wake up the porch light")
    assert woke is not None and (woke.name, woke.slot_values) == ("HassTurnOn", {"name": "porch light"})
    assert rec.recognize("turn on the porch light") is not None
    # a list of the same name replaces the built-in one; a rule changes built-in sentences too
    assert rec.recognize("turn the porch light sunset").slot_values["color"] == "orange"  # type: ignore[union-attr]
    assert rec.recognize("turn the porch light red") is None
    glow = rec.recognize("turn off the bedroom glow")
    assert glow is not None and glow.slot_values == {"area": "bedroom", "domain": "light"}
    assert "MovieTime" in rec.intent_names and "HassNevermind" in rec.intent_names


def test_config_lists_replace_file_lists_and_list_files_load_in_order(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: [attic fan]\narea: [attic]\n")
    (tmp_path / "b.yaml").write_text("area: [cellar]\n")
    section = builtin(lists={"floor": ["upstairs"]}, list_files=(str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")))
    rec = IntentRecognizer.from_section(section)
    assert rec.recognize("turn on the attic fan").slot_values == {"name": "attic fan"}  # type: ignore[union-attr]
    assert rec.recognize("turn on the lights in the cellar") is not None
    assert rec.recognize("turn on the lights in the attic") is None  # b.yaml's area replaced a.yaml's
    # a name with template characters is a literal phrase, as Home Assistant feeds names
    odd = IntentRecognizer.from_section(builtin(lists={"name": ["TV (den)"]}))
    assert odd.recognize("turn on the TV (den)").slot_values == {"name": "TV (den)"}  # type: ignore[union-attr]


def test_unfilled_lists_are_off_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="voiced"):
        rec = IntentRecognizer.from_section(IntentsSection(builtin=BuiltinSet.HOME_ASSISTANT))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in ("name", "area", "floor"):
        assert sum(f"{{{name}}}" in m for m in warned) == 1, warned
    assert rec.recognize("turn on the kitchen light") is None  # no names: no name sentences
    assert rec.recognize("set a timer for 5 minutes").name == "HassStartTimer"  # type: ignore[union-attr]
    assert rec.recognize("turn on the lights") is None  # no site_area: "here" is unknown


def test_a_user_template_using_an_unfilled_list_makes_it_a_wildcard(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text('intents:\n  Wake:\n    data:\n      - sentences: ["wake up {name}"]\n')
    rec = IntentRecognizer.from_section(IntentsSection(templates=(str(tmp_path / "mine.yaml"),),
                                                       builtin=BuiltinSet.HOME_ASSISTANT))
    assert rec.recognize("wake up the big lamp").slot_values == {"name": "the big lamp"}  # type: ignore[union-attr]
    turned = rec.recognize("turn on the big lamp")
    assert turned is not None and turned.name == "HassTurnOn" and turned.slot("name").kind is SlotKind.WILDCARD  # type: ignore[union-attr]


def test_excluded_intents_and_language_variants() -> None:
    rec = IntentRecognizer.from_section(builtin(exclude=("HassBroadcast", "HassShoppingListAddItem"), language="en-US"))
    assert "HassBroadcast" not in rec.intent_names and rec.language == "en"
    assert rec.recognize("add milk to my shopping list") is None
    with pytest.raises(ConfigError, match="HassNoSuchThing") as err:
        IntentRecognizer.from_section(builtin(exclude=("HassNoSuchThing",)), "/etc/voiced/voiced.toml")
    assert err.value.key == "intents.exclude" and "/etc/voiced/voiced.toml" in str(err.value)
    with pytest.raises(ConfigError, match="no sentences for 'xx'"):
        IntentRecognizer.from_section(builtin(language="xx"))


def test_template_language_must_match(tmp_path: Path) -> None:
    (tmp_path / "de.yaml").write_text('language: de\nintents:\n  X:\n    data:\n      - sentences: ["licht an"]\n')
    with pytest.raises(ConfigError, match="'de'") as err:
        IntentRecognizer.from_section(builtin(templates=(str(tmp_path / "de.yaml"),), language="en"))
    assert str(tmp_path / "de.yaml") in str(err.value)
    (tmp_path / "en.yaml").write_text('language: en\nintents:\n  Y:\n    data:\n      - sentences: ["lights please"]\n')
    regional = IntentRecognizer.from_section(builtin(templates=(str(tmp_path / "en.yaml"),), language="en_US"))
    assert regional.language == "en" and regional.recognize("lights please").name == "Y"  # type: ignore[union-attr]
    # without [intents] language the files' language picks the built-in set
    german = IntentRecognizer.from_section(builtin(templates=(str(tmp_path / "de.yaml"),), lists={"name": ["Lampe"]}))
    assert german.language == "de" and german.recognize("licht an").name == "X"  # type: ignore[union-attr]
    assert german.recognize("schalte die Lampe ein").name == "HassTurnOn"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("toml", "key", "fragment"),
    [
        ('[intents.lists]\nname = "kitchen light"\n', "intents.lists.name", "must be a list"),
        ('[intents.lists]\nname = ["kitchen light", 3]\n', "intents.lists.name[1]", "phrase or a table"),
        ('[intents.lists]\narea = [""]\n', "intents.lists.area[0]", "non-empty"),
        ('[intents.lists]\nname = [{ in = "lamp", colour = "red" }]\n', "intents.lists.name[0]", "colour"),
        ('[intents.lists]\nname = [{ in = "lamp", context = "light" }]\n', "intents.lists.name[0]", "'context'"),
        ('[intents.lists]\nname = [{ out = "lamp" }]\n', "intents.lists.name[0]", "non-empty"),
        ('[intents]\nlists = ["names.yaml"]\n', "intents.lists", "table of lists"),
        ('[intents]\nbuiltin = "alexa"\n', "intents.builtin", "home-assistant"),
        ('[intents]\nexclude = ["HassBroadcast"]\n', "intents.exclude", "builtin"),
    ],
)
def test_malformed_config_lists_name_key_and_file(tmp_path: Path, toml: str, key: str, fragment: str) -> None:
    path = tmp_path / "voiced.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as err:
        Config.from_file(path)
    assert err.value.key == key and str(path) in str(err.value) and fragment in str(err.value)


def test_malformed_list_file_names_key_and_file(tmp_path: Path) -> None:
    lists = tmp_path / "names.yaml"
    lists.write_text("name:\n  - kitchen light\n  - {in: lamp, out: [1]}\n")
    (tmp_path / "voiced.toml").write_text('[intents]\nbuiltin = "home-assistant"\nlist_files = ["names.yaml"]\n')
    config = Config.from_file(tmp_path / "voiced.toml")
    assert config.intents.list_files == (str(lists),)
    with pytest.raises(ConfigError) as err:
        IntentRecognizer.from_section(config.intents)
    assert err.value.key == "lists.name[1]" and err.value.source == str(lists) and "'out'" in str(err.value)
    lists.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="must map list names") as err:
        IntentRecognizer.from_section(config.intents)
    assert str(lists) in str(err.value)


def test_a_config_without_intents_is_transcription_only(tmp_path: Path) -> None:
    path = tmp_path / "voiced.toml"
    path.write_text('[asr]\nmax_hotwords = 0\n[mqtt]\nhost = "localhost"\n')
    config = Config.from_file(path)
    assert not config.intents.enabled
    assert not IntentRecognizer.from_section(config.intents, str(path)).enabled
    path.write_text("[asr]\nmax_hotwords = -1\n")
    with pytest.raises(ConfigError, match="asr.max_hotwords"):
        Config.from_file(path)


def test_the_fallbacks_offer_the_builtin_intents_and_nothing_when_intents_are_off(home: IntentRecognizer) -> None:
    from voiced.cloud import CloudRouter, IntentCatalog
    from voiced.cloud.config import CloudConfig
    from voiced.llm.catalog import IntentCatalog as LlmCatalog
    from voiced.llm.schema import answer_schema, parse_answer

    cloud = IntentCatalog.from_recognizer(home)
    assert set(cloud.names) == set(home.intent_names) and cloud.language == "en"
    turn_on = cloud.describe()["HassTurnOn"]
    assert set(turn_on["name"]) == {v if isinstance(v, str) else v["in"] for v in LISTS["name"]}
    assert "living room" in turn_on["area"] and turn_on["floor"] == ["upstairs", "downstairs"]
    answer = cloud.interpret({"intent": "HassTurnOn", "slots": {"name": "kitchen light"}}, "turn on the kitchen light")
    assert answer is not None and answer.slot_values == {"name": "kitchen light"}
    llm = LlmCatalog.from_recognizer(home)
    assert llm.names == home.intent_names
    text = "switch the kitchen light on"
    branches = {b["properties"]["intent"].get("const"): b for b in answer_schema(llm, text)["anyOf"]}
    assert set(branches) == {*home.intent_names, None}
    assert "kitchen light" in str(branches["HassTurnOn"]["properties"]["slots"]["properties"]["name"])
    parsed = parse_answer('{"intent": "HassTurnOn", "slots": {"name": "kitchen light"}}', llm, text)
    assert parsed.intent is not None and parsed.intent.slot_values == {"name": "kitchen light"}

    off = IntentRecognizer.from_section(IntentsSection())
    assert IntentCatalog.from_recognizer(off).names == () and LlmCatalog.from_recognizer(off).names == ()
    router = CloudRouter.from_recognizer(CloudConfig(enabled=True, intent=True, base_url="http://127.0.0.1:9"), off)
    try:
        assert not router.should_use_cloud_intent(None)  # nothing to choose from: never asked
    finally:
        router.close()

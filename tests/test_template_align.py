"""Template sentences a few word edits from a free transcript (``voiced.asr.template_align``), no weights.

The misses it is for, from ``voiced bench commands``' development half: the first word lost or
misheard and a word too many at the end, while the middle of the command came out right.
"""

from __future__ import annotations

import pytest

from voiced.asr.template_align import AlignSettings, sentences_near
from voiced.intents import IntentRecognizer

TEMPLATES = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences:
          - "turn on [the] {name}"
  HassMediaPause:
    data:
      - sentences:
          - "pause [the] {name} [in] {area}"
  HassMediaUnpause:
    data:
      - sentences:
          - "(unpause|resume) [the] {name} [in] {area}"
lists:
  name:
    values: ["lamp", "kitchen light", "tv shows", "media players"]
  area:
    values: ["kitchen", "bathroom", "office"]
"""


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("align") / "intents.yaml"
    path.write_text(TEMPLATES)
    return IntentRecognizer.load([path]).sentence_space()


def test_a_lost_first_word_and_a_word_too_many_at_the_end(space) -> None:
    near = sentences_near(space, " the media players in my bathroom people.")
    # "my" is no template word: the nearest sentences drop it, and the lost verb is each one the rest follows
    assert {"pause the media players in bathroom", "unpause the media players in bathroom",
            "resume the media players in bathroom"} <= set(near)


def test_a_misheard_first_word_and_names_spelled_alike(space) -> None:
    near = sentences_near(space, " And lost the TV shows and kitchen")
    assert near[:1] in (["pause the tv shows in kitchen"], ["unpause the tv shows in kitchen"])
    assert "turn on the kitchen light" in sentences_near(space, " Turn on the kitchen lie.")


def test_read_speech_and_far_texts_find_nothing(space) -> None:
    assert sentences_near(space, "The birch canopy of the forest was starting to turn yellow in the autumn sun.") == []
    assert sentences_near(space, "") == []
    # no sentence within three word edits; "pause lamp kitchen" is five (the default bound)
    assert sentences_near(space, " please could you pause it", AlignSettings(max_edits=3)) == []
    assert "pause lamp kitchen" in sentences_near(space, " please could you pause it")


def test_the_bounds_hold(space) -> None:
    near = sentences_near(space, " the media players in my bathroom people", AlignSettings(results=2))
    assert len(near) == 2
    assert sentences_near(space, " the media players in my bathroom people", AlignSettings(max_edits=1)) == []

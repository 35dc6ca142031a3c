"""Phoneme ids equal piper-tts 1.8's (its espeak-ng phonemizer and phonemes_to_ids), sentence for sentence."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.tts.reference import DEFAULT_PHONEME_ID_MAP, piper_ids, piper_phonemes
from voiced.tts.config import VoiceConfig, VoiceSettings
from voiced.tts.errors import NothingToSpeak, TextError
from voiced.tts.phonemes import EspeakPhonemizer, phonemes_to_ids
from voiced.tts.sentences import check_text, split_long
from voiced.tts.voice import PiperVoice

TEXTS = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog!",
    "Is it 7:30 or 19:45? I paid $3.50 for 2 coffees, i.e. 1.75 each.",
    "Dr. Smith lives at 221B Baker St. in London; he was born on 1/2/1854.",
    'Wait... what?! No -- really? Yes: "quoted" (parenthetical) text, etc.',
    "It's 100% true: the U.S.A. has 50 states & 1 capital.",
    "Numbers: 1, 22, 333, 4444, 55555, 3.14159, -7, 1st, 2nd, 3rd, 1,000,000.",
    "First sentence. Second sentence! Third sentence? Fourth; and a fifth: done.",
    "Line one\nLine two\n\nNew paragraph here.",
    "Café naïve résumé — über coöperation, façade.",
    "e.g. etc. vs. Mr. Mrs. Ms. Jr. approx. NASA, FBI and IKEA.",
    "Set the timer for 15 minutes at 50% power, then call +1 (555) 123-4567.",
]


def reference_ids(text: str, voice: str = "en-us") -> list[list[int]]:
    """What piper-tts feeds its models with its default id map (the self-made test voices use it)."""
    return piper_ids(text, voice)


def test_the_reference_splits_into_sentences_as_voiced_expects() -> None:
    assert len(reference_ids(TEXTS[7])) == 4  # ". ! ?" end sentences; ";" and ":" do not
    assert len(reference_ids(TEXTS[8])) >= 2


@pytest.mark.parametrize("config_name", ["lessac_medium", "lessac_low"])
def test_ids_equal_piper_tts_with_the_real_lessac_configs(config_name: str, request: pytest.FixtureRequest,
                                                                tmp_path: Path) -> None:
    config = VoiceConfig.from_dict(request.getfixturevalue(config_name))
    phonemizer = EspeakPhonemizer(config.espeak_voice)
    for text in TEXTS:
        ours = [phonemes_to_ids(s, config.phoneme_id_map) for s in phonemizer.phonemize(text) if s]
        assert ours == piper_ids(text, id_map=config.phoneme_id_map), text


def test_ids_through_the_voice_equal_piper_tts(lessac_id_voice: Path) -> None:
    voice = PiperVoice.load(lessac_id_voice)
    for text in TEXTS:
        assert [list(s.ids) for s in voice.sentences(text)] == piper_ids(text, id_map=voice.config.phoneme_id_map), text


def test_ids_with_the_self_made_config(id_voice: Path) -> None:
    voice = PiperVoice.load(id_voice)
    for text in TEXTS[:4]:
        assert [list(s.ids) for s in voice.sentences(text)] == reference_ids(text), text


def test_piper_convention_bos_pad_eos() -> None:
    id_map = {"^": (1,), "_": (0,), "$": (2,), "a": (5,), "b": (6, 7)}
    missing: Counter[str] = Counter()
    assert phonemes_to_ids(["a", "x", "b"], id_map, missing=missing) == [1, 0, 5, 0, 6, 7, 0, 2]
    assert missing == Counter({"x": 1})
    assert phonemes_to_ids([], id_map) == [1, 0, 2]
    # phoneme_map substitutes before the lookup
    assert phonemes_to_ids(["c"], id_map, {"c": ("a", "b")}) == [1, 0, 5, 0, 6, 7, 0, 2]
    # unknown phonemes are skipped exactly as piper-tts skips them
    from piper.phoneme_ids import phonemes_to_ids as piper_phonemes_to_ids

    assert phonemes_to_ids(["🙂", "a"], {k: tuple(v) for k, v in DEFAULT_PHONEME_ID_MAP.items()}) == \
        piper_phonemes_to_ids(["🙂", "a"])


def test_empty_and_unspeakable_text_are_errors(id_voice: Path) -> None:
    voice = PiperVoice.load(id_voice)
    for text in ["", "   ", "\n\t"]:
        with pytest.raises(TextError, match="empty"):
            voice.sentences(text)
    for text in ["...", "( …"]:
        with pytest.raises(NothingToSpeak, match="nothing to speak"):  # a TextError a stream may skip
            voice.sentences(text)
    with pytest.raises(TextError, match="string"):
        check_text(None, 10)


def test_too_long_text_is_an_error_with_a_configurable_cap(id_voice: Path) -> None:
    short = PiperVoice.load(id_voice, settings=VoiceSettings(max_text_chars=20))
    with pytest.raises(TextError, match="21 characters long; the limit is 20"):
        short.synthesize("x" * 21)
    assert len(short.sentences("y" * 20)) == 1


def test_long_sentences_are_cut_at_clause_marks_then_spaces() -> None:
    phonemes = list("aaaa, bbbbbb cccc dddd")
    parts = split_long(phonemes, 10)
    assert ["".join(p) for p in parts] == ["aaaa,", "bbbbbb", "cccc dddd"]
    assert sum(len(p) for p in split_long(list("x" * 25), 10)) == 25  # no boundary: hard cuts, nothing lost
    assert split_long(phonemes, 100) == [phonemes]


def test_long_sentence_is_synthesized_in_parts(id_voice: Path) -> None:
    voice = PiperVoice.load(id_voice, settings=VoiceSettings(max_sentence_phonemes=40))
    text = "This sentence runs on and on, with clauses, and more clauses, and yet more words without any end"
    sentences = voice.sentences(text)
    assert len(sentences) > 1 and all(len(s.phonemes) <= 40 for s in sentences)
    whole: Any = piper_phonemes(text)[0]
    assert "".join(p for s in sentences for p in s.phonemes).replace(" ", "") == "".join(whole).replace(" ", "")


def test_text_phoneme_voices_use_codepoints(self_config: dict[str, Any], tmp_path: Path) -> None:
    from tests.tts.voicegen import make_voice

    config = dict(self_config, phoneme_type="text")
    config["phoneme_id_map"] = {**{c: [i + 3] for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,!?")},
                                "_": [0], "^": [1], "$": [2]}
    voice = PiperVoice.load(make_voice(tmp_path / "text", config, "ids"))
    import unicodedata

    # piper-tts: text voices take the NFD codepoints, no sentence split: one model call
    expected = [phonemes_to_ids(list(unicodedata.normalize("NFD", "Hi there. Bye!")), voice.config.phoneme_id_map)]
    assert [list(s.ids) for s in voice.sentences("Hi there. Bye!")] == expected and len(expected) == 1

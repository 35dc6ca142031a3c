"""Markdown, tags and emoji are not read aloud (``voiced.tts.markup``), with the real joe voice and espeak-ng."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.tts.joe import joe_voice_path
from voiced.bench.tts_reference import SENTENCES
from voiced.config import Config
from voiced.core.models import Models
from voiced.errors import ConfigError
from voiced.runtime.hardware import select_profile
from voiced.stages import Counters
from voiced.tts import PiperVoice
from voiced.tts.config import SynthesisOptions, VoiceSettings
from voiced.tts.errors import NothingToSpeak
from voiced.tts.markup import speakable
from voiced.wyoming.services import SentenceBuffer

pytest.importorskip("piper", reason="espeak-ng comes with piper-tts (the voiced[tts] extra)")

# (what an LLM writes, what a person would read aloud)
MARKED = [
    ("**Kitchen** light is on.", "Kitchen light is on."),
    ("# Weather today\nIt is *sunny* and __warm__.", "Weather today.\nIt is sunny and warm."),
    ("Lights left on:\n- Kitchen\n- Hall 💡\n* Porch", "Lights left on:\nKitchen.\nHall.\nPorch."),
    ("Done ✅ I set a timer ⏰ for 5 minutes 🙂", "Done I set a timer for 5 minutes"),
    ("See [the manual](https://example.com/manual_v2.pdf) for `timer` options.", "See the manual for timer options."),
    ("> Quoted: ~~old~~ new plan ★", "Quoted: old new plan"),
    ("```\nturn off\n```\n---\nThat is all → bye 👋🏽", "turn off\n\nThat is all bye"),  # a block: a paragraph
    # SSML as Rhasspy's hermes/tts/say clients send it, HTML as an LLM puts it in a table, entities
    ('<speak>Hello <break time="1s"/> world.</speak>', "Hello, world."),
    ('<speak><p>First line</p><p>Second.</p> <say-as interpret-as="characters">ABC</say-as></speak>',
     "First line. Second. ABC"),
    ("Kitchen<br>Hall &amp; porch &#128578;", "Kitchen, Hall & porch"),
    ("Read <a href='x.html' target=_blank>this</a> [](https://example.com/empty-label) now.", "Read this now."),
]


@pytest.fixture(scope="module")
def voice() -> PiperVoice:
    return PiperVoice.load(joe_voice_path())


def _phonemes(voice: PiperVoice, text: str) -> list[tuple[str, ...]]:
    return [s.phonemes for s in voice.sentences(text)]


@pytest.mark.parametrize(("marked", "plain"), MARKED)
def test_marked_text_is_spoken_as_its_plain_words(voice: PiperVoice, marked: str, plain: str) -> None:
    assert speakable(marked).split() == plain.split()
    assert _phonemes(voice, marked) == _phonemes(voice, plain)


def test_kept_markup_is_read_aloud_as_espeak_names_it(voice: PiperVoice) -> None:
    """What the default spares the listener: with ``strip_markup = False`` the marks are words."""
    keeping = PiperVoice(voice.config, voice.files, replace(voice.settings, strip_markup=False), voice.model,
                         voice._phonemizer)
    for marked, plain in MARKED:
        assert _phonemes(keeping, marked) != _phonemes(voice, plain), marked
    said = "".join(p for s in keeping.sentences("**Kitchen** 🙂") for p in s.phonemes)
    for word in ("asterisk", "smiling"):
        assert "".join(voice.phonemize(word)[0]) in said, word


def test_text_without_markup_is_left_exactly_as_it_was() -> None:
    """Ordinary punctuation, numbers, symbols espeak-ng names well and lone marks between words stay."""
    texts = list(SENTENCES) + [
        "It is 21°C, ±2 degrees, € 5 or £4; 5 * 3 = 15 and 2*x.", "snake_case, C# and F#!",
        "-5 degrees at 6:30 p.m.", "Copyright © 2024 ACME™ — all rights reserved…",
        "日本語のテキスト。Ça va? Größe: 3 m²", "Call 555-1234 (ext. 2).", "If a < b and c > d, Tom & Jerry win.", "if a<b and c>d then a<b"]
    for text in texts:
        assert speakable(text) == text, text


def test_read_speech_transcripts_are_left_alone(speech: Path) -> None:
    """The 116 hifitts transcripts as their readers' books printed them (commas, quotes, dashes)."""
    with open(speech / "hifitts_6097_5min" / "transcripts.tsv", newline="") as f:
        texts = [row["text_no_preprocessing"] for row in csv.DictReader(f, delimiter="\t")]
    assert len(texts) == 116
    assert [t for t in texts if speakable(t) != t] == []


def test_streamed_pieces_lose_their_marks_too(voice: PiperVoice) -> None:
    """Wyoming's synthesize-chunk: an LLM's reply in pieces, cut into sentences and lines as they
    complete; a mark may come without its partner."""
    def streamed(reply: str) -> list[tuple[str, ...]]:
        buffer = SentenceBuffer(5000)
        sentences = [s for i in range(0, len(reply), 7) for s in buffer.add(reply[i:i + 7])] + buffer.rest()
        return [p for s in sentences for p in _phonemes(voice, s)]

    plain = streamed("Here you go.\nKitchen is on.\nHall is off.\nAll set. Bye!")
    assert streamed("Here you go.\n- **Kitchen** is on\n- Hall is off 🙂\nAll *set*. Bye!") == plain
    assert speakable("the **lights") == "the lights"  # the rest of the bold in the next piece


def test_emoji_only_is_nothing_to_speak(voice: PiperVoice) -> None:
    with pytest.raises(NothingToSpeak):
        list(voice.synthesize("👍🏽 🙂"))


def test_the_audio_is_the_plain_texts(voice: PiperVoice) -> None:
    quiet = SynthesisOptions(noise_scale=0.0, noise_w=0.0)
    marked, plain = MARKED[0]
    got = np.concatenate([c.samples for c in voice.synthesize(marked, quiet)])
    want = np.concatenate([c.samples for c in voice.synthesize(plain, quiet)])
    assert np.array_equal(got, want)


def test_the_config_key_reaches_the_daemons_voice(tmp_path: Path) -> None:
    for tts, wanted in (({}, True), ({"strip_markup": False}, False)):
        config = Config.from_dict({"tts": {"voice": str(joe_voice_path()), **tts},
                                   "daemon": {"state_dir": str(tmp_path / "state")}})
        loaded = Models.load(config, select_profile(config.hardware.profile), Counters())
        assert loaded.voice is not None and loaded.voice.settings.strip_markup is wanted
        loaded.close()
    with pytest.raises(ConfigError, match="tts.strip_markup"):
        Config.from_dict({"tts": {"strip_markup": "yes"}})
    with pytest.raises(ConfigError, match="strip_markup"):
        VoiceSettings(strip_markup=1)  # type: ignore[arg-type]

"""Template-aware Whisper decoding on real weights: commands come out as template sentences, read speech does not.

Real Whisper tiny.en (INT8 by voiced-quantize), real Piper joe voice speaking Home Assistant
sentences in a simulated room (``voiced bench commands``' renderer, seeded: the same audio every
run), real hifitts read speech.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.whisper_fixtures import said_commands, spoken_commands
from voiced.asr.template_align import AlignSettings
from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
from voiced.asr.whisper_templates import TemplateDecoding
from voiced.audio.dereverb import DereverbConfig
from voiced.audio.wav import read_wav
from voiced.config import Config
from voiced.errors import ConfigError
from voiced.sentencespace import words_of


@pytest.fixture(scope="module")
def commands_setup(whisper_int8_dir: Path, speech: Path):
    from voiced.bench.commands import hifitts_files

    recognizer, commands, audio = spoken_commands(speech, 16, seed=3)
    hifi = hifitts_files(speech)
    whisper = WhisperRecognizer.load(whisper_int8_dir, WhisperConfig())
    whisper.use_templates(recognizer.sentence_space(), TemplateDecoding())
    return recognizer, commands, audio, whisper, hifi


@pytest.mark.shared
def test_commands_in_a_room_get_their_intent_far_more_often(commands_setup) -> None:
    from voiced.bench.commands import _key

    recognizer, commands, audio, whisper, _ = commands_setup
    free = template = 0
    for n, (command, samples) in enumerate(zip(commands, audio)):
        choice = whisper.choose(samples)
        wanted = (command.intent, command.slots)
        free += _key(recognizer.recognize(whisper.model.text(choice.free[0]))) == wanted
        template += _key(recognizer.recognize(whisper.model.text(choice.tokens))) == wanted
        if n < 4:  # the daemon's path gives the same text (a second decode: on a few)
            result = whisper.finish(_stream(whisper, samples))
            assert result.text == whisper.model.text(choice.tokens).strip()
            assert result.from_templates == choice.from_templates
    # measured here: free 1/16, template-aware 11/16 (voiced bench commands has the full figures)
    assert template >= free + 8 and template >= 10


FIRST_WORD_MISSES = ("unpause the tv shows in kitchen", "pause timer in the garage",
                     "unpause the tv shows in the office", "pause the tv shows in my bedroom",
                     "unpause the tv shows in our garage", "pause the music my bedroom", "unpause the shows my office")
"""Development-split commands of ``voiced bench commands`` (120 commands, seed 1) whose intent the
search ordered by log-probability per token missed: "pause"/"unpause" heard as "lost", "and
cause", "I'll see you". Never test-split ones."""


@pytest.fixture(scope="module")
def bench_dev(whisper_int8_dir: Path, speech: Path):
    """The first 39 of ``voiced bench commands``' 120 (seed 1): the renderer draws per command in
    order, so these are the bench's audio. Tests use development-split ones (even indices) only."""
    recognizer, commands, audio = spoken_commands(speech, 120, seed=1, first=39)
    whisper = WhisperRecognizer.load(whisper_int8_dir, WhisperConfig())
    whisper.use_templates(recognizer.sentence_space(), TemplateDecoding())
    return recognizer, commands, audio, whisper


@pytest.mark.shared
def test_commands_whose_first_word_the_audio_disfavours_are_found(bench_dev, speech: Path) -> None:
    """The seven spoken as a set of their own in the room (seed 2; not the bench's 85 commands up to
    the last of them): the free transcript loses the first word ("and pause", "Lost the ...",
    "plus timer"), template-aware decoding finds it."""
    from voiced.bench.commands import _key

    _, _, _, whisper = bench_dev
    recognizer, commands, audio = said_commands(speech, FIRST_WORD_MISSES, seed=2)
    free, template = [], []
    for command, samples in zip(commands, audio):
        choice = whisper.choose(samples)
        wanted = (command.intent, command.slots)
        free.append(_key(recognizer.recognize(whisper.model.text(choice.free[0]))) == wanted)
        template.append(_key(recognizer.recognize(whisper.model.text(choice.tokens))) == wanted)
    # measured (2026-11-28, u8 weights, no VNNI): free 1/7, template-aware 7/7 (seeds 1-4 of the
    # set: 6, 7, 5, 4 of 7: "pause" and "unpause" are within ~0.1 nat per token of each other, so
    # the INT8 kernels' last bits decide some); 0/7 with the search ordered by log-probability per
    # token, before the mark rules (the bench's audio)
    assert sum(free) <= 2 and sum(template) >= 5, (free, template)


@functools.cache
def _space_of(recognizer):
    """``recognizer``'s sentence space, compiled once per recognizer (0.75 s each time otherwise)."""
    return recognizer.sentence_space()


def _intent_with(recognizer, whisper: WhisperRecognizer, settings: TemplateDecoding, samples: np.ndarray) -> object:
    """The intent key of ``samples`` decoded template-aware with ``settings`` (``whisper``'s sessions)."""
    from voiced.bench.commands import _key

    ours = WhisperRecognizer(whisper.model, whisper.config)
    ours.use_templates(_space_of(recognizer), settings)
    return _key(recognizer.recognize(ours.model.text(ours.choose(samples).tokens)))


@pytest.mark.shared
@pytest.mark.parametrize(("index", "on", "off"), [
    # "cancel all of my timers" ends the search first, and already wins; "... in our bathroom" is said
    (0, {}, {"search_on_winning": 0}),
    (38, {}, {"align_partials": 0}),  # the search got to "Resume the 19 hour time"; " time" + "r" never comes
])
def test_a_longer_sentence_and_one_the_search_did_not_finish_are_found(bench_dev, index: int, on, off) -> None:
    """Development commands of ``voiced bench commands`` that only ``search_on_winning`` (going on
    past the first finished sentence when it already wins the choice) and ``align_partials``
    (aligning the search's deepest beginnings) get right."""
    recognizer, commands, audio, whisper = bench_dev
    assert index % 2 == 0  # the development split only
    wanted = (commands[index].intent, commands[index].slots)

    def heard(settings: TemplateDecoding) -> object:
        return _intent_with(recognizer, whisper, settings, audio[index])

    assert heard(TemplateDecoding(**on)) == wanted
    if index == 38:
        # Found on x86 with AVX2: the search alone ends on "... time" there. With AVX512 the joe voice's
        # audio differs in the last bits and the search finishes the sentence itself, so only the
        # setting's own result is checked here (tests/test_template_align.py tests the aligner).
        return
    assert heard(TemplateDecoding(**off)) != wanted


NARROW = {"max_steps": 120, "beam": 8}
"""The search's width before 2026-11-28 evening (120 decoder calls, 8 tokens per hypothesis), on
which the mechanism cases below were found; the wider default search finds some of those commands
itself (and loses one: "how much time left on timer in my office", seed 15, is then "... on timer")."""


@pytest.fixture(scope="module")
def alone(whisper_int8_dir: Path, speech: Path):
    """Commands spoken one at a time in the bench's room, each with its own seed (a seed on whose
    audio the setting under test makes the difference, found by trying seeds; one command instead
    of the hundreds before it in a bench set)."""
    from voiced.bench.commands import _intents

    whisper = WhisperRecognizer.load(whisper_int8_dir, WhisperConfig())
    intents = _intents()

    def said(text: str, seed: int):
        recognizer, commands, audio = said_commands(speech, [text], seed, recognizer=intents)
        return recognizer, (commands[0].intent, commands[0].slots), audio[0]

    return whisper, said


@pytest.mark.shared
@pytest.mark.parametrize(("said", "seed", "off"), [
    # no sentence found; "Resume the thirty six hour timer." is 4 word edits from the free "I'm in
    # the thirty six hour time."
    ("resume the 36 hour timer", 13, {"align": AlignSettings(max_edits=3, max_expansions=300, results=4)}),
    # the search finds only "Office to 38." (improbable); aligning the free "Austin, let me hate our
    # time." gets the command
    ("pause the 38 hour timer", 12, {"align_below": None}),
])
def test_a_command_the_search_misses_is_found_near_the_free_transcript(alone, said: str, seed: int, off) -> None:
    """The wide ``AlignSettings`` and ``align_below`` (align also when the search's sentence is
    improbable) get a command right that the decoding without them gets wrong (both with the
    ``NARROW`` search)."""
    whisper, speak = alone
    recognizer, wanted, samples = speak(said, seed)

    def heard(settings: TemplateDecoding) -> object:
        return _intent_with(recognizer, whisper, settings, samples)

    assert heard(TemplateDecoding(**NARROW)) == wanted
    assert heard(TemplateDecoding(**NARROW, **off)) != wanted


@pytest.mark.shared
def test_the_search_is_wide_enough_for_a_first_word_the_audio_disfavours(alone) -> None:
    """240 decoder calls and 16 tokens per hypothesis: "Pause my music in my kitchen." is found,
    where the ``NARROW`` search ran out on other beginnings and the free transcript ("I'm not going
    to use it in my case, ...") was kept."""
    whisper, speak = alone
    recognizer, wanted, samples = speak("pause my music in my kitchen", 1)
    assert _intent_with(recognizer, whisper, TemplateDecoding(), samples) == wanted
    assert _intent_with(recognizer, whisper, TemplateDecoding(**NARROW), samples) != wanted


@pytest.mark.shared
@pytest.mark.parametrize(("said", "seed"), [
    ("how much time left on timer in my office", 15),  # 1 nat: "How much time left on timer"
    ("remove 2-hour from garage timer", 18),  # 1 nat: "Remove two hour from a one, two hour timer."
])
def test_a_deeper_search_reaches_what_the_audio_goes_on_to_say(alone, said: str, seed: int) -> None:
    """``token_reward`` 2 nats per token: the search goes deeper before it turns back to a cheaper
    beginning, and reaches the place the command ends with where 1 nat spent its calls on the
    short sentence's neighbours (both with the ``NARROW`` search)."""
    whisper, speak = alone
    recognizer, wanted, samples = speak(said, seed)
    assert _intent_with(recognizer, whisper, TemplateDecoding(**NARROW), samples) == wanted
    assert _intent_with(recognizer, whisper, TemplateDecoding(**NARROW, token_reward=1.0), samples) != wanted


@pytest.mark.shared
@pytest.mark.parametrize(("said", "seed", "cut_short"), [
    # the free transcript: "What's the weather? It's got a splat upon your leg."
    ("what's the weather in our desk lamp", 5, "What's the weather?"),
])
def test_a_sentence_that_leaves_part_of_the_audio_unsaid_loses(alone, said: str, seed: int, cut_short: str) -> None:
    """``short_penalty``: Whisper scores "What's the weather?" for "... in our desk lamp" better per
    token than what was said; counted down for having fewer syllables than the free transcript,
    which heard all of it, the whole sentence wins."""
    from voiced.bench.commands import _key

    whisper, speak = alone
    recognizer, wanted, samples = speak(said, seed)
    ours = WhisperRecognizer(whisper.model, whisper.config)
    ours.use_templates(_space_of(recognizer), TemplateDecoding(short_penalty=0.0))
    without = ours.model.text(ours.choose(samples).tokens)
    assert without.strip() == cut_short
    assert _key(recognizer.recognize(without)) != wanted
    assert _intent_with(recognizer, whisper, TemplateDecoding(), samples) == wanted


@pytest.mark.shared
def test_a_command_across_the_room_is_heard_once_dereverberated(bench_dev) -> None:
    """Development command 36: "set the awnings position to 0% on our garage", heard "shade" as
    the room's tail smears "awnings"; dereverberated (WPE, ``[asr] whisper_dereverb``) it is
    "Awning". (Of the first 85 commands' development half this is the one it gains; it loses 20,
    "start my garage door", which then gets an area not said; the bench has the totals, and they
    are why it is off by default.)"""
    from voiced.bench.commands import _key

    recognizer, commands, audio, whisper = bench_dev
    index = 36
    wanted = (commands[index].intent, commands[index].slots)

    def choice(dereverb: DereverbConfig | None):
        ours = WhisperRecognizer(whisper.model, replace(whisper.config, dereverb=dereverb))
        ours.use_templates(_space_of(recognizer), TemplateDecoding())
        return ours.choose(audio[index])

    def heard(c) -> tuple:
        return _key(recognizer.recognize(whisper.model.text(c.tokens)))

    dereverberated, as_heard = choice(DereverbConfig()), choice(None)
    assert heard(dereverberated) == wanted
    # the audio decoded was the dereverberated one. As heard, it was "shade" on x86 with AVX2, where the
    # case was found; with AVX512 the joe voice's audio differs in the last bits and is heard right
    # either way, so that side is not asserted.
    assert dereverberated.free_logprob != as_heard.free_logprob


@pytest.mark.shared
def test_the_daemon_dereverberates_when_told_to(bench_dev, whisper_int8_dir: Path, models: Path,
                                                      tmp_path: Path) -> None:
    """``[asr] whisper_dereverb`` (off by default) reaches the daemon's recognizer: its result for a
    command across the room is the dereverberated audio's (same words here, other probabilities)."""
    from voiced.core.models import Models
    from voiced.runtime.hardware import select_profile
    from voiced.stages import Counters

    _, _, audio, whisper = bench_dev
    samples = audio[36]
    dry = WhisperRecognizer(whisper.model, replace(whisper.config, dereverb=DereverbConfig())).recognize(samples)
    wet = WhisperRecognizer(whisper.model, whisper.config).recognize(samples)
    assert dry != wet
    for key, wanted in (({"whisper_dereverb": True}, dry), ({}, wet)):
        config = Config.from_dict({
            "asr": {"model": str(whisper_int8_dir), **key},
            "vad": {"model": str(models / "silero_vad_v5" / "silero_vad.onnx")},
            "daemon": {"state_dir": str(tmp_path / "state")},
        })
        loaded = Models.load(config, select_profile(config.hardware.profile), Counters())
        try:
            stream = loaded.recognizer.create_stream()  # type: ignore[union-attr]
            stream.accept_waveform(samples)
            assert loaded.recognizer.finish(stream) == wanted  # type: ignore[union-attr]
        finally:
            loaded.close()


@pytest.mark.shared
def test_the_same_audio_always_gives_the_same_choice(commands_setup, whisper_int8_dir: Path) -> None:
    """Bit for bit: the same recognizer again after other utterances, and a new one (new sessions)."""
    recognizer, _, audio, whisper, _ = commands_setup
    first = [whisper.choose(x) for x in audio[:4]]
    again = [whisper.choose(x) for x in reversed(audio[:4])][::-1]
    fresh = WhisperRecognizer.load(whisper_int8_dir, WhisperConfig())
    fresh.use_templates(recognizer.sentence_space(), TemplateDecoding())
    for a, b, c in zip(first, again, [fresh.choose(x) for x in audio[:4]]):
        assert a == b == c


@pytest.mark.shared
def test_read_speech_keeps_its_free_transcript(commands_setup) -> None:
    _, _, _, whisper, hifi = commands_setup
    changed = []
    # 12 files (~1 s of CPU each since the search drops beginnings that could not win; it was ~15 s
    # with the whole budget spent, when this checked 4); bench commands checks all 116
    for path in hifi[:12]:
        choice = whisper.choose(read_wav(path)[0][:, 0])
        if choice.tokens != choice.free[0]:
            changed.append(whisper.model.text(choice.tokens))
    assert changed == []


@pytest.mark.shared
@pytest.mark.parametrize(("index", "heard", "forced"), [
    # (file 12, "faulted been eater.", was "TV." without it until the search widened to 240 calls
    # and a beam of 16; it keeps its free transcript either way now)
    (103, "yet when he got up", "Any of the lights on?"),
    (108, "or vice versa.", "What is the time?"),
])
def test_an_improbable_template_sentence_does_not_replace_read_speech(commands_setup, index: int, heard: str,
                                                                       forced: str) -> None:
    """``least_probable``: these template sentences are within ``margin`` of the free transcript per
    token, but so improbable (-3.2 per token or less) that the free transcript stays."""
    recognizer, _, _, whisper, hifi = commands_setup
    samples = read_wav(hifi[index])[0][:, 0]
    choice = whisper.choose(samples)
    assert whisper.model.text(choice.tokens).strip() == heard and not choice.from_templates
    loose = WhisperRecognizer(whisper.model, whisper.config)
    loose.use_templates(_space_of(recognizer), TemplateDecoding(least_probable=None))
    assert loose.model.text(loose.choose(samples).tokens).strip() == forced


@pytest.mark.shared
def test_a_command_only_through_a_wildcard_yields_to_a_likelier_template_sentence(alone) -> None:
    """``wildcard_margin``: "Remove 3 hours off of the bedroom timer." is a command with "of the
    bedroom" as a timer's name; the template sentence without "of" is as probable, and is taken."""
    whisper, speak = alone
    recognizer, wanted, samples = speak("remove 3 hours off the bedroom timer", 11)
    assert _intent_with(recognizer, whisper, TemplateDecoding(), samples) == wanted
    assert _intent_with(recognizer, whisper, TemplateDecoding(wildcard_margin=None), samples) != wanted


WILDCARD_COMMANDS = ("turn off the kitchen light in 5 minutes", "add paper towels to my shopping list",
                     "play the album Abbey Road in the kitchen", "remove eggs from my shopping list")
"""Commands through a wildcard (a delayed command, a list's item, a media title), spoken close to the microphone."""


@pytest.mark.shared
def test_a_command_through_a_wildcard_keeps_its_words(whisper_int8_dir: Path, speech: Path) -> None:
    """The free transcript of a wildcard command is kept: no template sentence is as probable. With
    a margin as wide as the one for other transcripts, the delayed command would lose its delay."""
    recognizer, _, audio = said_commands(speech, WILDCARD_COMMANDS, seed=3, room=False)
    whisper = WhisperRecognizer.load(whisper_int8_dir, WhisperConfig())
    whisper.use_templates(_space_of(recognizer), TemplateDecoding())
    texts = []
    for samples in audio:
        choice = whisper.choose(samples)
        assert choice.tokens == choice.free[0]
        texts.append(whisper.model.text(choice.tokens).strip())
    assert texts == ["Turn off the kitchen light in 5 minutes.", "Add paper towels to my shopping list.",
                     "Play the album Abbey Road in the kitchen.", "Remove eggs from my shopping list."]
    wide = WhisperRecognizer(whisper.model, whisper.config)
    wide.use_templates(_space_of(recognizer), TemplateDecoding(wildcard_margin=3.0))
    assert wide.model.text(wide.choose(audio[0]).tokens).strip() == "Turn off the kitchen light in the living room."


def _stream(whisper: WhisperRecognizer, samples):
    stream = whisper.create_stream()
    stream.accept_waveform(samples)
    return stream


def test_margin_and_search_bounds_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="template_margin"):
        Config.from_dict({"asr": {"template_margin": -1}})
    with pytest.raises(ConfigError, match="beam"):
        TemplateDecoding(beam=0)
    with pytest.raises(ConfigError, match="max_steps"):
        TemplateDecoding(max_steps=0)


def test_pieces_are_allowed_exactly_as_may_begin_allows_them() -> None:
    """The search asks ``Following.begins`` once per word prefix instead of ``may_begin`` per token:
    the same answers, on Home Assistant's sentences (numbers, glued lists, apostrophes) cut anywhere."""
    from voiced.asr.whisper_template_search import _Begins
    from voiced.bench import commands as bench

    recognizer = bench._intents()
    space = recognizer.sentence_space()
    texts = [f" {c.text}" for c in bench.make_commands(recognizer, 6, seed=5)]
    texts += [" Set the brightness to 50% in the kitchen.", " what's the temperature, in the office?",
              " to mention that in this branch of the subject"]
    tricky = [" 50", "50", "%", "'s", "'", ".", ",", "?", " twenty", "ty", "-minute", " the", "en", " x", "5", " I",
              " ", ", the", "s.", " kitchen light"]
    slow, fast_walker = space.walker(wildcards=False), space.walker(wildcards=False)
    asked = 0
    for text in texts:
        for cut in range(len(text) + 1):
            head, rest = text[:cut], text[cut:]
            begins = _Begins(fast_walker, head)
            word = rest[:rest.find(" ", 1)] if rest.find(" ", 1) > 0 else rest  # up to the next word
            for piece in {*tricky, rest[:1], rest[:3], word}:
                assert begins(piece) == slow.may_begin(head + piece), (head, piece)
                asked += 1
    assert asked > 5000


def test_hopeless_is_validated() -> None:
    with pytest.raises(ConfigError, match="hopeless"):
        TemplateDecoding(hopeless=-1)
    assert TemplateDecoding(hopeless=None).hopeless is None


def test_align_below_is_validated() -> None:
    with pytest.raises(ConfigError, match="align_below"):
        TemplateDecoding(align_below=0.5)
    assert TemplateDecoding(align_below=None).align_below is None


def test_least_probable_and_wildcard_margin_are_validated() -> None:
    with pytest.raises(ConfigError, match="least_probable"):
        TemplateDecoding(least_probable=0.5)
    with pytest.raises(ConfigError, match="wildcard_margin"):
        TemplateDecoding(wildcard_margin=-1.0)
    assert TemplateDecoding(least_probable=None, wildcard_margin=None).wildcard_margin is None


def test_short_penalty_is_validated() -> None:
    with pytest.raises(ConfigError, match="short_penalty"):
        TemplateDecoding(short_penalty=-1.0)
    assert TemplateDecoding(short_penalty=0.0).short_penalty == 0.0


@pytest.mark.shared
def test_close_talk_commands_are_the_rooms_at_the_same_pace(speech: Path) -> None:
    """``voiced bench commands --close-talk``: the same sentences at the same pace (the renderer
    makes the room's draws either way), with no reverberation and no talker behind."""
    _, commands, room = spoken_commands(speech, 120, seed=1, first=4)
    _, same, dry = spoken_commands(speech, 120, seed=1, first=4, room=False)
    assert same == commands
    for in_room, close in zip(room, dry):
        assert len(close) == len(in_room)  # the same pace, and room for the same reverberation tail
        # the room's tail (reverberation, the talker behind) is there; close to the microphone, silence
        assert np.abs(in_room[-7000:-4000]).max() > 1e-3 and not close[-7000:].any() and not close[:4000].any()


OFFICE_CLIP = ("openwakeword_clips", "turn_on_the_office_lights_test_clip.wav")
"""A real human talking about smart bulbs for 30 s ("... if we turn that off, does it work with
Google Home?"), then saying "turn on the office lights": the only real spoken command ../shared holds."""


@pytest.mark.shared
def test_a_real_human_command_gets_its_intent_and_the_talk_about_lights_stays_free(
        whisper_int8_dir: Path, speech: Path, models: Path) -> None:
    """Through the listener (Silero, the daemon's endpointing) with Home Assistant's built-in
    sentences: talk full of light words is not forced into a command, the command is one."""
    from tests.test_early_end import final_events
    from voiced.asr.loader import load_recognizer
    from voiced.bench.commands import _intents, _key
    from voiced.vad import SileroVad

    intents = _intents()  # Home Assistant's built-in English sentences, an "office" among the areas
    space = intents.sentence_space()
    recognizer = load_recognizer(whisper_int8_dir)
    recognizer.use_templates(space, TemplateDecoding())
    silero = SileroVad.load(models / "silero_vad_v5" / "silero_vad.onnx")
    audio = read_wav(speech.joinpath(*OFFICE_CLIP))[0][:, 0]

    finals = [ev for ev, _ in final_events(recognizer, silero, audio, space, matched_ms=250)]
    assert len(finals) == 4, [ev.text for ev in finals]
    assert [_key(intents.recognize(ev.text)) for ev in finals] == [
        None, None, None, ("HassTurnOn", (("area", "office"), ("domain", "light")))]
    # the talk kept Whisper's free transcripts (the constrained sentences lost the choice)
    assert [ev.result.from_templates for ev in finals] == [False, False, False, True]
    assert "google home" in " ".join(words_of(finals[2].text))


_MEMORY_CHILD = r"""
import json, os, sys
from pathlib import Path
from voiced.asr.whisper import WhisperRecognizer
from voiced.asr.whisper_templates import TemplateDecoding
from voiced.audio.wav import read_wav
from voiced.bench.commands import _intents, hifitts_files
from voiced.bench.common import proc_rss_mb

model, speech, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
whisper = WhisperRecognizer.load(model)
whisper.use_templates(_intents().sentence_space(), TemplateDecoding())
clips = [read_wav(f)[0][:, 0] for f in hifitts_files(speech)[:count]]
for clip in clips:  # the free decoder's arena first: what template-aware decoding adds is measured alone
    whisper.recognize(clip)
before = proc_rss_mb(os.getpid())
texts = [whisper.recognize(clip, templates=True).text for clip in clips]
print(json.dumps({"before": before, "after": proc_rss_mb(os.getpid()), "texts": texts}))
"""


@pytest.mark.shared
def test_template_aware_decoding_of_read_speech_keeps_no_cache_per_hypothesis(whisper_int8_dir: Path,
                                                                               speech: Path) -> None:
    """The search kept the decoder's whole self-attention cache (5.5 MB) for every hypothesis it
    extended: read speech against Home Assistant's sentences opens ~150 at once, and ONNX Runtime's
    arena kept that for the life of the process (RSS +620 MB over 40 hifitts utterances, +214 MB
    over these 8; now +5). Each keeps the positions it added. A child process: nothing else moves its RSS."""
    run = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(whisper_int8_dir), str(speech), "8"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["after"] - out["before"] < 30, out
    assert sum(bool(t) for t in out["texts"]) == 8

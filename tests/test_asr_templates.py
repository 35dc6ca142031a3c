"""Template-aware transducer decoding on real speech, with generated models in the sherpa-onnx layout.

The free beam is sherpa-onnx's modified beam search token for token; the sentence beam beside it
follows the template sentences. A command the audio nearly supports (one of the free beam's own
competing paths, made a template sentence) comes out exactly; read speech with Home Assistant's
sentences keeps its free transcript on every file; the margin rule is what decides.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.modelgen.transducer import make_transducer
from tests.reference import sherpa_modified_beam
from tests.test_early_end import final_events
from tests.test_asr import read_wav
from voiced.asr.recognizer import RecognitionResult, Recognizer, RecognizerConfig
from voiced.asr.search import SearchMethod
from voiced.asr.sentence_context import TemplateSearch
from voiced.errors import ConfigError
from voiced.intents import IntentRecognizer
from voiced.sentencespace import Completion, words_of
from voiced.vad import SileroVad

COMMANDS = ["hifitts_6097_5min/audio/roots_19_morris_0269.wav",
            "hifitts_6097_5min/audio/presentpictureofnsw_02_mann_0532.wav"]
"""Short utterances (2.7 s, 2.6 s): command length."""
BEAM = RecognizerConfig(method=SearchMethod.MODIFIED_BEAM)


@pytest.fixture(scope="module", params=["zipformer2", "lstm"])
def model_dir(request, tmp_path_factory) -> Path:
    return make_transducer(tmp_path_factory.mktemp(request.param), request.param, seed=7)


def decode(rec: Recognizer, samples: np.ndarray, window: int = 1600):
    """As the daemon feeds a stream: a window at a time, then the end of the utterance."""
    stream = rec.create_stream()
    for i in range(0, len(samples), window):
        stream.accept_waveform(samples[i:i + window])
        rec.decode_all(stream)
    return rec.finish(stream), stream


def near_miss(rec: Recognizer, samples: np.ndarray) -> tuple[str, str]:
    """(free text, the free beam's best competing path whose words differ): a sentence the audio
    nearly supports, which free decoding misses."""
    free, stream = decode(rec, samples)
    cs = rec.model.context_size
    paths = sorted(stream.search_state.hyps.values(), key=lambda h: -h.score / (len(h.tokens) + cs))
    texts = [rec.model.tokens.text(h.tokens) for h in paths]
    return free.text, next(t for t in texts if words_of(t) != words_of(free.text))


def commands_for(tmp_path: Path, sentence: str, begun_by: str | None = None) -> IntentRecognizer:
    """Templates that accept ``sentence`` (its first two words as template words, the rest as a
    list value, beside ordinary names) and the usual light commands; ``begun_by``: also
    "<begun_by> please", a command that text begins."""
    words = words_of(sentence)
    longer = f', "{{begun}} please"' if begun_by is not None else ""
    begun = f'\n  begun:\n    values: ["{" ".join(words_of(begun_by))}"]' if begun_by is not None else ""
    (tmp_path / "commands.yaml").write_text(f"""
language: en
intents:
  Recovered:
    data:
      - sentences: ["{' '.join(words[:2])} {{thing}}", "turn on [the] {{thing}}"{longer}]
lists:
  thing:
    values: ["{' '.join(words[2:])}", "kitchen light", "porch lamp"]{begun}
""")
    return IntentRecognizer.load([tmp_path / "commands.yaml"])


@pytest.mark.shared
@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_the_audio_nearly_supports_is_recovered(model_dir: Path, speech: Path, tmp_path: Path,
                                                          name: str) -> None:
    samples = read_wav(speech / name)
    rec = Recognizer.load(model_dir, BEAM)
    free_text, command = near_miss(rec, samples)
    assert free_text == sherpa_modified_beam(model_dir, samples)["text"]  # the free beam is the reference's
    intents = commands_for(tmp_path, command)
    assert intents.recognize(free_text) is None and intents.recognize(command) is not None

    rec.use_templates(intents.sentence_space(), TemplateSearch())
    result, stream = decode(rec, samples)
    assert result.text.strip() == command  # the words and their spelling, exactly
    assert result.from_templates
    # the free beam ran beside it unchanged, and lost by the rule
    choice = rec.choose(stream)
    assert rec.model.tokens.text(choice.free.tokens) == free_text and choice.from_templates
    rec.use_templates(None)
    assert decode(rec, samples)[0].text == free_text  # off again: the free text


@pytest.mark.shared
@pytest.mark.parametrize("prune", [TemplateSearch().prune, 10_000.0])
def test_read_speech_keeps_its_free_transcript_with_home_assistant_sentences(speech: Path, tmp_path: Path,
                                                                               prune: float) -> None:
    """Home Assistant's English sentences with names and areas: every free transcript is kept (and
    stays sherpa-onnx's). Without the prune bound the sentence beam reaches whole sentences on some
    files, and the margin alone keeps them out."""
    from voiced.bench.intents import _sections

    model = make_transducer(tmp_path / "z", "zipformer2", seed=7)
    intents = IntentRecognizer.from_section(_sections(tmp_path, "en", names=5, areas=3)["builtin"])
    rec = Recognizer.load(model, BEAM)
    rec.use_templates(intents.sentence_space(), TemplateSearch(prune=prune))
    files = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))[::10]
    reached = 0
    for path in files:
        samples = read_wav(path)
        result, stream = decode(rec, samples)
        choice = rec.choose(stream)
        assert list(result.tokens) == sherpa_modified_beam(model, samples)["tokens"], path.name
        assert not result.from_templates, (path.name, result.text)
        reached += choice.sentence is not None
    if prune > 1000:  # whole sentences were reached (6 of 12 here) and lost by the rule
        assert reached >= 2, "the sentence beam must reach some whole sentence, or this test proves nothing"


@pytest.mark.shared
def test_the_margin_decides(speech: Path, tmp_path: Path) -> None:
    """The audio favours the free text by d nats per token: margins below d keep it, above d the
    sentence wins; the choice reports both scores so a margin can be chosen on data."""
    model = make_transducer(tmp_path / "z", "zipformer2", seed=7)
    samples = read_wav(speech / COMMANDS[0])
    rec = Recognizer.load(model, BEAM)
    free_text, command = near_miss(rec, samples)
    space = commands_for(tmp_path, command).sentence_space()
    rec.use_templates(space, TemplateSearch(margin=0.0))
    result, stream = decode(rec, samples)
    choice = rec.choose(stream)
    assert choice.sentence is not None and choice.sentence_per_token is not None
    d = choice.free_per_token - choice.sentence_per_token
    assert d > 0, "this utterance's free text must be the more probable one, or the margin decides nothing"
    for margin, wins in ((0.0, False), (d / 2, False), (2 * d, True), (1.5, True)):
        assert choice.with_margin(margin).from_templates is wins
        rec.use_templates(space, TemplateSearch(margin=margin))
        result = decode(rec, samples)[0]
        assert (result.text.strip(), result.from_templates) == ((command, True) if wins else (free_text, False)), margin


def test_greedy_search_refuses_templates_and_settings_are_validated(tmp_path: Path) -> None:
    rec = Recognizer.load(make_transducer(tmp_path / "z", "zipformer2", seed=7))  # greedy_search
    with pytest.raises(ValueError, match="modified_beam_search"):
        rec.use_templates(commands_for(tmp_path, "turn on the kitchen light").sentence_space())
    rec.use_templates(None)  # off is always fine
    with pytest.raises(ConfigError, match="template_margin"):
        TemplateSearch(margin=-1)
    with pytest.raises(ConfigError, match="hotword_boost"):
        TemplateSearch(boost=101)
    with pytest.raises(ConfigError, match="template_pause_margin"):
        TemplateSearch(pause_margin=-0.5)


@pytest.mark.shared
def test_the_config_key_turns_it_on_and_off_in_the_daemon(speech: Path, models: Path, tmp_path: Path) -> None:
    """``[asr] template_decoding`` with a transducer: the daemon's recognizer gets the sentence beam
    (with ``template_margin``), and loses it on a reload without intents."""
    from voiced.config import Config
    from voiced.core.models import Models
    from voiced.runtime.hardware import select_profile
    from voiced.stages import Counters

    model = make_transducer(tmp_path / "z", "zipformer2", seed=7)
    samples = read_wav(speech / COMMANDS[0])
    free_text, command = near_miss(Recognizer.load(model, BEAM), samples)
    commands_for(tmp_path, command)
    results = {}
    for key in ({"template_decoding": True}, {"template_decoding": False}, {"template_margin": 0.0},
                {"template_pause_margin": 0.5}):
        config = Config.from_dict({
            "asr": {"model": str(model), "max_hotwords": 0, **key},  # no hotwords: the sentences alone
            "vad": {"model": str(models / "silero_vad_v5" / "silero_vad.onnx")},
            "intents": {"templates": [str(tmp_path / "commands.yaml")]},
            "daemon": {"state_dir": str(tmp_path / "state")},
        })
        loaded = Models.load(config, select_profile(config.hardware.profile), Counters())
        result = decode(loaded.recognizer, samples)[0]  # type: ignore[arg-type]
        results[next(iter(key.items()))] = (result.text.strip(), result.from_templates)
        if "template_pause_margin" in key:
            assert loaded.recognizer.sentences.settings.pause_margin == 0.5  # type: ignore[union-attr]
        if key == {"template_decoding": True}:
            loaded.use_intents(IntentRecognizer.empty())  # SIGHUP with no intents left
            assert decode(loaded.recognizer, samples)[0].text == free_text  # type: ignore[arg-type]
        loaded.close()
    assert results == {("template_decoding", True): (command, True), ("template_decoding", False): (free_text, False),
                       ("template_margin", 0.0): (free_text, False), ("template_pause_margin", 0.5): (command, True)}  # (this utterance favours the free text)


def test_sentence_beam_follows_sentences_and_locks_a_whole_one(tmp_path: Path) -> None:
    """The beam's own rules on a small vocabulary, one frame at a time (the joiner's log-probabilities
    written by hand): a token no sentence takes never enters, whatever its probability; a whole
    sentence stays chosen to the end even when a longer beginning fills the beam."""
    from voiced.asr.sentence_context import SentenceContext
    from voiced.asr.tokens import SymbolTable

    symbols = ["<blk>", "<sos/eos>", "<unk>", "▁TURN", "▁ON", "▁THE", "▁LIGHT", "S", "▁IN", "▁OFF",
               "▁KITCHEN"]
    table = SymbolTable(dict(enumerate(symbols)))
    (tmp_path / "t.yaml").write_text("""
language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["turn on [the] light[s]", "turn on [the] light[s] in the kitchen"]
""")
    space = IntentRecognizer.load([tmp_path / "t.yaml"]).sentence_space()
    beam = SentenceContext(space, table, context_size=2, settings=TemplateSearch(boost=1.5)).start()

    def frame(favoured: dict[int, float], t: int, free: float = 0.0) -> None:
        parents = beam.parents()
        row = np.full(len(symbols), -20.0, np.float32)
        row[0] = -1.0  # blank: likely, but less than the favoured tokens
        for token, logp in favoured.items():
            row[token] = logp
        logp = np.tile(row, (len(parents), 1))
        beam.step(parents, logp, logp, t, beam=1, temperature=1.0, free=free)

    frame({9: -0.01, 3: -0.5}, 0)  # "▁OFF" is the audio's choice, but no sentence begins with it
    frame({4: -0.1}, 1)
    frame({6: -0.1}, 2)
    [path] = beam.hyps.values()
    assert path.text == " TURN ON LIGHT" and beam.locked is path  # whole: "turn on [the] light"
    frame({8: -0.3}, 3)  # "in" (as in "... in the kitchen") fills the beam of one
    [path] = beam.hyps.values()
    assert path.text == " TURN ON LIGHT IN"
    assert beam.locked is not None and beam.locked.text == " TURN ON LIGHT"  # carried on blanks
    assert beam.locked.acoustic == pytest.approx(-0.5 - 0.1 - 0.1 - 1.0, abs=1e-5)
    assert beam.best_whole() is beam.locked
    # the free beam's best path far ahead (more than ``prune`` nats): nothing is left to follow
    frame({}, 4, free=TemplateSearch().prune + 1.0)
    assert not beam.alive and beam.best_whole() is None


READ = "hifitts_6097_5min/audio/astralplane_03_leadbeater_0639.wav"
"""A 10 s read sentence: no command."""


@pytest.mark.shared
def test_a_near_miss_command_ends_at_the_pause_and_read_speech_keeps_its_end(model_dir: Path, speech: Path,
                                                                             models: Path, tmp_path: Path) -> None:
    """Intent-aware endpointing with a transducer: at the pause, the free partial (no command) is
    weighed against the sentence beam's best whole sentence by ``pause_margin``, so the command
    ends after the 250 ms matched silence with the text and intent the final gives after 700 ms.
    Free decoding alone knows no command at the pause (it waits the 700 ms); a read sentence keeps
    its end."""
    rec = Recognizer.load(model_dir, BEAM)
    vad = SileroVad.load(models / "silero_vad_v5" / "silero_vad.onnx")
    gap = np.zeros(24_000, np.float32)
    spoken = np.concatenate([gap, read_wav(speech / COMMANDS[0]), gap])
    # the command: a sentence the audio of the utterance, as the listener cuts it, nearly supports
    [(final, _)] = final_events(rec, vad, spoken, None, 700, keep_audio=True)
    assert final.audio is not None
    free_text, command = near_miss(rec, final.audio)
    assert free_text == final.text
    intents = commands_for(tmp_path, command)
    space = intents.sentence_space()
    assert space.walker(wildcards=False).complete(free_text) is Completion.NONE  # the case at hand
    audio = np.concatenate([spoken, read_wav(speech / READ), gap])

    free_only = final_events(rec, vad, audio, space, matched_ms=250)  # templates only in the endpointer
    assert [ev.text for ev, _ in free_only][0] == free_text and free_only[0][1] > 0.69
    rec.use_templates(space, TemplateSearch())
    early = final_events(rec, vad, audio, space, matched_ms=250)
    late = final_events(rec, vad, audio, space, matched_ms=700)  # 700 = min_silence_ms: off
    texts = [(ev.text.strip(), ev.result.from_templates) for ev, _ in early]  # type: ignore[union-attr]
    assert texts == [(ev.text.strip(), ev.result.from_templates) for ev, _ in late]  # type: ignore[union-attr]
    assert texts[0] == (command, True) and not texts[1][1]
    assert intents.recognize(texts[0][0]) is not None and intents.recognize(texts[1][0]) is None
    assert early[0][1] < 0.35 < 0.69 < late[0][1]  # 250 ms of silence and the window it ends in
    assert early[1][1] == late[1][1] == free_only[1][1]  # the read sentence: same end


@pytest.mark.shared
def test_the_pause_choice_stands_only_until_the_speaker_goes_on(speech: Path, tmp_path: Path) -> None:
    """The sentence chosen at a pause is the partial while silence follows; words after the pause
    make the partial the free beam's again, and the final weighs the whole utterance."""
    model = make_transducer(tmp_path / "z", "zipformer2", seed=7)
    rec = Recognizer.load(model, BEAM)
    samples = read_wav(speech / COMMANDS[0])
    free_text, command = near_miss(rec, samples)
    rec.use_templates(commands_for(tmp_path, command).sentence_space(), TemplateSearch())
    stream = rec.create_stream()
    silence = np.zeros(4_800, np.float32)
    for chunk in (samples, silence):
        stream.accept_waveform(chunk)
        rec.decode_all(stream)
    assert not stream.result.from_templates  # partials are the free beam's
    rec.decode_at_pause(stream)
    assert (stream.result.text.strip(), stream.result.from_templates) == (command, True)
    stream.accept_waveform(silence)  # the pause goes on: the choice stands
    rec.decode_all(stream)
    assert (stream.result.text.strip(), stream.result.from_templates) == (command, True)
    stream.accept_waveform(read_wav(speech / COMMANDS[1]))  # words after the pause
    rec.decode_all(stream)
    result = stream.result
    assert not result.from_templates and len(result.token_ids) > len(rec.model.tokens.encode(command))
    final = rec.finish(stream)
    choice = rec.choose(stream)
    assert choice is not None and (final.text, final.from_templates) == (
        rec.model.tokens.text(choice.best.tokens).strip() if choice.from_templates else final.text,
        choice.from_templates)


@pytest.mark.shared
def test_a_pause_after_the_beginning_of_a_command_keeps_the_free_partial(speech: Path, tmp_path: Path) -> None:
    """When the free partial at the pause may still become a command ("<it> please"), the speaker
    may go on: the partial stays free even though another whole sentence is within the margin."""
    model = make_transducer(tmp_path / "z", "zipformer2", seed=7)
    rec = Recognizer.load(model, BEAM)
    samples = read_wav(speech / COMMANDS[0])
    audio = np.concatenate([samples, np.zeros(4_800, np.float32)])

    def at_pause() -> RecognitionResult:
        stream = rec.create_stream()
        stream.accept_waveform(audio)
        rec.decode_at_pause(stream)
        return stream.result

    partial = at_pause().text
    command = near_miss(rec, samples)[1]
    space = commands_for(tmp_path, command).sentence_space()
    rec.use_templates(space, TemplateSearch())
    result = at_pause()
    assert (result.text.strip(), result.from_templates) == (command, True)  # no command begins so
    space = commands_for(tmp_path, command, begun_by=partial).sentence_space()
    assert space.walker(wildcards=False).complete(partial) is Completion.PREFIX
    rec.use_templates(space, TemplateSearch())
    result = at_pause()
    assert (result.text, result.from_templates) == (partial, False)

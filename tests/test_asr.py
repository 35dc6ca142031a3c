"""The streaming recognizer against the sherpa-onnx reference, token for token, on real speech."""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.modelgen.transducer import make_transducer
from tests.reference import sherpa_greedy, sherpa_modified_beam
from voiced.asr.model import ModelFiles, TransducerModel
from voiced.asr.recognizer import Recognizer, RecognizerConfig
from voiced.asr.search import SearchMethod
from voiced.cli import main
from voiced.errors import ModelError

KINDS = ["zipformer2", "lstm"]
SPEECH_FILES = ["jfk/jfk.wav", "misc_en/beckett.wav", "misc_en/vosk_digits_test.wav",
                "hifitts_6097_5min/audio/roots_19_morris_0269.wav"]


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768


@pytest.fixture(scope="module", params=KINDS)
def model_dir(request, tmp_path_factory) -> Path:
    return make_transducer(tmp_path_factory.mktemp(request.param), request.param, seed=7, int8=False)


@pytest.fixture(scope="module")
def int8_dirs(tmp_path_factory) -> dict[str, Path]:
    return {k: make_transducer(tmp_path_factory.mktemp(f"{k}-int8"), k, seed=11, int8=True) for k in KINDS}


def decode(rec: Recognizer, samples: np.ndarray, window: int = 1600):
    stream = rec.create_stream()
    for i in range(0, len(samples), window):  # as the live loop feeds it: one window at a time
        stream.accept_waveform(samples[i : i + window])
        rec.decode_all(stream)
    return rec.finish(stream)


@pytest.mark.parametrize("name", SPEECH_FILES)
def test_greedy_equals_sherpa_token_for_token(model_dir: Path, speech: Path, name: str) -> None:
    samples = read_wav(speech / name)
    ours = decode(Recognizer.load(model_dir), samples)
    ref = sherpa_greedy(model_dir, samples, tail_padding_ms=800)
    assert len(ref["tokens"]) > 5, "the generated model must emit tokens on real speech"
    assert list(ours.tokens) == ref["tokens"]
    assert ours.text == ref["text"]
    assert ours.timestamps == pytest.approx(ref["timestamps"], abs=1e-3)


def test_int8_files_preferred_and_equal_to_sherpa(int8_dirs: dict[str, Path], speech: Path) -> None:
    samples = read_wav(speech / SPEECH_FILES[0])
    for kind, directory in int8_dirs.items():
        files = ModelFiles.find(directory)
        assert files.encoder.name == "encoder.int8.onnx" and files.joiner.name == "joiner.int8.onnx"
        ours = decode(Recognizer.load(directory), samples)
        ref = sherpa_greedy(directory, samples, tail_padding_ms=800, prefer_int8=True)
        assert list(ours.tokens) == ref["tokens"], kind


def test_greedy_runs_the_decoder_once_per_distinct_context(int8_dirs: dict[str, Path], speech: Path) -> None:
    samples = np.concatenate([read_wav(speech / name) for name in SPEECH_FILES])  # long enough to repeat contexts
    for kind, directory in int8_dirs.items():
        rec = Recognizer.load(directory)
        contexts: list[tuple[int, ...]] = []
        run_decoder = rec.model.run_decoder

        def counting(rows: np.ndarray, run_decoder=run_decoder) -> np.ndarray:
            contexts.extend(map(tuple, rows.tolist()))
            return run_decoder(rows)

        rec.model.run_decoder = counting  # type: ignore[method-assign]
        ours = decode(rec, samples)
        assert list(ours.tokens) == sherpa_greedy(directory, samples, tail_padding_ms=800, prefer_int8=True)["tokens"]
        cs = rec.model.context_size
        seen = {tuple(([-1] * (cs - 1) + [0] + list(ours.token_ids[:i]))[-cs:]) for i in range(len(ours.token_ids) + 1)}
        assert len(contexts) == len(set(contexts)) == len(seen) < len(ours.token_ids) + 1, kind


def count_joiner_rows(rec: Recognizer) -> list[int]:
    """From now on, the rows of each of ``rec``'s joiner calls, appended to the list returned."""
    calls: list[int] = []
    run_joiner = rec.model.run_joiner

    def counting(enc: np.ndarray, dec: np.ndarray) -> np.ndarray:
        calls.append(len(enc))
        return run_joiner(enc, dec)

    rec.model.run_joiner = counting  # type: ignore[method-assign]
    return calls


def test_greedy_scores_a_chunk_in_one_joiner_call_where_exact(model_dir: Path, int8_dirs: dict[str, Path],
                                                              speech: Path) -> None:
    samples = read_wav(speech / SPEECH_FILES[1])
    rec = Recognizer.load(model_dir)
    assert rec.model.joiner_rows_independent  # FP32: each row of a batch is what it is alone
    calls = count_joiner_rows(rec)
    batched = decode(rec, samples)
    batched_calls = len(calls)
    rec.model.joiner_rows_independent = False  # the frame-by-frame search, one joiner call per frame
    calls.clear()
    single = decode(rec, samples)
    frames = len(calls)
    assert calls == [1] * frames
    assert list(batched.tokens) == list(single.tokens) == sherpa_greedy(model_dir, samples, tail_padding_ms=800)["tokens"]
    # One call per chunk plus one after each token (for the frames after it), not one per frame.
    assert batched_calls <= frames // (rec.model.chunk_shift // 4) + len(batched.tokens) < frames
    # A joiner quantized dynamically scales its activations over the whole batch: frame by frame there.
    for directory in int8_dirs.values():
        assert not TransducerModel.load(directory).joiner_rows_independent


def test_window_size_does_not_change_the_result(model_dir: Path, speech: Path) -> None:
    samples = read_wav(speech / SPEECH_FILES[1])
    rec = Recognizer.load(model_dir)
    a = decode(rec, samples, window=1600)
    b = decode(rec, samples, window=len(samples))
    c = decode(rec, samples, window=333)
    assert a.token_ids == b.token_ids == c.token_ids


def test_stream_reset_starts_a_fresh_utterance(model_dir: Path, speech: Path) -> None:
    samples = read_wav(speech / SPEECH_FILES[2])
    rec = Recognizer.load(model_dir)
    stream = rec.create_stream()
    stream.accept_waveform(read_wav(speech / SPEECH_FILES[0]))
    rec.finish(stream)
    stream.reset()
    stream.accept_waveform(samples)
    assert rec.finish(stream).token_ids == decode(rec, samples).token_ids


@pytest.mark.parametrize("name", SPEECH_FILES[:3])
def test_cli_transcribe_vad_none_equals_sherpa(model_dir: Path, speech: Path, name: str, capsys) -> None:
    path = speech / name
    assert main(["transcribe", "--vad", "none", "--json", "--asr-model", str(model_dir), str(path)]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "speech_start" and types[-2:] == ["speech_end", "final"]
    assert set(types[1:-2]) <= {"partial"}
    final = events[-1]
    assert final["file"] == str(path)
    assert final["text"] == sherpa_greedy(model_dir, read_wav(path), tail_padding_ms=800)["text"]
    assert final["start"] == 0 and final["end"] == pytest.approx(len(read_wav(path)) / 16000, abs=0.01)


def test_cli_transcribe_second_run_uses_the_kept_graphs(int8_dirs: dict[str, Path], speech: Path, tmp_path: Path,
                                                       monkeypatch, capsys) -> None:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = speech / SPEECH_FILES[0]
    directory = int8_dirs["zipformer2"]
    texts = []
    for _ in range(2):
        assert main(["transcribe", "--vad", "none", "--json", "--asr-model", str(directory), str(path)]) == 0
        texts.append(json.loads(capsys.readouterr().out.splitlines()[-1])["text"])
        assert len(list((tmp_path / "voiced" / "onnx").glob("*.opt.onnx"))) == 3  # encoder, decoder, joiner
    assert texts[0] == texts[1] == sherpa_greedy(directory, read_wav(path), tail_padding_ms=800, prefer_int8=True)["text"]


def test_cli_tail_padding_is_honoured(model_dir: Path, speech: Path, capsys) -> None:
    path = speech / SPEECH_FILES[0]
    main(["transcribe", "--json", "--tail-padding-ms", "300", "--asr-model", str(model_dir), str(path)])
    final = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert final["text"] == sherpa_greedy(model_dir, read_wav(path), tail_padding_ms=300)["text"]


def test_modified_beam_search_equals_sherpa_without_hotwords(model_dir: Path, speech: Path) -> None:
    samples = read_wav(speech / SPEECH_FILES[0])
    rec = Recognizer.load(model_dir, RecognizerConfig(method=SearchMethod.MODIFIED_BEAM))
    ours = decode(rec, samples)
    ref = sherpa_modified_beam(model_dir, samples, hotwords=None, tail_padding_ms=800)
    assert list(ours.tokens) == ref["tokens"]


def test_modified_beam_search_scores_frames_ahead_while_the_paths_stay(model_dir: Path, speech: Path) -> None:
    samples = read_wav(speech / SPEECH_FILES[3])
    rec = Recognizer.load(model_dir, RecognizerConfig(method=SearchMethod.MODIFIED_BEAM))
    calls = count_joiner_rows(rec)
    ahead = decode(rec, samples)
    ahead_calls = len(calls)
    rec.model.joiner_rows_independent = False  # one call per frame, as sherpa-onnx does it
    calls.clear()
    single = decode(rec, samples)
    assert list(ahead.tokens) == list(single.tokens)
    assert list(ahead.tokens) == sherpa_modified_beam(model_dir, samples, hotwords=None, tail_padding_ms=800)["tokens"]
    assert ahead_calls < 0.8 * len(calls)  # frames whose paths did not change were scored ahead


# -- clear errors --------------------------------------------------------------------------


def test_missing_directory_and_files_name_the_path(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        TransducerModel.load(tmp_path / "nope")
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "joiner.onnx").unlink()
    with pytest.raises(ModelError, match=r"joiner\.onnx.*missing"):
        TransducerModel.load(broken)
    (broken / "tokens.txt").unlink()
    with pytest.raises(ModelError, match="tokens.txt"):
        TransducerModel.load(broken)


def test_corrupt_model_file_is_named(tmp_path: Path, model_dir: Path) -> None:
    broken = tmp_path / "corrupt"
    shutil.copytree(model_dir, broken)
    (broken / "encoder.onnx").write_bytes(b"not an onnx file")
    with pytest.raises(ModelError, match=r"encoder\.onnx"):
        TransducerModel.load(broken)


def _edit_encoder_meta(directory: Path, **changes: str | None) -> None:
    path = directory / "encoder.onnx"
    m = onnx.load(str(path))
    props = {p.key: p.value for p in m.metadata_props}
    for k, v in changes.items():
        if v is None:
            props.pop(k, None)
        else:
            props[k] = v
    del m.metadata_props[:]
    for k, v in props.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(path))


def test_wrong_layouts_are_refused_with_the_reason(tmp_path: Path, model_dir: Path) -> None:
    kind = TransducerModel.load(model_dir).model_type.value
    cases = {
        "conformer": (dict(model_type="conformer"), "unsupported model_type 'conformer'"),
        "no_T": (dict(T=None), "'T' is missing"),
        "other_kind": (dict(model_type="lstm" if kind == "zipformer2" else "zipformer2"), "metadata"),
    }
    for name, (changes, message) in cases.items():
        d = tmp_path / name
        shutil.copytree(model_dir, d)
        _edit_encoder_meta(d, **changes)
        with pytest.raises(ModelError, match=message) as info:
            TransducerModel.load(d)
        assert "encoder.onnx" in str(info.value)


def test_decoder_in_place_of_encoder_is_refused(tmp_path: Path, model_dir: Path) -> None:
    d = tmp_path / "swapped"
    shutil.copytree(model_dir, d)
    shutil.copy(d / "decoder.onnx", d / "encoder.onnx")
    with pytest.raises(ModelError, match="encoder.onnx"):
        TransducerModel.load(d)


def test_cli_reports_malformed_wav_and_continues(tmp_path: Path, model_dir: Path, speech: Path, capsys) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    good = speech / SPEECH_FILES[0]
    code = main(["transcribe", "--json", "--asr-model", str(model_dir), str(bad), str(good)])
    out = capsys.readouterr()
    assert code == 1
    assert "bad.wav" in out.err
    assert json.loads(out.out.splitlines()[-1])["file"] == str(good)


def test_hotword_boost_equals_sherpa_and_changes_the_result(speech: Path, tmp_path: Path) -> None:
    directory = make_transducer(tmp_path / "hw", "zipformer2", seed=7)
    samples = read_wav(speech / SPEECH_FILES[0])
    plain = sherpa_modified_beam(directory, samples)["tokens"]
    words = sherpa_modified_beam(directory, samples)["text"].split()
    changed = 0
    for phrase in (" ".join(words[2:4]), " ".join(words[:2]), "TURN ON THE LIGHT"):
        for boost in (1.5, 4.0):
            config = RecognizerConfig(method=SearchMethod.MODIFIED_BEAM, hotwords=(phrase,), hotword_boost=boost)
            ours = decode(Recognizer.load(directory, config), samples)
            ref = sherpa_modified_beam(directory, samples, hotwords=[phrase], hotwords_score=boost)
            assert list(ours.tokens) == ref["tokens"], (phrase, boost)
            changed += list(ours.tokens) != plain
    assert changed, "some boost must change the transcript, or this test proves nothing"


def test_transcribe_refuses_a_tampered_int8_model(tmp_path: Path, speech: Path, capsys) -> None:
    """A model with a manifest loads; one flipped byte afterwards and transcribe names file and checksum."""
    from quantize.manifest import write_manifest
    from voiced.models.manifest import sha256_file

    directory = make_transducer(tmp_path / "m", "lstm", seed=2, int8=True)
    for part in ("encoder", "decoder", "joiner"):
        write_manifest(directory / f"{part}.int8.onnx", directory / f"{part}.onnx", {"method": "dynamic"},
                       {"passed": True})
    wav = str(speech / SPEECH_FILES[0])
    assert main(["transcribe", "--asr-model", str(directory), wav]) == 0
    capsys.readouterr()
    encoder = directory / "encoder.int8.onnx"
    recorded = sha256_file(encoder)
    data = bytearray(encoder.read_bytes())
    data[len(data) // 2] ^= 0x01
    encoder.write_bytes(bytes(data))
    assert main(["transcribe", "--asr-model", str(directory), wav]) == 1
    err = capsys.readouterr().err
    assert str(encoder) in err and recorded in err and "refusing to load" in err

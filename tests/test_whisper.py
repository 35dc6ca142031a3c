"""Whisper tiny.en (real weights, converted by voiced-quantize import-ct2) against sherpa-onnx, token for token.

Real speech only: all 116 hifitts utterances, jfk and misc_en. sherpa-onnx's Python API
(``OfflineRecognizer.from_whisper``, greedy) decodes the very same ONNX files.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from voiced.asr.loader import AsrFamily, family_of, load_recognizer
from voiced.asr.whisper import MAX_SPEECH_FRAMES, WhisperConfig, WhisperRecognizer, log_mel
from voiced.audio.wav import read_wav
from voiced.errors import ModelError

sherpa_onnx = pytest.importorskip("sherpa_onnx", reason="sherpa-onnx (the reference) is not installed")

REPO = Path(__file__).resolve().parents[1]


def _files(speech: Path) -> list[Path]:
    hifi = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))
    return [speech / "jfk" / "jfk.wav", speech / "misc_en" / "beckett.wav", *hifi]


def diagnostic_files(speech: Path) -> list[Path]:
    """jfk, beckett and every fourth hifitts file (31): for the tests that say *why* the 118-file
    INT8 token test holds (same features, same decoding under sherpa's runtime), which cost a
    child process or a model per file, and for the FP32 token test."""
    files = _files(speech)
    return [*files[:2], *files[2::4]]


def _samples(path: Path) -> np.ndarray:
    audio, rate = read_wav(path)
    assert rate == 16000
    return audio[:, 0]


def _sherpa(model_dir: Path, int8: bool):
    def pick(part: str) -> str:
        [path] = [p for p in model_dir.glob(f"*-{part}*.onnx") if (".int8." in p.name) == int8]
        return str(path)

    [tokens] = model_dir.glob("*-tokens.txt")
    return sherpa_onnx.OfflineRecognizer.from_whisper(encoder=pick("encoder"), decoder=pick("decoder"),
                                                      tokens=str(tokens), num_threads=1)


def _sherpa_tokens(model_dir: Path, files: list[Path], int8: bool) -> dict[str, tuple[list[str], str]]:
    """sherpa-onnx's tokens and text of every file."""
    ref = _sherpa(model_dir, int8)
    out = {}
    for path in files:
        stream = ref.create_stream()
        stream.accept_waveform(16000, _samples(path))
        ref.decode_stream(stream)
        out[path.name] = (list(stream.result.tokens), stream.result.text)
    return out


_REFERENCE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sherpa-reference")


def _sherpa_tokens_beside(model_dir: Path, files: list[Path], int8: bool) -> Future[dict[str, tuple[list[str], str]]]:
    """``_sherpa_tokens`` in a thread: both engines release the GIL while decoding, so sherpa-onnx's
    reference runs on the second core while voiced decodes (half the wall time of the token tests)."""
    return _REFERENCE.submit(_sherpa_tokens, model_dir, files, int8)


@pytest.fixture(scope="module")
def sherpa_int8(whisper_int8_dir, shared) -> Future[dict[str, tuple[list[str], str]]]:
    """sherpa-onnx's INT8 tokens and text of the 118 files, decoded once (beside the tests) for both INT8 tests."""
    return _sherpa_tokens_beside(whisper_int8_dir, _files(shared / "speech"), int8=True)


def _streamed(recognizer: WhisperRecognizer, samples: np.ndarray):
    """Decoded as the daemon decodes: the audio in 100 ms windows (features computed as it comes), then its end."""
    stream = recognizer.create_stream()
    for start in range(0, len(samples), 1600):
        stream.accept_waveform(samples[start:start + 1600])
    return recognizer.finish(stream)


def _differences(model_dir: Path, files: list[Path], int8: bool,
                 ref: Future[dict[str, tuple[list[str], str]]] | None = None) -> list[tuple[str, str, str]]:
    ref = ref or _sherpa_tokens_beside(model_dir, files, int8)
    ours = WhisperRecognizer.load(model_dir)
    assert (".int8." in ours.model.files.encoder.name) == int8
    got = {path.name: _streamed(ours, _samples(path)) for path in files}
    differ = []
    for path in files:
        tokens, text = ref.result()[path.name]
        if list(got[path.name].tokens) != tokens or got[path.name].text != text.strip():
            differ.append((path.name, text, got[path.name].text))
    return differ


@pytest.mark.shared
def test_fp32_tokens_equal_sherpa_onnx_on_real_files(whisper_model_dir, shared) -> None:
    """The FP32 export on 31 of the real files (``diagnostic_files``): the INT8 model, which is what
    voiced ships and what depends on the quantizer's choices, is checked on all 118 below; FP32 on
    all 118 doubled this test's time for the same decoding code (they were equal on all 118 when it
    ran them, 2026-11-25)."""
    files = diagnostic_files(shared / "speech")
    assert len(files) == 31
    differ = _differences(whisper_model_dir, files, int8=False)
    assert not differ, f"{len(differ)}/{len(files)} differ from sherpa-onnx: {differ[:3]}"


@pytest.mark.shared
def test_int8_tokens_equal_sherpa_onnx_on_every_real_file(whisper_int8_dir, sherpa_int8, shared) -> None:
    """In the venv: voiced on its onnxruntime (1.32 here, which onnxruntime-genai needs) against sherpa-onnx
    on the 1.28.2 it bundles. The features are identical (test_whisper_features.py) and so is the decoding
    (the test below). ONNX Runtime's LayerNormalization kernel is not (87% of its outputs differ in the last
    bits between 1.28 and 1.32 on the same input), and an INT8 model re-quantizes every LayerNorm output:
    with LayerNormalization in the graph, 110/118 files were identical. voiced-quantize writes it out as
    primitive operators (quantize/layernorm.py), whose kernels agree bit for bit across those versions."""
    files = _files(shared / "speech")
    differ = _differences(whisper_int8_dir, files, int8=True, ref=sherpa_int8)
    assert not differ, f"{len(differ)}/{len(files)} differ from sherpa-onnx: {differ[:5]}"


@pytest.fixture(scope="session")
def sherpa_side_ort() -> tuple[Path, str]:
    """The onnxruntime of sherpa-onnx's version beside the venv and that version; skips (before the
    model fixtures are built) when it is not installed."""
    from tests.sherpa_ort import bundled_version, side_install, side_version

    bundled = bundled_version()
    side = side_install()
    if bundled is None:
        pytest.skip("sherpa-onnx's bundled libonnxruntime was not found")
    if side is None:
        pytest.skip(f"no onnxruntime beside the venv for sherpa-onnx's {bundled}: "
                    f"pip install --target .ort-sherpa --no-deps onnxruntime=={bundled.rsplit('.', 1)[0]}.0 "
                    "(or set VOICED_SHERPA_ORT)")
    version = side_version(side) or "?"
    if version.split(".")[:2] != bundled.split(".")[:2]:
        pytest.skip(f"the onnxruntime in {side} is {version}, sherpa-onnx bundles {bundled}: install that minor version")
    return side, bundled


@pytest.mark.shared
def test_int8_tokens_equal_sherpa_onnx_under_sherpas_onnxruntime(
        sherpa_side_ort, whisper_int8_dir, sherpa_int8, shared) -> None:
    """The decoding itself is sherpa-onnx's: voiced, run in a child process on an onnxruntime of the version
    sherpa-onnx bundles (installed beside the venv, see tests/sherpa_ort.py), gives sherpa-onnx's tokens on
    the real files with the INT8 model (31 of them: see ``diagnostic_files``)."""
    side, bundled = sherpa_side_ort
    files = diagnostic_files(shared / "speech")
    # the side onnxruntime first; the checkout and whatever the parent's path held after it
    path = os.pathsep.join([str(side), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-m", "tests.whisper_tokens_child", str(whisper_int8_dir), *map(str, files)],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr[-2000:]
    child = json.loads(out.stdout.splitlines()[-1])
    assert Path(child["onnxruntime_file"]).is_relative_to(side), child["onnxruntime_file"]  # not the venv's
    reference = sherpa_int8.result()
    differ = [(name, reference[name][1], " ".join(tokens)) for name, tokens in child["tokens"].items()
              if tokens != reference[name][0]]
    assert not differ, (f"{len(differ)}/{len(files)} differ from sherpa-onnx under onnxruntime {child['onnxruntime']} "
                        f"(sherpa-onnx: {bundled}; kaldi-native-fbank {child['kaldi_native_fbank']}): {differ[:3]}")


@pytest.mark.shared
def test_transcribe_cli_prints_sherpas_text(whisper_model_dir, shared) -> None:
    jfk = shared / "speech" / "jfk" / "jfk.wav"
    ref = _sherpa(whisper_model_dir, False)
    stream = ref.create_stream()
    stream.accept_waveform(16000, _samples(jfk))
    ref.decode_stream(stream)
    out = subprocess.run([sys.executable, "-m", "voiced", "transcribe", "--asr-model", str(whisper_model_dir),
                          "--json", str(jfk)], capture_output=True, text=True, check=True, cwd=REPO,
                         env=dict(os.environ))
    [final] = [json.loads(line) for line in out.stdout.splitlines() if json.loads(line)["type"] == "final"]
    assert final["text"] == stream.result.text.strip()
    assert final["text"].startswith("And so my fellow Americans")


@pytest.mark.shared
def test_transcribe_cli_dereverberates_when_asked(whisper_model_dir, shared, tmp_path: Path) -> None:
    """jfk across a reverberant room (RT60 0.8 s, the direct path below the tail): ``--dereverb``
    prints the dereverberated audio's transcript, which has words the reverberant one lost."""
    from dataclasses import replace

    from voiced.audio.dereverb import DereverbConfig
    from voiced.audio.wav import write_wav
    from voiced.bench.commands import room_impulse

    samples = _samples(shared / "speech" / "jfk" / "jfk.wav")
    wet = np.convolve(samples, room_impulse(0.8, np.random.default_rng(7)))[:len(samples)]
    wet = (0.9 * wet / np.abs(wet).max()).astype(np.float32)
    path = tmp_path / "jfk_room.wav"
    write_wav(path, wet, 16000)
    heard = read_wav(path)[0][:, 0]  # as the CLI reads it (16-bit)
    whisper = WhisperRecognizer.load(whisper_model_dir)
    dry = WhisperRecognizer(whisper.model, replace(whisper.config, dereverb=DereverbConfig())).recognize(heard).text
    # measured (FP32 and INT8): "... what your concentration for you ..." as heard
    assert "your country can do for you" in dry and dry != whisper.recognize(heard).text
    out = subprocess.run([sys.executable, "-m", "voiced", "transcribe", "--asr-model", str(whisper_model_dir),
                          "--dereverb", "--json", str(path)], capture_output=True, text=True, check=True, cwd=REPO,
                         env=dict(os.environ))
    [final] = [json.loads(line) for line in out.stdout.splitlines() if json.loads(line)["type"] == "final"]
    assert final["text"] == dry


@pytest.mark.shared
def test_utterances_over_30_s_are_cut_at_a_quiet_moment_not_truncated(whisper_model_dir, shared) -> None:
    samples = _samples(shared / "speech" / "misc_en" / "two_cities_16k.wav")
    assert len(log_mel(samples, 80)) > MAX_SPEECH_FRAMES  # 44 s: sherpa-onnx keeps only the first 30
    text = WhisperRecognizer.load(whisper_model_dir).recognize(samples).text.lower()
    assert text.startswith("it was the best of times, it was the worst of times")
    assert "we were all going direct to heaven" in text  # before the cut
    assert "superlative degree of comparison" in text  # the end of the reading, after 30 s


def test_a_language_an_english_only_model_cannot_use_is_said_once_at_load(whisper_model_dir, caplog) -> None:
    model = WhisperRecognizer.load(whisper_model_dir).model
    said = lambda: [r for r in caplog.records if r.name == "voiced.asr.whisper"]  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="voiced.asr.whisper"):
        WhisperRecognizer(model, WhisperConfig(language="en"))
        assert not said()
        WhisperRecognizer(model, WhisperConfig(language="de"))
    [record] = said()
    assert "English-only: language 'de' does nothing" in record.getMessage()


def test_family_is_chosen_by_the_files(tmp_path, whisper_model_dir) -> None:
    assert family_of(whisper_model_dir) is AsrFamily.WHISPER
    assert isinstance(load_recognizer(whisper_model_dir), WhisperRecognizer)
    assert family_of(tmp_path) is AsrFamily.TRANSDUCER


def test_sessions_keep_no_memory_plan_per_utterance_length(whisper_model_dir) -> None:
    """Each utterance has its own input length: ONNX Runtime's per-shape memory plans would pile up in
    a daemon that runs for months (tiny.en INT8, 300 lengths: 521 MB RSS with them, 445 without)."""
    model = WhisperRecognizer.load(whisper_model_dir).model
    for session in (model.encoder, model.decoder):
        assert session.get_session_options().enable_mem_pattern is False


_RELEASE_CHILD = r"""
import json, os, sys
from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
from voiced.audio.wav import read_wav
from voiced.bench.common import proc_rss_mb

def mb():
    return proc_rss_mb(os.getpid())

model, short, long = sys.argv[1:]
out = {}
for after_s in (10.0, 0.0):  # released first: the arena then starts from the short clip's size both times
    recognizer = WhisperRecognizer.load(model, WhisperConfig(release_after_s=after_s))
    for _ in range(2):
        recognizer.recognize(read_wav(short)[0][:, 0])
    before = mb()
    text = recognizer.recognize(read_wav(long)[0][:, 0]).text
    out[str(after_s)] = {"before": before, "after": mb(), "text": text}
    del recognizer
print(json.dumps(out))
"""


def test_a_long_utterance_gives_the_arena_memory_back_and_decodes_the_same(whisper_int8_dir, shared) -> None:
    """ONNX Runtime's arena keeps what it grew by for a long utterance for the life of the process;
    past ``release_after_s`` of speech it gives it back. A child process of its own: nothing else
    this test run does moves its RSS. (INT8, what ships: 292 -> 413 MB kept, 273 -> 274 MB released;
    +18 MB released before ``trim_heap`` handed glibc's free pages back too. FP32: +134 kept, +25 released.)"""
    short = shared / "speech" / "hifitts_6097_5min" / "audio" / "roots_19_morris_0269.wav"
    long = shared / "speech" / "misc_en" / "two_cities_16k.wav"  # 44 s: pieces of ~30 and ~14 s
    run = subprocess.run([sys.executable, "-c", _RELEASE_CHILD, str(whisper_int8_dir), str(short), str(long)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    released, kept = out["10.0"], out["0.0"]
    assert kept["after"] - kept["before"] > 60  # the arena grows for the long pieces and keeps it...
    assert released["after"] - released["before"] < 10  # ...unless it is given back, to the system
    assert released["text"] == kept["text"] and "superlative degree of comparison" in kept["text"]


def test_missing_and_malformed_files_are_named(tmp_path, whisper_model_dir) -> None:
    broken = tmp_path / "w"
    broken.mkdir()
    for f in whisper_model_dir.iterdir():
        if "decoder" not in f.name:
            (broken / f.name).symlink_to(f)
    with pytest.raises(ModelError, match="decoder.onnx.*missing"):
        WhisperRecognizer.load(broken)
    (broken / "tiny.en-decoder.onnx").symlink_to(whisper_model_dir / "tiny.en-decoder.onnx")
    (broken / "tiny.en-tokens.txt").unlink()
    (broken / "tiny.en-tokens.txt").write_text("IQ== 0\nnot-base64!! 1\n")
    with pytest.raises(ModelError, match=r"tiny.en-tokens.txt:2: malformed token line"):
        WhisperRecognizer.load(broken)

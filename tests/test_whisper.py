"""Whisper tiny.en (real weights, converted by voiced-quantize import-ct2) against sherpa-onnx, token for token.

Real speech only: all 116 hifitts utterances, jfk and misc_en. sherpa-onnx's Python API
(``OfflineRecognizer.from_whisper``, greedy) decodes the very same ONNX files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voiced.asr.loader import AsrFamily, family_of, load_recognizer
from voiced.asr.whisper import MAX_SPEECH_FRAMES, WhisperRecognizer, log_mel
from voiced.audio.wav import read_wav
from voiced.errors import ModelError

sherpa_onnx = pytest.importorskip("sherpa_onnx", reason="sherpa-onnx (the reference) is not installed")

REPO = Path(__file__).resolve().parents[1]


def _files(speech: Path) -> list[Path]:
    hifi = sorted((speech / "hifitts_6097_5min" / "audio").glob("*.wav"))
    return [speech / "jfk" / "jfk.wav", speech / "misc_en" / "beckett.wav", *hifi]


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


def _assert_same_as_sherpa(model_dir: Path, files: list[Path], int8: bool) -> None:
    ref = _sherpa(model_dir, int8)
    ours = WhisperRecognizer.load(model_dir)
    assert (".int8." in ours.model.files.encoder.name) == int8
    differ = []
    for path in files:
        samples = _samples(path)
        stream = ref.create_stream()
        stream.accept_waveform(16000, samples)
        ref.decode_stream(stream)
        got = ours.recognize(samples)
        if list(got.tokens) != list(stream.result.tokens) or got.text != stream.result.text.strip():
            differ.append((path.name, stream.result.text, got.text))
    assert not differ, f"{len(differ)}/{len(files)} differ from sherpa-onnx: {differ[:3]}"


@pytest.mark.shared
def test_fp32_tokens_equal_sherpa_onnx_on_every_real_file(whisper_model_dir, shared) -> None:
    files = _files(shared / "speech")
    assert len(files) == 118
    _assert_same_as_sherpa(whisper_model_dir, files, int8=False)


@pytest.mark.shared
def test_int8_tokens_equal_sherpa_onnx_on_every_real_file(whisper_int8_dir, shared) -> None:
    _assert_same_as_sherpa(whisper_int8_dir, _files(shared / "speech"), int8=True)


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
def test_utterances_over_30_s_are_cut_at_a_quiet_moment_not_truncated(whisper_model_dir, shared) -> None:
    samples = _samples(shared / "speech" / "misc_en" / "two_cities_16k.wav")
    assert len(log_mel(samples, 80)) > MAX_SPEECH_FRAMES  # 44 s: sherpa-onnx keeps only the first 30
    text = WhisperRecognizer.load(whisper_model_dir).recognize(samples).text.lower()
    assert text.startswith("it was the best of times, it was the worst of times")
    assert "we were all going direct to heaven" in text  # before the cut
    assert "superlative degree of comparison" in text  # the end of the reading, after 30 s


def test_family_is_chosen_by_the_files(tmp_path, whisper_model_dir) -> None:
    assert family_of(whisper_model_dir) is AsrFamily.WHISPER
    assert isinstance(load_recognizer(whisper_model_dir), WhisperRecognizer)
    assert family_of(tmp_path) is AsrFamily.TRANSDUCER


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

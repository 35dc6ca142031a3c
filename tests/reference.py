"""Decode with the sherpa-onnx reference (Python API and C++ CLI), for token-for-token comparisons.

Facts about sherpa-onnx 2.0.1 (the version pinned for tests) that a compatible recognizer needs.
Sources: sherpa-onnx ``online-recognizer-transducer-impl.h``, ``online-transducer-greedy-search-decoder.cc``,
``online-transducer-modified-beam-search-decoder.cc``, ``online-transducer-model.cc``,
``symbol-table.cc``, and experiments against the installed binaries (tests/test_modelgen.py checks them).

Features and chunking
    80-bin kaldi fbank, 16 kHz, dither 0, snip_edges false, samples in [-1, 1], low 20 Hz,
    high -400. A chunk is the encoder metadata ``T`` frames starting at ``processed``; after each
    chunk ``processed += decode_chunk_len``. ``is_ready`` is ``processed + T < frames_ready``
    (strictly less). Encoder states are passed and taken back *by position* (input order after
    ``x``; outputs after ``encoder_out``), starting from zeros (``processed_lens`` int64 zeros).

Greedy search
    - The initial decoder context is ``[-1] * (context_size - 1) + [0]`` (blank last), i.e.
      ``[-1, 0]`` for context_size 2 -- not ``[0, 0]``; the icefall decoder embeds negative ids to zero.
    - Blank id is 0. Per frame: argmax of the joiner logit (first index on ties). If it is neither
      0 nor the id of ``<unk>`` the token is appended, its timestamp is the global encoder frame
      index, and the decoder is rerun on the last ``context_size`` tokens. ``<unk>`` is treated
      exactly like blank: not emitted, no decoder update, counted in ``num_trailing_blanks``.
    - At most one token per frame. The decoder output is cached across chunks.
    - ``timestamps[i] = frame_index * 0.04`` s (10 ms shift x subsampling 4, hard-coded), counted
      from the first sample given to the stream (CLI left padding included, see below).

Modified beam search (``max_active_paths`` = 4 by default)
    Same initial context; per frame the log-softmax of every hypothesis' logits plus its score,
    top-k over all (hyp, token) pairs; blank and ``<unk>`` keep ys; equal ys merge by log-add;
    the result is the best hypothesis by ``log_prob / len(ys)`` (ys includes the 2 context ids).
    Hotwords need ``modeling_unit="bpe"`` and ``bpe_vocab`` (our ``bpe.vocab``, segmented by best
    total score); matched hotword tokens earn ``hotwords_score`` each, a match that breaks off is
    taken back (``context_scores`` in the result).

Tokens and text
    - ``tokens.txt`` symbols starting with ``▁`` (U+2581) get it replaced by one ASCII space when
      loaded, so result ``tokens`` read ``" THE"``, and the bare ``▁`` token reads ``" "``.
    - ``tokens`` never contain ``<unk>`` (greedy and beam treat it as blank); the text conversion
      would also skip a ``<unk>`` symbol.
    - ``text`` is ``"".join(tokens)`` post-processed (sherpa-onnx PRs #3709 and #3711, 2026):
      one space right before a punctuation character is removed (ASCII punctuation, CJK marks
      U+3001-U+303F, full-width U+FF01-FF0F, FF1A-FF20, FF3B-FF40, FF5B-FF65; not …, —, «, », ’, ”);
      leading spaces are removed; then one leading punctuation character is removed
      (``"'EK"`` -> ``"EK"``, ``" <unk>"`` -> ``"unk>"``). Trailing spaces and double spaces
      between words stay. Compare ``tokens`` for exactness; ``sherpa_text`` reproduces ``text``.

The C++ CLI (``sherpa-onnx`` 2.0.1)
    Pads 0.5 s of zeros on the left (``--left-padding``) and 0.8 s on the right (``--right-padding``)
    by default, so its default output differs from the Python API with 0.8 s tail padding, and its
    timestamps include the left padding. ``sherpa_cli`` passes ``--left-padding=0`` so both agree.
    Endpointing (on by default) does not split a file's result. It prints (on stderr) one JSON line
    per file (keys text, tokens, timestamps, ys_probs, ..., segment, start_time, is_final). Files
    given together are decoded as one batch; with int8 models that changes the result, because
    dynamic quantization scales activations over the whole batch (fp32 results are unaffected).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SAMPLE_RATE",
    "read_wav",
    "model_files",
    "sherpa_greedy",
    "sherpa_modified_beam",
    "sherpa_cli",
    "sherpa_text",
]

SAMPLE_RATE = 16000
_PUNCT_RANGES = ((0x3001, 0x303F), (0xFF01, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65))


def _is_punct(ch: str) -> bool:
    """ASCII punctuation and CJK / full-width punctuation (not …, —, «, », ’, ”)."""
    if ch.isascii():
        return ch in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    return any(lo <= ord(ch) <= hi for lo, hi in _PUNCT_RANGES)


def read_wav(path: str | Path) -> np.ndarray:
    """A 16 kHz mono 16-bit WAV as float32 samples in [-1, 1]."""
    with wave.open(str(path), "rb") as w:
        if w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: need 16 kHz mono s16, got {w.getframerate()} Hz x{w.getnchannels()}")
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def model_files(model_dir: str | Path, prefer_int8: bool = False) -> dict[str, str]:
    """Paths of tokens, encoder, decoder, joiner; ``*.int8.onnx`` when preferred and present."""
    d = Path(model_dir)
    out = {"tokens": str(d / "tokens.txt")}
    for part in ("encoder", "decoder", "joiner"):
        int8 = d / f"{part}.int8.onnx"
        out[part] = str(int8 if prefer_int8 and int8.is_file() else d / f"{part}.onnx")
    return out


def sherpa_text(tokens: list[str]) -> str:
    """sherpa-onnx 2.0.1's result text from its result tokens (see the module docstring)."""
    chars: list[str] = []
    for ch in "".join(tokens):
        if _is_punct(ch) and chars and chars[-1] == " ":
            chars.pop()
        chars.append(ch)
    text = "".join(chars).lstrip(" ")
    return text[1:] if text and _is_punct(text[0]) else text


def _recognizer(model_dir, num_threads: int, prefer_int8: bool, **kwargs):
    import sherpa_onnx

    files = model_files(model_dir, prefer_int8)
    return sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=files["tokens"],
        encoder=files["encoder"],
        decoder=files["decoder"],
        joiner=files["joiner"],
        num_threads=num_threads,
        sample_rate=SAMPLE_RATE,
        feature_dim=80,
        **kwargs,
    )


def _decode(recognizer, stream, samples: np.ndarray, tail_padding_ms: int, feed_samples: int | None) -> dict:
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    step = feed_samples or max(len(samples), 1)
    chunks = 0
    cpu0 = time.process_time()
    for start in range(0, len(samples), step):
        stream.accept_waveform(SAMPLE_RATE, samples[start : start + step])
        while recognizer.is_ready(stream):
            recognizer.decode_stream(stream)
            chunks += 1
    stream.accept_waveform(SAMPLE_RATE, np.zeros(SAMPLE_RATE * tail_padding_ms // 1000, dtype=np.float32))
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
        chunks += 1
    cpu = time.process_time() - cpu0
    result: dict[str, Any] = json.loads(recognizer.get_result_as_json_string(stream))
    result["chunks"] = chunks
    result["cpu_seconds"] = cpu
    return result


def sherpa_greedy(
    model_dir: str | Path,
    samples: np.ndarray,
    tail_padding_ms: int = 800,
    num_threads: int = 1,
    prefer_int8: bool = False,
    feed_samples: int | None = None,
) -> dict[str, Any]:
    """Greedy-search ``samples`` (float32, 16 kHz, [-1, 1]) with ``sherpa_onnx.OnlineRecognizer``.

    Appends ``tail_padding_ms`` of zeros, calls ``input_finished`` and decodes while ready. With
    ``feed_samples`` the audio goes in pieces of that many samples, decoding while ready after
    each (the result is the same). Returns sherpa's JSON result as a dict -- ``tokens`` (list of
    str, ``▁`` shown as a space), ``text``, ``timestamps`` (s), ``ys_probs``, ``num_trailing_blanks``
    ... -- plus ``chunks`` (encoder runs) and ``cpu_seconds`` (process CPU time of the decoding).
    """
    recognizer = _recognizer(model_dir, num_threads, prefer_int8, decoding_method="greedy_search")
    return _decode(recognizer, recognizer.create_stream(), samples, tail_padding_ms, feed_samples)


def sherpa_modified_beam(
    model_dir: str | Path,
    samples: np.ndarray,
    hotwords: list[str] | None = None,
    *,
    max_active_paths: int = 4,
    hotwords_score: float = 1.5,
    tail_padding_ms: int = 800,
    num_threads: int = 1,
    prefer_int8: bool = False,
    feed_samples: int | None = None,
) -> dict[str, Any]:
    """Like ``sherpa_greedy`` with modified beam search, optionally biased towards ``hotwords``.

    Each hotword is a phrase of upper-case words ("TURN LIGHTS"); sherpa encodes it with the model
    directory's ``bpe.vocab`` (``modeling_unit="bpe"``) and adds ``hotwords_score`` per matched token.
    """
    vocab = Path(model_dir) / "bpe.vocab"
    kwargs: dict[str, Any] = {"decoding_method": "modified_beam_search", "max_active_paths": max_active_paths}
    if hotwords:
        if not vocab.is_file():
            raise FileNotFoundError(f"hotwords need {vocab}")
        kwargs.update(modeling_unit="bpe", bpe_vocab=str(vocab), hotwords_score=hotwords_score)
    recognizer = _recognizer(model_dir, num_threads, prefer_int8, **kwargs)
    stream = recognizer.create_stream("/".join(hotwords)) if hotwords else recognizer.create_stream()
    return _decode(recognizer, stream, samples, tail_padding_ms, feed_samples)


def _cli_binary() -> str:
    local = Path(sys.executable).with_name("sherpa-onnx")
    found = str(local) if local.is_file() else shutil.which("sherpa-onnx")
    if not found:
        raise FileNotFoundError("the sherpa-onnx CLI (pip install sherpa-onnx-bin) is not installed")
    return found


def sherpa_cli(
    model_dir: str | Path,
    wavs: list[str | Path],
    *,
    tail_padding_ms: int = 800,
    left_padding_ms: int = 0,
    num_threads: int = 1,
    prefer_int8: bool = False,
    decoding_method: str = "greedy_search",
    batch: bool = False,
    timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """Decode ``wavs`` with the C++ ``sherpa-onnx`` CLI; one JSON result dict per wav, in order.

    ``left_padding_ms=0`` (the CLI's own default is 500) makes results equal to ``sherpa_greedy``
    with the same ``tail_padding_ms``. The CLI decodes the files it is given together as one batch,
    and int8 models quantize activations per batch, so by default each wav gets its own process;
    ``batch=True`` passes them all at once. Each dict also has the CLI's ``elapsed_seconds``.
    """
    if not batch and len(wavs) > 1:
        return [
            r
            for w in wavs
            for r in sherpa_cli(
                model_dir,
                [w],
                tail_padding_ms=tail_padding_ms,
                left_padding_ms=left_padding_ms,
                num_threads=num_threads,
                prefer_int8=prefer_int8,
                decoding_method=decoding_method,
                timeout=timeout,
            )
        ]
    files = model_files(model_dir, prefer_int8)
    cmd = [
        _cli_binary(),
        f"--tokens={files['tokens']}",
        f"--encoder={files['encoder']}",
        f"--decoder={files['decoder']}",
        f"--joiner={files['joiner']}",
        f"--num-threads={num_threads}",
        f"--decoding-method={decoding_method}",
        f"--left-padding={left_padding_ms / 1000}",
        f"--right-padding={tail_padding_ms / 1000}",
        "--enable-endpoint=false",
        *(str(w) for w in wavs),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"sherpa-onnx failed ({proc.returncode}): {proc.stderr[-2000:]}")
    results: list[dict[str, Any]] = []
    elapsed = None
    # sherpa-onnx 2.0.1 prints its results on stderr; read stdout too in case a build differs.
    for line in (proc.stdout + "\n" + proc.stderr).splitlines():
        if line.startswith("Number of threads:") and "Elapsed seconds:" in line:
            elapsed = float(line.split("Elapsed seconds:")[1].split(",")[0])
        elif line.startswith("{"):
            result = json.loads(line)
            result["elapsed_seconds"] = elapsed
            results.append(result)
    if len(results) != len(wavs):
        raise RuntimeError(f"expected {len(wavs)} results from sherpa-onnx, got {len(results)}:\n{proc.stderr[-2000:]}")
    return results

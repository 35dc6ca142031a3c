"""``voiced bench recordings``: your own recordings of commands, free vs template-aware Whisper vs faster-whisper.

``voiced bench commands`` makes its command set with a synthetic voice in a simulated room; this
measures the same decodings on recordings you made (or keep aside), with your home's templates
and names from a voiced config's ``[intents]``. A recording's wanted intent is what the intent
stage gives its reference transcript: recordings whose reference matches no intent are free
speech, on which an intent is a false one. Each recording is one utterance, as the daemon's
endpointer would cut it (at most Whisper's 30 s window).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voiced.asr.wer import wer
from voiced.errors import ConfigError

__all__ = ["Recording", "bench_recordings", "read_recordings"]

TRANSCRIPTS = "transcripts.tsv"
"""The listing in a recordings folder: a header naming the columns ``file`` and ``text`` (others
are ignored, as in ../shared/speech/hifitts_6097_5min), then one recording a line."""
MANIFEST = "manifest.json"
"""The other listing (read when there is no ``transcripts.tsv``): NeMo's manifest, a JSON object a
line with ``audio_filepath`` (relative to the folder) and ``text`` (others ignored), as speech
datasets such as Hi-Fi TTS come."""
MAX_SECONDS = 30.0
"""Whisper hears at most this much audio at once."""
KEY = "recordings"
"""The option the errors name."""


@dataclass(frozen=True)
class Recording:
    """One line of a listing."""

    name: str
    """As the listing names it (relative to the folder)."""
    path: Path
    text: str
    """The reference transcript."""


def read_recordings(folder: Path) -> list[Recording]:
    """The recordings ``folder/transcripts.tsv`` (or, without it, ``folder/manifest.json``) lists; a
    missing or malformed listing or a missing file raises ConfigError naming the listing and its line."""
    folder = Path(folder)
    if (folder / TRANSCRIPTS).is_file():
        listing, rows = folder / TRANSCRIPTS, _tsv_rows(folder / TRANSCRIPTS)
    elif (folder / MANIFEST).is_file():
        listing, rows = folder / MANIFEST, _manifest_rows(folder / MANIFEST)
    else:
        raise ConfigError(KEY, f"no {TRANSCRIPTS} (a header naming the columns file and text, then one recording"
                          f" a line, tab-separated) or {MANIFEST} (a JSON object a line with audio_filepath and"
                          " text)", str(folder))
    out = []
    for n, name, text in rows:
        path = listing.parent / name
        if not path.is_file():
            raise ConfigError(KEY, f"line {n}: {path} does not exist", str(listing))
        out.append(Recording(name, path, text.strip()))
    if not out:
        raise ConfigError(KEY, "lists no recording", str(listing))
    return out


def _tsv_rows(listing: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, file, text) of a tab-separated listing with a header."""
    # utf-8-sig: spreadsheets save a byte-order mark, which is not part of the first column's name
    lines = listing.read_text(encoding="utf-8-sig").splitlines()
    header = lines[0].split("\t") if lines else []
    if "file" not in header or "text" not in header:
        raise ConfigError(KEY, f"the first line must name the columns file and text (tab-separated), got {header!r}",
                          str(listing))
    file_col, text_col = header.index("file"), header.index("text")
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) <= max(file_col, text_col):
            raise ConfigError(KEY, f"line {n}: {len(cols)} columns, the header names {len(header)}", str(listing))
        yield n, cols[file_col], cols[text_col]


def _manifest_rows(listing: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, file, text) of a NeMo-style manifest: one JSON object a line."""
    for n, line in enumerate(listing.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(KEY, f"line {n}: not JSON ({exc.msg})", str(listing)) from None
        if not isinstance(entry, dict) or not isinstance(entry.get("audio_filepath"), str) \
                or not isinstance(entry.get("text"), str):
            raise ConfigError(KEY, f"line {n}: needs the strings audio_filepath and text", str(listing))
        yield n, entry["audio_filepath"], entry["text"]


def _load(path: Path) -> np.ndarray:
    """A recording as 16 kHz mono float32 (any rate and channels ``read_wav`` reads)."""
    from voiced.audio.frames import SAMPLE_RATE
    from voiced.audio.resample import StreamingResampler, to_mono
    from voiced.audio.wav import read_wav

    samples, rate = read_wav(path)
    mono = StreamingResampler(rate, SAMPLE_RATE).process(to_mono(samples), last=True)
    if len(mono) > MAX_SECONDS * SAMPLE_RATE:
        raise ConfigError(KEY, f"{path}: {len(mono) / SAMPLE_RATE:.1f} s; a recording is one utterance of at most"
                          f" {MAX_SECONDS:.0f} s (Whisper's window)")
    return mono


def _figures(refs: Sequence[str], texts: Sequence[str], wanted: Sequence, keys: Sequence) -> dict[str, object]:
    """WER over all recordings; right intents over the in-domain ones; intents given to free speech."""
    in_domain = [i for i, w in enumerate(wanted) if w is not None]
    right = sum(keys[i] == wanted[i] for i in in_domain)
    return {"wer_percent": round(wer(zip(refs, texts)), 2),
            "wer_numbers_as_words_percent": round(wer(zip(refs, texts), True), 2),
            "intent_accuracy_percent": round(100 * right / len(in_domain), 1) if in_domain else None,
            "right_intents": right,
            "false_intents": sum(keys[i] is not None for i, w in enumerate(wanted) if w is None)}


def bench_recordings(model_dir: Path, folder: Path, config: Path | None = None,
                     ct2_dir: Path | None = None) -> dict[str, object]:
    """Free and template-aware decoding (the daemon's defaults, 1 thread) and faster-whisper (int8,
    greedy, when its weights are there) on the recordings of ``folder``, with the intents of
    ``config`` (a voiced config file; default: ``voiced bench commands``' Home Assistant set).
    Per file, ``right``: the wanted intent, or none for free speech."""
    from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
    from voiced.asr.whisper_templates import TemplateDecoding
    from voiced.bench.commands import _intents, _key, _progress, wer_ratios
    from voiced.audio.frames import SAMPLE_RATE
    from voiced.bench.whisper import default_ct2_dir, faster_whisper_texts

    recordings = read_recordings(folder)
    if config is not None:
        from voiced.config import Config
        from voiced.intents import IntentRecognizer

        recognizer = IntentRecognizer.from_section(Config.from_file(config).intents, str(config))
    else:
        recognizer = _intents()
    audio = [_load(r.path) for r in recordings]
    whisper = WhisperRecognizer.load(model_dir, WhisperConfig(threads=1))
    whisper.use_templates(recognizer.sentence_space(), TemplateDecoding())
    refs = [r.text for r in recordings]
    wanted = [_key(recognizer.recognize(t)) for t in refs]
    free, template, seconds = [], [], []
    for n, x in enumerate(audio, 1):
        _progress(f"{n}/{len(audio)}", n, len(audio), bench="recordings")
        t = time.process_time()
        choice = whisper.choose(x)
        seconds.append(time.process_time() - t)
        free.append(whisper.model.text(choice.free[0]).strip())
        template.append(whisper.model.text(choice.tokens).strip())
    sides = {"free": free, "template_aware": template}
    cpu = {"template_aware_p50": round(1000 * float(np.median(seconds)), 1)}
    ct2_dir = ct2_dir or default_ct2_dir()
    if ct2_dir is not None:
        _progress("faster-whisper", bench="recordings")
        sides["faster_whisper_int8"], fw_s = faster_whisper_texts(ct2_dir, audio)
        cpu["faster_whisper_int8_p50"] = round(1000 * float(np.median(fw_s)), 1)
    keys = {side: [_key(recognizer.recognize(t)) for t in texts] for side, texts in sides.items()}
    report: dict[str, object] = {
        "recordings": len(recordings), "in_domain": sum(w is not None for w in wanted),
        "seconds": round(sum(len(x) for x in audio) / SAMPLE_RATE, 1),
        **{side: _figures(refs, texts, wanted, keys[side]) for side, texts in sides.items()},
        "cpu_ms_per_recording": cpu,
        "files": [{"file": r.name, "reference": r.text,
                   "wanted": None if w is None else [w[0], dict(w[1])],
                   **{side: {"text": sides[side][i], "right": keys[side][i] == w}
                      for side in sides}} for i, (r, w) in enumerate(zip(recordings, wanted))],
    }
    if "faster_whisper_int8" in sides:
        report.update(wer_ratios(report))
    return report

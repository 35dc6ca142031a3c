"""Reference transcripts for validation audio, found beside the WAV files.

Two layouts are read (the ones ../shared/speech uses): a ``transcripts.tsv`` with a header
naming ``file`` and ``text`` columns (``file`` relative to the TSV's folder), in the WAV's
folder or its parent; or a ``transcript.txt`` in a folder holding exactly one WAV file.
Files without a reference are validated by agreement only.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from voiced.errors import ConfigError

__all__ = ["find_references"]


def _read_tsv(path: Path) -> dict[Path, str]:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError("--audio", f"cannot read transcripts {path}: {exc}") from None
    if rows and not {"file", "text"} <= set(rows[0]):
        raise ConfigError("--audio", f"{path}: needs 'file' and 'text' columns, has {', '.join(rows[0])}")
    return {(path.parent / row["file"]).resolve(): row["text"] for row in rows if row.get("file")}


def find_references(wavs: Sequence[Path]) -> dict[Path, str]:
    """Reference text per WAV (resolved path) for those that have one."""
    tables: dict[Path, dict[Path, str]] = {}
    refs: dict[Path, str] = {}
    for wav in wavs:
        wav = wav.resolve()
        for folder in (wav.parent, wav.parent.parent):
            tsv = folder / "transcripts.tsv"
            if tsv.is_file():
                if tsv not in tables:
                    tables[tsv] = _read_tsv(tsv)
                if wav in tables[tsv]:
                    refs[wav] = tables[tsv][wav]
                    break
        else:
            txt = wav.parent / "transcript.txt"
            if txt.is_file() and len(list(wav.parent.glob("*.wav"))) == 1:
                refs[wav] = txt.read_text(encoding="utf-8").strip()
    return refs

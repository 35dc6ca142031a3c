"""The catalog pins only checksums it can back: each one matches the copy in ../shared it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from voiced.errors import ConfigError
from voiced.models.catalog import CATALOG, find_entry
from voiced.models.manifest import sha256_file

FROM_SHARED = {
    ("silero-vad-v5", "silero_vad.onnx"): "silero_vad_v5/silero_vad.onnx",
    ("silero-vad-v6", "silero_vad.onnx"): "silero_vad_v6/silero_vad.onnx",
    ("openwakeword-features", "melspectrogram.onnx"): "openwakeword/melspectrogram.onnx",
    ("openwakeword-features", "embedding_model.onnx"): "openwakeword/embedding_model.onnx",
}


def test_every_pinned_checksum_is_backed_by_a_copy_in_shared() -> None:
    pinned = {(e.name, f.path) for e in CATALOG for f in e.files if f.sha256}
    assert pinned == set(FROM_SHARED)  # anything else pinned would be a checksum nobody verified


@pytest.mark.shared
@pytest.mark.parametrize(("key", "rel"), FROM_SHARED.items())
def test_pinned_checksums_match_the_shared_copies(models: Path, key, rel) -> None:
    entry = find_entry(key[0])
    f = next(f for f in entry.files if f.path == key[1])
    assert sha256_file(models / rel) == f.sha256 and (models / rel).stat().st_size == f.size


def test_unknown_names_list_the_catalog() -> None:
    with pytest.raises(ConfigError, match="silero-vad-v5"):
        find_entry("nope")
    assert not find_entry("piper-en_US-lessac-medium").pinned

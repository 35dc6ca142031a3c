"""Checking a model file before it is loaded: checksums from a manifest or an install record.

Two records can vouch for a file:

- ``MODEL.int8.onnx.json`` beside it, written by ``voiced-quantize`` (source and output
  sha256, method, versions, agreement figures);
- ``voiced-model.json`` at the root of a model directory installed by ``voiced models``
  (the sha256 of every file as installed).

:func:`verify_model_file` hashes the file in 1 MiB blocks (a 70 MB encoder costs about a
second on a Pi 4) and compares: a mismatch raises :class:`~voiced.errors.ModelError`
naming the file and both checksums; a file no record vouches for is loaded with a warning.
Results are cached per process by (inode, size, mtime, ctime), so loading the same file
twice hashes it once; any write to the file moves its mtime and ctime and so re-hashes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from voiced.errors import ModelError

__all__ = [
    "INSTALL_RECORD",
    "MANIFEST_FORMAT",
    "Manifest",
    "ManifestStatus",
    "Trust",
    "failed_validation",
    "manifest_path",
    "sha256_file",
    "stale_source",
    "validated_choice",
    "verify_model_file",
    "verify_model_files",
]

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "voiced-quantize-manifest/1"
"""The ``format`` value of a quantization manifest."""
INSTALL_RECORD = "voiced-model.json"
"""Name of the install record at the root of every model directory in the store."""
HASH_BLOCK = 1 << 20
"""Bytes read per hash update: large enough for full speed, small enough for a Pi's RAM."""


class Trust(Enum):
    """How far a model file could be checked."""

    VERIFIED = "verified"
    """A manifest or install record lists the file and its sha256 matches."""
    UNVERIFIED = "unverified"
    """No record lists the file (e.g. an INT8 file copied by hand); loaded with a warning."""
    FP32 = "fp32"
    """An FP32 file no record lists: loaded with a warning that INT8 is smaller and faster."""


@dataclass(frozen=True)
class Manifest:
    """The quantization manifest written beside ``MODEL.int8.onnx`` as ``MODEL.int8.onnx.json``."""

    model: str
    """File name of the quantized model (the manifest's own name without ``.json``)."""
    sha256: str
    """sha256 of the quantized model, hex."""
    size: int
    """Size of the quantized model in bytes."""
    source: Mapping[str, Any]
    """The FP32 model it came from: ``file``, ``sha256``, ``size``."""
    quantization: Mapping[str, Any] = field(default_factory=dict)
    """Method, the reason it was chosen, and every parameter given to onnxruntime."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """onnxruntime, onnx, voiced and Python versions that produced the file."""
    validation: Mapping[str, Any] = field(default_factory=dict)
    """FP32 vs INT8 figures on the held-back data (errors, agreement, sizes, speed)."""
    created: str = ""
    """ISO 8601 UTC time of writing."""
    format: str = MANIFEST_FORMAT
    """Manifest format tag."""

    def __post_init__(self) -> None:
        if self.format != MANIFEST_FORMAT:
            raise ModelError(f"unknown manifest format {self.format!r} (expected {MANIFEST_FORMAT})")
        if not _is_sha256(self.sha256):
            raise ModelError(f"manifest for {self.model}: sha256 {self.sha256!r} is not 64 hex digits")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "model": self.model,
            "sha256": self.sha256,
            "size": self.size,
            "source": dict(self.source),
            "quantization": dict(self.quantization),
            "versions": dict(self.versions),
            "validation": dict(self.validation),
            "created": self.created,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "manifest") -> Manifest:
        try:
            return cls(
                model=str(data["model"]),
                sha256=str(data["sha256"]).lower(),
                size=int(data["size"]),
                source=dict(data.get("source", {})),
                quantization=dict(data.get("quantization", {})),
                versions=dict(data.get("versions", {})),
                validation=dict(data.get("validation", {})),
                created=str(data.get("created", "")),
                format=str(data.get("format", "")),
            )
        except ModelError as exc:  # the format tag or the checksum: say which manifest
            raise ModelError(f"{origin}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{origin}: not a voiced-quantize manifest ({exc!r})") from None

    @classmethod
    def load(cls, path: str | Path) -> Manifest:
        """Read a manifest file; a missing, unreadable or malformed one raises ModelError naming it."""
        data = _read_json(Path(path))
        return cls.from_dict(data, str(path))

    def write(self, path: str | Path) -> None:
        """Write atomically (temp file + rename), so a crash never leaves half a manifest."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)


@dataclass(frozen=True)
class ManifestStatus:
    """The outcome of :func:`verify_model_file` for one file."""

    path: Path
    trust: Trust
    sha256: str | None
    """The file's sha256 when it was computed (VERIFIED), else None: unvouched files are not hashed."""
    record: Path | None = None
    """The manifest or install record that vouched for the file."""
    manifest: Manifest | None = None
    """The quantization manifest, when that is the record."""

    @property
    def ok(self) -> bool:
        return self.trust is Trust.VERIFIED


def manifest_path(model: str | Path) -> Path:
    """``MODEL.int8.onnx`` → ``MODEL.int8.onnx.json``."""
    model = Path(model)
    return model.with_name(model.name + ".json")


def sha256_file(path: str | Path, block: int = HASH_BLOCK) -> str:
    """sha256 of a file, read in ``block``-byte pieces into one reused buffer."""
    digest = hashlib.sha256()
    buf = bytearray(block)
    view = memoryview(buf)
    try:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                digest.update(view[:n])
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    return digest.hexdigest()


_cache: dict[tuple[int, int, int, int, int], str] = {}
_cache_lock = threading.Lock()


def _cached_sha256(path: Path, use_cache: bool) -> str:
    st = path.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if use_cache:
        with _cache_lock:
            if key in _cache:
                return _cache[key]
    digest = sha256_file(path)
    with _cache_lock:
        _cache[key] = digest
    return digest


def verify_model_file(path: str | Path, *, use_cache: bool = True) -> ManifestStatus:
    """Check ``path`` against its manifest or install record before loading it.

    - sha256 matches the record → ``Trust.VERIFIED`` (logged at debug).
    - sha256 differs → :class:`ModelError` naming the file, the record and both checksums:
      the file is corrupt or was modified, and must not be loaded.
    - No record lists the file → ``Trust.UNVERIFIED`` or, for a file without ``.int8.`` in
      its name, ``Trust.FP32``; both are logged as warnings and the file may be loaded.

    A missing file, or a record that cannot be parsed, raises ModelError naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    expected, record, manifest = _find_record(path)
    if expected is None:
        if ".int8." in path.name:
            log.warning("%s: no manifest (%s) or install record vouches for this INT8 file; loading it unverified",
                        path, manifest_path(path).name)
            return ManifestStatus(path, Trust.UNVERIFIED, None)
        log.warning("%s: FP32 model without a manifest; an INT8 copy (voiced-quantize) is smaller and faster on a Pi",
                    path)
        return ManifestStatus(path, Trust.FP32, None)
    actual = _cached_sha256(path, use_cache)
    if actual != expected:
        raise ModelError(
            f"{path}: sha256 {actual} does not match {expected} recorded in {record}; "
            "the file is corrupt or was modified: refusing to load it (reinstall or re-quantize it)"
        )
    log.debug("%s: sha256 %s matches %s", path, actual, record)
    if manifest is not None and (why := _failures(manifest)) is not None:
        log.warning("%s: intact, but it failed validation when it was quantized (%s)", path, why)
    return ManifestStatus(path, Trust.VERIFIED, actual, record, manifest)


def _failures(manifest: Manifest) -> str | None:
    """Why the model failed validation when it was quantized; None if it passed or nothing says."""
    if manifest.validation.get("passed") is not False:
        return None
    failures = manifest.validation.get("failures")
    if isinstance(failures, list) and failures:  # a hand-edited manifest may hold anything here
        return "; ".join(map(str, failures))
    return str(failures) if failures else "see the manifest"


def _manifest_beside(path: str | Path) -> Manifest | None:
    """The manifest beside ``path``; None when there is none or it cannot be read (loading says so)."""
    mpath = manifest_path(path)
    try:
        return Manifest.load(mpath) if mpath.is_file() else None
    except ModelError:
        return None


def failed_validation(path: str | Path) -> str | None:
    """Why the INT8 file ``path`` failed validation when it was quantized, from the manifest beside
    it; None when it passed, has no manifest, or the manifest cannot be read."""
    manifest = _manifest_beside(path)
    return _failures(manifest) if manifest is not None else None


def stale_source(path: str | Path) -> str | None:
    """When the FP32 model the INT8 file ``path`` was made from sits beside it, changed since (a
    new export, a retrained model): what differs. None otherwise. Hashes that model: for doctor."""
    manifest = _manifest_beside(path)
    source = manifest.source if manifest is not None else {}
    name, recorded = source.get("file"), source.get("sha256")
    original = Path(path).with_name(str(name)) if name else None
    if original is None or not original.is_file() or not isinstance(recorded, str):
        return None
    actual = sha256_file(original)
    return None if actual == recorded else f"made from a {name} with sha256 {recorded}, the one beside it has {actual}"


def validated_choice(paths: Sequence[Path]) -> list[Path]:
    """``paths``, one model's files as a directory finder picked them (INT8 preferred), or their
    FP32 originals beside them when an INT8 one failed validation when it was quantized: that
    model is kept for inspection, not loaded in place of the model it was made from."""
    failed = [(p, why) for p in paths if ".int8." in p.name and (why := failed_validation(p)) is not None]
    if not failed:
        return list(paths)
    originals = [p.with_name(p.name.replace(".int8.", ".")) for p in paths]
    path, why = failed[0]
    if all(o.is_file() for o in originals):
        log.warning("%s failed validation when it was quantized (%s): loading the FP32 files beside it instead",
                    path, why)
        return originals
    log.warning("%s failed validation when it was quantized (%s), and its FP32 files are not here: loading it",
                path, why)
    return list(paths)


def verify_model_files(paths: Iterable[str | Path], *, use_cache: bool = True) -> list[ManifestStatus]:
    """:func:`verify_model_file` for each path (e.g. a transducer's encoder, decoder and joiner)."""
    return [verify_model_file(p, use_cache=use_cache) for p in paths]


def _find_record(path: Path) -> tuple[str | None, Path | None, Manifest | None]:
    """(expected sha256, record file, manifest) from the nearest record that lists ``path``."""
    mpath = manifest_path(path)
    # MODEL.onnx.json is also where others keep sidecars (a Piper voice's config): only a JSON
    # object that claims a manifest format is ours; anything else is not a record at all.
    if mpath.is_file() and _claims_manifest(_read_json(mpath)):
        manifest = Manifest.load(mpath)
        if manifest.model != path.name:
            # A renamed model keeps its manifest's checksum; a mismatch in name alone is worth a note.
            log.info("%s: manifest %s was written for %s", path, mpath.name, manifest.model)
        return manifest.sha256, mpath, manifest
    # An install record at the root of the model's directory, at most a few levels up.
    resolved = path.resolve()
    for parent in list(resolved.parents)[:4]:
        rpath = parent / INSTALL_RECORD
        if rpath.is_file():
            files = _read_json(rpath).get("files", {})
            entry = files.get(resolved.relative_to(parent).as_posix()) if isinstance(files, dict) else None
            if isinstance(entry, dict) and _is_sha256(str(entry.get("sha256", ""))):
                return str(entry["sha256"]).lower(), rpath, None
            return None, None, None
    return None, None, None


def _claims_manifest(data: Mapping[str, Any]) -> bool:
    # A manifest with its format tag deleted still claims the model and its checksum: checked
    # (and refused for the missing tag), not taken for someone else's sidecar and skipped.
    return "format" in data or {"model", "sha256"} <= data.keys()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object")
    return data


def _is_sha256(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value)

"""The model store: one directory per installed model, each with an install record.

    store = ModelStore(default_root())     # $STATE_DIRECTORY/models or $XDG_DATA_HOME/voiced/models
    store.install(Path("/media/usb/sherpa-onnx-streaming-zipformer-en-20M.tar.bz2"))
    store.verify("sherpa-onnx-streaming-zipformer-en-20M")     # every file against its recorded sha256

Every model lives in ``ROOT/NAME/`` with ``voiced-model.json`` recording where it came
from and the sha256 of every file as installed; :func:`voiced.models.manifest.verify_model_file`
uses that record at load. Installs are staged in ``ROOT/.staging-*`` and renamed into place,
so a failed or interrupted install never leaves half a model under its name; removals pass
through a staging directory too. What a killed install or remove leaves there is deleted by
the next install or remove (each holds an flock on its staging directory while alive). Archives are
unpacked with tarfile's ``data`` filter: no absolute paths, no ``..``, no links out, no devices.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from voiced.errors import ConfigError, ModelError
from voiced.models.catalog import CatalogEntry, ModelKind
from voiced.models.download import DownloadOptions, download
from voiced.models.manifest import (
    INSTALL_RECORD,
    manifest_path,
    sha256_file,
    verify_model_file,
)

__all__ = ["ARCHIVE_SUFFIXES", "DamagedModel", "InstalledModel", "ModelStore", "VerifyResult", "default_root"]

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_STAGING = ".staging-"
_LOCK = ".lock"
_UNLOCKED_STALE_S = 3600.0
"""A staging directory without a lock file is taken for garbage after this long untouched."""
_DOWNLOADS = ".downloads"
"""Partial downloads live here between runs, so ``pull`` resumes them."""


def default_root() -> Path:
    """``$STATE_DIRECTORY/models`` under systemd (``StateDirectory=voiced``), else
    ``$XDG_DATA_HOME/voiced/models`` (default ``~/.local/share/voiced/models``)."""
    state = os.environ.get("STATE_DIRECTORY")
    if state:
        return Path(state.split(":")[0]) / "models"  # systemd lists several as a colon-separated list
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "voiced" / "models"


@dataclass(frozen=True)
class InstalledModel:
    """One model in the store, as its install record describes it."""

    name: str
    path: Path
    kind: str
    source: str
    installed: str
    files: dict[str, dict[str, Any]]
    catalog: str | None = None
    license: str | None = None

    @property
    def size(self) -> int:
        return sum(int(f.get("size", 0)) for f in self.files.values())


@dataclass(frozen=True)
class DamagedModel:
    """A directory in the store whose install record is missing or unusable: nothing in it can be verified."""

    name: str
    path: Path
    problem: str
    """One line naming the record and what is wrong with it."""


@dataclass
class VerifyResult:
    """What ``verify`` found for one model."""

    name: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class ModelStore:
    """Install, list, verify and remove models under ``root``."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root else default_root()

    # -- reading ----------------------------------------------------------------------

    def list(self) -> list[InstalledModel]:
        """Installed models by name; a damaged one (see :meth:`scan`) is skipped with a warning."""
        models = []
        for model in self.scan():
            if isinstance(model, DamagedModel):
                log.warning("%s", model.problem)
            else:
                models.append(model)
        return models

    def scan(self) -> list[InstalledModel | DamagedModel]:
        """Every model directory by name, those whose install record is missing or unusable included,
        so that ``list`` and ``verify`` show a damaged model instead of hiding it."""
        if not self._check_root():
            return []
        found: list[InstalledModel | DamagedModel] = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") or not path.is_dir():
                continue
            try:
                found.append(self._read(path))
            except ModelError as exc:
                found.append(DamagedModel(path.name, path, str(exc)))
        return found

    def get(self, name: str) -> InstalledModel:
        return self._read(self._model_dir(name))

    def _model_dir(self, name: str) -> Path:
        """``ROOT/NAME``, whether or not its install record is usable; not installed is an error."""
        path = self.root / _check_name(name)
        if not path.is_dir():
            installed = ", ".join(m.name for m in self.scan()) or "none"
            raise ModelError(f"model {name!r} is not installed in {self.root} (installed: {installed})")
        return path

    def _read(self, path: Path) -> InstalledModel:
        record = path / INSTALL_RECORD
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelError(f"{record}: missing or unreadable install record ({exc})") from None
        problem = _record_problem(data)
        if problem:
            raise ModelError(f"{record}: damaged install record ({problem})")
        return InstalledModel(
            name=path.name, path=path, kind=str(data.get("kind") or "other"), source=str(data.get("source") or ""),
            installed=str(data.get("installed") or ""), files=dict(data["files"]), catalog=data.get("catalog"),
            license=data.get("license"),
        )

    # -- verify ---------------------------------------------------------------------------

    def verify(self, name: str) -> VerifyResult:
        """Every recorded file against its sha256, and every quantization manifest inside.

        A model whose install record is missing or damaged fails, the record named as its problem.
        """
        path = self._model_dir(name)
        result = VerifyResult(name)
        try:
            model = self._read(path)
        except ModelError as exc:
            result.problems.append(str(exc))
            return result
        for rel, entry in sorted(model.files.items()):
            path = model.path / rel
            if not path.is_file():
                result.problems.append(f"{path}: missing")
                continue
            actual = sha256_file(path)
            result.checked += 1
            if actual != entry.get("sha256"):
                result.problems.append(f"{path}: sha256 {actual} does not match {entry.get('sha256')} recorded at install")
        for path in sorted(model.path.rglob("*.onnx")):
            if manifest_path(path).is_file():
                try:
                    verify_model_file(path, use_cache=False)
                except ModelError as exc:
                    if str(exc) not in " ".join(result.problems):
                        result.problems.append(str(exc))
        recorded = set(model.files) | {INSTALL_RECORD}
        extra = sorted(p.relative_to(model.path).as_posix() for p in model.path.rglob("*") if p.is_file())
        extra = [p for p in extra if p not in recorded]
        if extra:
            result.notes.append(f"files added after install (not verified): {', '.join(extra[:5])}"
                                + (" …" if len(extra) > 5 else ""))
        return result

    # -- install / remove -------------------------------------------------------------------

    def _check_root(self) -> bool:
        """True when the store exists; a file in its place is an error, not an empty store."""
        if self.root.exists() and not self.root.is_dir():
            raise ModelError(f"model store {self.root}: not a directory")
        return self.root.is_dir()

    def _make_root(self) -> None:
        """Create the store; a file in the way or an unwritable parent is one line naming the path."""
        if self._check_root():
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelError(f"cannot create the model store {self.root}: {exc.strerror or exc}") from None

    def install(self, source: str | Path, *, name: str | None = None, kind: ModelKind | None = None,
                force: bool = False) -> InstalledModel:
        """Install a directory or a tarball (e.g. from a USB stick) under ``name``.

        The name defaults to the directory's name, or the archive's single top folder (else
        its file name without the suffix).
        """
        source = Path(source)
        if not source.exists():
            raise ModelError(f"nothing to install at {source}: no such file or directory")
        with self._staging() as staging:
            if source.is_dir():
                _copy_dir(source, staging, self.root)
                default_name = source.resolve().name
            elif source.name.endswith(ARCHIVE_SUFFIXES):
                top = _unpack(source, staging)
                default_name = top or _strip_suffix(source.name)
            else:
                raise ModelError(f"{source}: not a directory or a tarball ({', '.join(ARCHIVE_SUFFIXES)})")
            return self._commit(staging, name or default_name, source=str(source.resolve()), kind=kind, force=force)

    def pull(self, entry: CatalogEntry, *, force: bool = False, insecure_skip_checksum: bool = False,
             options: DownloadOptions | None = None) -> InstalledModel:
        """Download a catalog entry (resumably), check its checksums, install it."""
        if not entry.pinned and not insecure_skip_checksum:
            missing = ", ".join(f.path for f in entry.files if not f.sha256)
            raise ModelError(
                f"{entry.name}: the catalog has no verified sha256 for {missing} ({entry.provenance}); refusing to"
                " install an unchecked download. Install it from a directory or tarball you trust with"
                " `voiced models install PATH`, or pass --insecure-skip-checksum"
            )
        if (self.root / entry.name).exists() and not force:
            raise ModelError(f"{entry.name} is already installed in {self.root}; use --force to replace it")
        self._make_root()
        cache = self.root / _DOWNLOADS / entry.name
        cache.mkdir(parents=True, exist_ok=True)
        seen: dict[str, str] = {}
        for f in entry.files:
            target = cache / Path(f.path).name
            if target.is_file() and f.sha256 and sha256_file(target) == f.sha256:
                seen[f.path] = f.sha256
                continue  # fetched by an earlier run that failed later
            seen[f.path] = download(f.url, target, sha256=f.sha256, size=f.size, options=options)
            if not f.sha256:
                log.warning("%s: no pinned checksum; recorded the downloaded file's sha256 %s", f.url, seen[f.path])
        with self._staging() as staging:
            staging.mkdir()
            for f in entry.files:
                src = cache / Path(f.path).name
                if f.archive:
                    _unpack(src, staging, merge=True)
                else:
                    (staging / f.path).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, staging / f.path)
            model = self._commit(staging, entry.name, source=", ".join(f.url for f in entry.files), kind=entry.kind,
                                 force=force, catalog=entry.name, license=entry.license,
                                 downloads={f.url: seen[f.path] for f in entry.files})
        shutil.rmtree(cache, ignore_errors=True)
        return model

    def remove(self, name: str) -> Path:
        """Delete an installed model's directory, a damaged one too; returns the path removed."""
        path = self._model_dir(name)  # not get(): removing is how a model with a damaged record is replaced
        with self._staging() as trash:
            # The name disappears at once, even if the delete is slow; a delete cut short
            # leaves a staging directory, which the next install or remove deletes.
            os.replace(path, trash)
        return path

    def leftovers(self) -> list[Path]:
        """Staging directories left by an install or remove that was killed (see :func:`_is_stale`)."""
        if not self._check_root():
            return []
        return [p for p in sorted(self.root.glob(_STAGING + "*")) if p.is_dir() and _is_stale(p)]

    @contextmanager
    def _staging(self) -> Iterator[Path]:
        """``ROOT/.staging-*/model`` (not created) for one install or remove, deleted afterwards.

        The staging directory holds an flock on its ``.lock`` while this process uses it, so
        that a later store operation can tell it from one a killed process left behind; those
        are deleted here first.
        """
        self._make_root()
        for path in self.leftovers():
            log.info("%s: removing what an interrupted install or remove left", path)
            _remove_tree(path)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=_STAGING, dir=self.root))
            lock = open(tmp / _LOCK, "w")  # noqa: SIM115 (held until the directory is gone)
        except OSError as exc:
            raise ModelError(f"cannot write in the model store {self.root}: {exc.strerror or exc}") from None
        with lock:
            try:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                except OSError as exc:  # a file system without locks: never judged stale, so never taken
                    log.debug("%s: no lock (%s)", tmp, exc)
                yield tmp / "model"
            finally:
                _remove_tree(tmp)  # still locked: no other process can take it for a leftover meanwhile

    def _commit(self, staging: Path, name: str, *, source: str, kind: ModelKind | None, force: bool,
                catalog: str | None = None, license: str | None = None, downloads: dict[str, str] | None = None,
                ) -> InstalledModel:
        name = _check_name(name)
        files = {}
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            rel = path.relative_to(staging).as_posix()
            if rel == INSTALL_RECORD:
                continue  # a model copied out of another store gets a fresh record
            files[rel] = {"sha256": sha256_file(path), "size": path.stat().st_size}
        if not files:
            raise ModelError(f"{source}: no files to install")
        for path in sorted(staging.rglob("*.onnx")):
            if manifest_path(path).is_file():
                verify_model_file(path, use_cache=False)  # a corrupt quantized file is refused here
        record = {
            "name": name,
            "kind": (kind or _guess_kind(files, staging)).value,
            "source": source,
            "installed": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "catalog": catalog,
            "license": license,
            "downloads": downloads or {},
            "files": files,
        }
        (staging / INSTALL_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        target = self.root / name
        if target.exists():
            if not force:
                raise ModelError(f"{name} is already installed in {self.root}; use --force to replace it")
            os.replace(target, staging.parent / "replaced")  # deleted with the staging directory
            os.replace(staging, target)
        else:
            os.replace(staging, target)
        log.info("installed %s (%d files) in %s", name, len(files), target)
        return self._read(target)


def _record_problem(data: Any) -> str | None:
    """What makes a parsed install record unusable, else None.

    Every field list and verify read is checked for its type here, so a hand-edited or
    truncated record is one line naming it rather than an AttributeError in whatever uses it.
    """
    if not isinstance(data, dict):
        return "not a JSON object"
    files = data.get("files")
    if not isinstance(files, dict):
        return '"files" is missing or not an object'
    for rel, entry in files.items():
        size = entry.get("size", 0) if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or type(size) is not int:
            return f'"files" entry {rel!r} is not {{"sha256": "HEX", "size": BYTES}}'
        if not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f'"files" entry {rel!r} is not a path inside the model directory'
    for key in ("kind", "source", "installed", "catalog", "license"):
        if data.get(key) is not None and not isinstance(data[key], str):
            return f'"{key}" is not a string'
    return None


def _is_stale(staging: Path) -> bool:
    """True when no live process uses this staging directory.

    Its owner holds an flock on ``.lock``, which the kernel drops when the process dies,
    however it dies (SIGKILL, OOM, power cut). So a lock this process can take is garbage,
    and a held one is an install running right now, even in another PID namespace, where
    checking a pid would misjudge it (and a recycled pid cannot keep garbage alive). A
    directory without ``.lock`` is one being created this instant or left by a voiced from
    before the lock: it counts as stale once untouched for ``_UNLOCKED_STALE_S``.
    """
    try:
        fd = os.open(staging / _LOCK, os.O_RDONLY)
    except FileNotFoundError:
        try:
            return time.time() - staging.stat().st_mtime > _UNLOCKED_STALE_S
        except OSError:
            return False  # gone meanwhile
    except OSError:
        return False  # unreadable: not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False  # held: a live install or remove
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass  # another process cleaning up the same leftover got there first
    except OSError as exc:
        log.warning("%s: could not delete it (%s); the next install or remove tries again", path, exc)


def _is_voice_config(path: Path) -> bool:
    """A Piper voice's ``VOICE.onnx.json``, not a voiced-quantize manifest ``MODEL.int8.onnx.json``.

    Both end in ``.onnx.json``, so a quantized Silero directory looked like a voice; they are
    told apart by content, as :mod:`voiced.models.manifest` does: a manifest has ``format``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "format" not in data


def _check_name(name: str) -> str:
    if not _NAME.match(name or "") or name in (".", ".."):
        raise ConfigError("name", f"{name!r} is not a valid model name (letters, digits, '.', '_', '+', '-')")
    return name


def _strip_suffix(filename: str) -> str:
    for suffix in ARCHIVE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return filename


def _copy_dir(source: Path, dest: Path, store: Path) -> None:
    """Copy a model directory (links followed) into ``dest``; whatever stops the copy is one line."""
    _check_source(source, store)
    try:
        shutil.copytree(source, dest, symlinks=False)
    except shutil.Error as exc:  # copytree gathers (src, dst, why) for every file it could not copy
        errors = exc.args[0] if exc.args and isinstance(exc.args[0], list) else [(source, dest, exc)]
        raise ModelError(f"{errors[0][0]}: cannot copy into the store ({errors[0][2]})") from None
    except OSError as exc:
        raise ModelError(f"{source}: cannot copy into the store ({exc})") from None
    _writable_modes(dest)


def _writable_modes(tree: Path) -> None:
    """Give a copied tree the modes an unpacked tarball gets (tarfile's ``data`` filter).

    copytree keeps each mode, so a read-only source (a USB stick, /usr/share) made a store
    copy whose directories are r-x: a non-root install could not write its install record
    into it, and nobody but root could remove or replace it later.
    """
    for path in (tree, *tree.rglob("*")):
        owner = stat.S_IRWXU if path.is_dir() else stat.S_IRUSR | stat.S_IWUSR
        unsafe = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH
        path.chmod((stat.S_IMODE(path.stat().st_mode) | owner) & ~unsafe)


def _check_source(source: Path, store: Path) -> None:
    """Refuse, before a byte is copied, a source copytree would never finish or fail halfway in.

    A source holding the store would be copied into its own staging directory, copy after
    copy, until the path grows too long; a source inside the store is an installed model (or
    a staging directory) that installs and clean-ups may change while it is read.
    """
    real, store = source.resolve(), store.resolve()
    if store in real.parents:
        raise ModelError(f"{source}: is inside the model store {store}; install from a copy outside it")
    try:
        st = real.stat()
        _check_tree(source, store, ((st.st_dev, st.st_ino),))
    except OSError as exc:
        raise ModelError(f"{source}: cannot read ({exc})") from None


def _check_tree(directory: Path, store: Path, chain: tuple[tuple[int, int], ...]) -> None:
    """Check ``directory`` and below; ``chain`` holds (device, inode) of each directory above,
    so a link back up (which copytree would follow forever) is caught."""
    real = directory.resolve()
    if real == store or real in store.parents:
        raise ModelError(f"{directory}: contains the model store {store}; install from a directory outside it")
    for child in sorted(directory.iterdir()):
        if child.is_symlink():
            try:
                child.stat()
            except OSError as exc:
                raise ModelError(f"{child}: dangling symbolic link to {os.readlink(child)} ({exc.strerror});"
                                 " remove it or put its target in place") from None
        if not child.is_dir():
            continue
        st = child.stat()
        if (st.st_dev, st.st_ino) in chain:
            raise ModelError(f"{child}: symbolic link loop (back to {child.resolve()})")
        _check_tree(child, store, (*chain, (st.st_dev, st.st_ino)))


def _unpack(archive: Path, dest: Path, merge: bool = False) -> str | None:
    """Unpack safely into ``dest`` (merged with what is there when ``merge``); a single top-level
    folder is stripped. Returns that folder's name."""
    with tempfile.TemporaryDirectory(prefix=".unpack-", dir=dest.parent) as tmp:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")  # refuses absolute paths, '..', links out, devices
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ModelError(f"{archive}: cannot unpack ({exc})") from None
        entries = list(Path(tmp).iterdir())
        if not entries:
            raise ModelError(f"{archive}: the archive is empty")
        top = entries[0].name if len(entries) == 1 and entries[0].is_dir() else None
        children = list(entries[0].iterdir()) if top else entries
        dest.mkdir(parents=True, exist_ok=True)
        for child in children:
            target = dest / child.name
            if merge and target.is_dir() and child.is_dir():
                shutil.copytree(child, target, dirs_exist_ok=True)
            else:
                shutil.move(str(child), str(target))
        return top


def _guess_kind(files: dict[str, Any], root: Path) -> ModelKind:
    names = " ".join(files).lower()
    if "encoder" in names and "tokens.txt" in names:
        return ModelKind.ASR
    if any(_is_voice_config(root / rel) for rel in files if rel.lower().endswith(".onnx.json")):
        return ModelKind.TTS
    if "silero" in names or "vad" in names:
        return ModelKind.VAD
    if "melspectrogram" in names or "wakeword" in names:
        return ModelKind.WAKEWORD
    return ModelKind.OTHER

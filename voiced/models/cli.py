"""``voiced models list | catalog | install PATH | verify [NAME…] | remove NAME | pull NAME``.

Wire into voiced's CLI with ``add_parser(subparsers)``; each subcommand's ``func`` takes
the parsed arguments and returns the exit status. ``python -m voiced.models`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from voiced.errors import ConfigError, VoicedError

__all__ = ["add_parser", "main"]

EXIT_OK, EXIT_ERROR = 0, 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``models`` to an ``argparse`` subparsers object (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("models", help="install, verify and fetch models",
                              description="The model store: $STATE_DIRECTORY/models under systemd, else"
                              " $XDG_DATA_HOME/voiced/models.")
    _fill(p)
    return p


def _fill(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, metavar="DIR", help="store directory (default: see above)")
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    s = sub.add_parser("list", help="installed models")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_list)
    s = sub.add_parser("catalog", help="models `pull` knows, with their checksum status")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_catalog)
    s = sub.add_parser("install", help="install a directory or .tar.gz/.tar.bz2/.tar.xz (e.g. from a USB stick)")
    s.add_argument("path", type=Path, metavar="PATH")
    s.add_argument("--name", help="name in the store (default: the directory's or archive's top folder's)")
    s.add_argument("--force", action="store_true", help="replace an installed model of the same name")
    s.set_defaults(func=cmd_install)
    s = sub.add_parser("verify", help="check every file against the sha256 recorded at install")
    s.add_argument("names", nargs="*", metavar="NAME", help="default: every installed model")
    s.set_defaults(func=cmd_verify)
    s = sub.add_parser("remove", help="delete an installed model")
    s.add_argument("name", metavar="NAME")
    s.set_defaults(func=cmd_remove)
    s = sub.add_parser("pull", help="download a catalog model (resumable, checksummed) and install it")
    s.add_argument("name", metavar="NAME")
    s.add_argument("--force", action="store_true", help="replace an installed model of the same name")
    s.add_argument("--insecure-skip-checksum", action="store_true",
                   help="install even when the catalog has no verified sha256 for a file (the sha256 seen is recorded)")
    s.add_argument("--retries", type=int, default=3, metavar="N", help="resume attempts per file (default: %(default)s)")
    s.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds without data (default: %(default)s)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    s.set_defaults(func=cmd_pull)


def _store(args: argparse.Namespace):
    from voiced.models.store import ModelStore

    if args.store is not None and args.store.exists() and not args.store.is_dir():
        # named as typed, before any subcommand mistakes the file for an empty store
        raise ConfigError("--store", f"{args.store} is not a directory")
    return ModelStore(args.store)


def cmd_list(args: argparse.Namespace) -> int:
    from voiced.models.store import DamagedModel

    store = _store(args)
    models = store.scan()  # a model with a damaged install record is listed as such, not hidden
    _note_leftovers(store)
    if args.json:
        print(json.dumps([_list_entry(m) for m in models], indent=2))
        return EXIT_OK
    if not models:
        print(f"no models installed in {store.root}")
        return EXIT_OK
    width = max(len(m.name) for m in models)
    for m in models:
        if isinstance(m, DamagedModel):
            print(f"{m.name:{width}}  {'DAMAGED':8}  {m.problem}; `voiced models remove {m.name}` and install it again")
        else:
            print(f"{m.name:{width}}  {m.kind:8}  {m.size / 1e6:8.1f} MB  {len(m.files):3d} files  {m.source}")
    return EXIT_OK


def _note_leftovers(store: Any) -> None:
    """Name what killed installs left in the store (on stderr: list --json stays parseable); list and
    verify only look, the next install or remove deletes it."""
    for path in store.leftovers():
        size = 0
        for f in path.rglob("*"):
            try:
                size += f.stat().st_size if f.is_file() else 0
            except OSError:
                pass  # deleted meanwhile by an install in another process
        print(f"voiced models: note: {path} was left by an interrupted install or remove ({size / 1e6:.1f} MB);"
              " the next install or remove deletes it", file=sys.stderr)


def _list_entry(m: Any) -> dict[str, Any]:
    """One model for ``list --json``; a damaged one has the same keys, null where the record is unknown."""
    from voiced.models.store import DamagedModel

    if isinstance(m, DamagedModel):
        return {"name": m.name, "kind": None, "path": str(m.path), "size": None, "files": None, "source": None,
                "installed": None, "catalog": None, "damaged": m.problem}
    return {"name": m.name, "kind": m.kind, "path": str(m.path), "size": m.size, "files": len(m.files),
            "source": m.source, "installed": m.installed, "catalog": m.catalog, "damaged": None}


def cmd_catalog(args: argparse.Namespace) -> int:
    from voiced.models.catalog import CATALOG

    if args.json:
        print(json.dumps([{"name": e.name, "kind": e.kind.value, "pinned": e.pinned, "license": e.license,
                           "provenance": e.provenance, "files": [{"url": f.url, "sha256": f.sha256} for f in e.files]}
                          for e in CATALOG], indent=2))
        return EXIT_OK
    width = max(len(e.name) for e in CATALOG)
    for e in CATALOG:
        status = "sha256 pinned" if e.pinned else "NO CHECKSUM (needs --insecure-skip-checksum)"
        print(f"{e.name:{width}}  {e.kind.value:8}  {status}\n{'':{width}}  {e.description}; licence: {e.license}")
    return EXIT_OK


def cmd_install(args: argparse.Namespace) -> int:
    model = _store(args).install(args.path, name=args.name, force=args.force)
    print(f"installed {model.name}: {len(model.files)} files, {model.size / 1e6:.1f} MB in {model.path}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    store = _store(args)
    names = args.names or [m.name for m in store.scan()]  # the damaged too: they fail
    _note_leftovers(store)
    if not names:
        print(f"no models installed in {store.root}")
        return EXIT_OK
    failed = 0
    for name in names:
        result = store.verify(name)
        if result.ok:
            print(f"{name}: OK ({result.checked} files)")
        else:
            failed += 1
            print(f"{name}: FAILED")
            for problem in result.problems:
                print(f"  {problem}")
        for note in result.notes:
            print(f"  note: {note}")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    path = _store(args).remove(args.name)
    print(f"removed {args.name} ({path})")
    return EXIT_OK


def cmd_pull(args: argparse.Namespace) -> int:
    from voiced.models.catalog import find_entry
    from voiced.models.download import DownloadOptions

    entry = find_entry(args.name)
    print(f"{entry.name}: {entry.description}; licence: {entry.license}", file=sys.stderr)
    options = DownloadOptions(timeout=args.timeout, retries=args.retries, progress=not args.no_progress)
    model = _store(args).pull(entry, force=args.force, insecure_skip_checksum=args.insecure_skip_checksum, options=options)
    print(f"installed {model.name}: {len(model.files)} files, {model.size / 1e6:.1f} MB in {model.path}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voiced models", description="The voiced model store.")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    _fill(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if not args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except VoicedError as exc:
        print(f"voiced models: {exc}", file=sys.stderr)
        return EXIT_ERROR

"""Writing ``MODEL.int8.onnx.json`` beside each output (the format lives in voiced.models.manifest,
which the daemon uses to verify the file at load)."""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from voiced import __version__ as voiced_version
from voiced.models.manifest import Manifest, manifest_path, sha256_file

__all__ = ["partial", "publish", "removed_on_failure", "tool_versions", "write_manifest"]


def tool_versions() -> dict[str, str]:
    import numpy
    import onnx
    import onnxruntime

    return {
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "numpy": numpy.__version__,
        "voiced": voiced_version,
        "python": platform.python_version(),
    }


def write_manifest(output: Path, source: Path, quantization: dict[str, Any], validation: dict[str, Any]) -> Path:
    """Hash source and output, write the manifest beside ``output``, return its path."""
    manifest = Manifest(
        model=output.name,
        sha256=sha256_file(output),
        size=output.stat().st_size,
        source={"file": source.name, "sha256": sha256_file(source), "size": source.stat().st_size},
        quantization=quantization,
        versions=tool_versions(),
        validation=validation,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    path = manifest_path(output)
    manifest.write(path)
    return path


def partial(final: Path) -> Path:
    """Where an output is written and validated before it takes ``final``'s place: a file the model
    finders never pick (``.NAME.partial``), so a run stopped half-way leaves no INT8 model to load."""
    return final.with_name(f".{final.name}.partial")


@contextlib.contextmanager
def removed_on_failure(paths: Iterable[Path]) -> Iterator[None]:
    """Remove ``paths`` (partial outputs) if the block does not finish: an error, Ctrl-C, SIGTERM."""
    try:
        yield
    except BaseException:
        for path in paths:
            path.unlink(missing_ok=True)
        raise


def publish(written: Path, final: Path, source: Path, quantization: dict[str, Any],
            validation: dict[str, Any]) -> Path:
    """The validated ``written`` file becomes ``final``, and its manifest is written; returns the
    manifest's path. The old manifest goes first: it vouches for the file being replaced."""
    manifest_path(final).unlink(missing_ok=True)
    os.replace(written, final)
    return write_manifest(final, source, quantization, validation)

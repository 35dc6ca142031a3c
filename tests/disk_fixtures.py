"""A small tmpfs of a test's own, to fill or remount read-only: what an SD card does to a device."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from voiced.bench.smalldisk import fill, mount_small


class SmallDisk:
    """A 4 MB tmpfs of the test's own, and ballast that fills what is left of it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ballast = path / "ballast"

    def fill(self) -> None:
        fill(self.path, chunk=4096)  # to the last page: SQLite must find no room at all

    def free(self) -> None:
        self._ballast.unlink()

    def read_only(self, on: bool = True) -> None:
        """Remount read-only, as the kernel does with an SD card that reports errors (or back)."""
        subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.path)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A small tmpfs mounted for one test (root only: CI runs as root); skipped where mounting is refused."""
    mount = tmp_path / "small"
    if not mount_small(mount, "4m"):
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    try:
        yield SmallDisk(mount)
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], capture_output=True)

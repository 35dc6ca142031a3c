"""A small tmpfs to fill: how the chaos benchmark and the tests give the outbox a full disk."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["fill", "mount_small"]


def mount_small(path: Path, size: str = "8m") -> bool:
    """Mount a tmpfs of ``size`` on ``path`` (made if missing); False where mounting is refused (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def fill(path: Path, chunk: int = 65536) -> Path:
    """Write ``path``/ballast until the disk refuses (at most ``chunk`` bytes are left); the ballast's path."""
    ballast = path / "ballast"
    with open(ballast, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * chunk)
        except OSError:
            pass  # ENOSPC: full
    return ballast

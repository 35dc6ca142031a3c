"""What a ``voiced doctor`` check finds, and where the doctor looks."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from voiced.errors import ConfigError
from voiced.runtime.affinity import CPUFREQ_ROOT
from voiced.runtime.hardware import DEVICE_TREE_MODEL_PATHS

__all__ = ["Check", "CheckStatus", "DoctorOptions"]


class CheckStatus(StrEnum):
    """How a check came out; any FAIL makes the exit code 1."""

    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Check:
    """One finding."""

    name: str
    status: CheckStatus
    message: str
    fix: str | None = None

    def lines(self) -> list[str]:
        out = [f"[{self.status.value:^4}] {self.name}: {self.message}"]
        if self.fix:
            out.append(f"       fix: {self.fix}")
        return out


@dataclass(frozen=True)
class DoctorOptions:
    """Where the doctor looks (tests point these at fakes)."""

    profile: str | None = None
    """Hardware profile name or path; ``auto`` detects the board; None: the config's ``[hardware] profile``
    (the one the daemon uses), else ``auto``."""
    cpufreq_root: Path = CPUFREQ_ROOT
    """Where ``cpu*/cpufreq/scaling_governor`` are."""
    device_tree: tuple[Path, ...] = DEVICE_TREE_MODEL_PATHS
    """Where the board's model string is."""
    broker_timeout_s: float = 2.0
    """How long a TCP connect to the broker may take."""
    load_models: bool = True
    """Open each model in ONNX Runtime (catches truncated files; takes a few seconds on a Pi)."""

    def __post_init__(self) -> None:
        if self.broker_timeout_s <= 0:
            raise ConfigError("broker_timeout_s", f"must be > 0, got {self.broker_timeout_s}")

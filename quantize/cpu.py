"""Which family of ONNX Runtime integer kernels this CPU gets, read from its features.

ONNX Runtime's CPU kernels (MLAS) pick the u8×s8 dot product by CPU feature:

- x86 with VNNI (AVX-VNNI, AVX512-VNNI): VPDPBUSD sums four products straight into int32: exact.
- x86 with AVX2 or AVX512BW but no VNNI: VPMADDUBSW adds *pairs* of u8×s8 products into int16,
  which saturates once both operands are large (255·127·2 > 32767): ORT's documented caveat.
- x86 with only SSE, ARM64 (NEON, UDOT/SDOT), others: products widened before adding: exact.

Users usually quantize on the device that runs the model, so the quantizer's ``auto`` weight
format asks this module about the CPU it runs on.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = ["CpuInfo", "IntegerKernels", "detect_cpu", "kernels_for"]

X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
ARM_MACHINES = frozenset({"aarch64", "arm64", "armv7l", "armv8l", "armv6l"})


class IntegerKernels(StrEnum):
    """How the CPU's u8×s8 integer kernels accumulate."""

    EXACT = "exact"
    """Products accumulate in 32 bits (VNNI, ARM, SSE-only x86): signed 8-bit weights are exact."""
    SATURATING = "saturating"
    """x86 AVX2/AVX512BW without VNNI: pairs of u8×s8 products are added in int16 and can saturate."""
    UNKNOWN_X86 = "unknown-x86"
    """x86 whose features could not be read (no /proc/cpuinfo): it may be either of the above."""


@dataclass(frozen=True)
class CpuInfo:
    """The machine and the features that decide its integer kernels."""

    machine: str
    """``platform.machine()``, lower case (x86_64, aarch64 …)."""
    model: str
    """The CPU's model name where the OS says it, else empty."""
    flags: frozenset[str]
    """The x86 feature flags that matter here (avx2, avx512bw, avx512_vnni, avx_vnni …); empty elsewhere."""
    flags_known: bool
    """Whether the flags were read (Linux /proc/cpuinfo) or are unknown."""

    @property
    def kernels(self) -> IntegerKernels:
        return kernels_for(self)

    def describe(self) -> str:
        """e.g. ``AMD EPYC (x86_64, avx2, no VNNI)``."""
        if self.machine not in X86_MACHINES:
            features = self.machine
        elif not self.flags_known:
            features = f"{self.machine}, features unknown"
        else:
            vnni = sorted(f for f in self.flags if "vnni" in f)
            simd = [f for f in ("avx512bw", "avx2") if f in self.flags][:1] or ["no AVX2"]
            features = ", ".join([self.machine, *simd, *(vnni or ["no VNNI"])])
        return f"{self.model} ({features})" if self.model else features


def kernels_for(cpu: CpuInfo) -> IntegerKernels:
    """The kernel family ``cpu`` gets (see the module docstring)."""
    if cpu.machine not in X86_MACHINES:
        return IntegerKernels.EXACT
    if not cpu.flags_known:
        return IntegerKernels.UNKNOWN_X86
    if any("vnni" in f for f in cpu.flags):
        return IntegerKernels.EXACT
    if {"avx2", "avx512bw"} & cpu.flags:
        return IntegerKernels.SATURATING
    return IntegerKernels.EXACT


@functools.cache
def detect_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """This machine's CPU (Linux: from ``cpuinfo``; elsewhere x86 flags are unknown)."""
    machine = platform.machine().lower()
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return CpuInfo(machine, platform.processor(), frozenset(), flags_known=False)
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor is enough: cores of one machine share features
            continue
        fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("hardware") or fields.get("cpu model", "")
    flags = fields.get("flags")
    if flags is None:
        return CpuInfo(machine, model, frozenset(), flags_known=machine not in X86_MACHINES)
    wanted = {f for f in flags.split() if f in ("avx2", "avx512bw") or "vnni" in f}
    return CpuInfo(machine, model, frozenset(wanted), flags_known=True)

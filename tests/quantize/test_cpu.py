"""quantize.cpu: reading the CPU's features and naming its integer kernels."""

from __future__ import annotations

import platform

import pytest

from quantize.cpu import X86_MACHINES, CpuInfo, IntegerKernels, detect_cpu, kernels_for
from tests.support import int8_kernels_saturate

EPYC_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx sse4a avx2 bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx sse4a avx2 bmi2
"""


@pytest.mark.parametrize(("machine", "flags", "known", "expected"), [
    ("x86_64", {"avx2"}, True, IntegerKernels.SATURATING),
    ("x86_64", {"avx2", "avx512bw"}, True, IntegerKernels.SATURATING),  # Skylake-SP: AVX512 without VNNI
    ("x86_64", {"avx2", "avx512bw", "avx512_vnni"}, True, IntegerKernels.EXACT),
    ("x86_64", {"avx2", "avx_vnni"}, True, IntegerKernels.EXACT),  # Alder Lake and later
    ("x86_64", set(), True, IntegerKernels.EXACT),  # SSE only: products widened to int16, then pmaddwd
    ("x86_64", set(), False, IntegerKernels.UNKNOWN_X86),
    ("aarch64", set(), True, IntegerKernels.EXACT),
    ("arm64", set(), False, IntegerKernels.EXACT),
])
def test_kernels_by_machine_and_flags(machine, flags, known, expected) -> None:
    assert kernels_for(CpuInfo(machine, "", frozenset(flags), known)) is expected


def test_reads_the_first_processor_of_cpuinfo(tmp_path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(EPYC_CPUINFO)
    cpu = detect_cpu(path)
    assert cpu.model == "AMD EPYC"
    if platform.machine().lower() in X86_MACHINES:
        assert cpu.flags == {"avx2"} and cpu.kernels is IntegerKernels.SATURATING
        assert cpu.describe() == "AMD EPYC (x86_64, avx2, no VNNI)"
    missing = detect_cpu(tmp_path / "absent")
    assert missing.flags == frozenset() and not missing.flags_known


def test_this_machine_agrees_with_the_tests_own_probe() -> None:
    assert (detect_cpu().kernels is IntegerKernels.SATURATING) is int8_kernels_saturate()

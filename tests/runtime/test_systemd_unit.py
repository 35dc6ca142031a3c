"""The shipped units: ``systemd-analyze verify`` clean, ``security --offline`` exposure ≤ 2.5,
the directives the daemon relies on, and onnxruntime under MemoryDenyWriteExecute.

``verify`` checks that ExecStart's binary exists: the shipped unit starts voiced through
``/usr/bin/env``, so it verifies as shipped, with or without voiced installed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "voiced.service"
CPU_UNIT = REPO / "systemd" / "voiced-cpu-performance.service"
EXEC_START = "/usr/bin/env voiced run --config /etc/voiced/voiced.toml"
MAX_EXPOSURE = 2.5

ANALYZE = shutil.which("systemd-analyze") or next(
    (p for p in ("/usr/bin/systemd-analyze", "/bin/systemd-analyze") if os.access(p, os.X_OK)), None)
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (apt-get install systemd)")


def directives(path: Path) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit, values of repeated keys in order (comments skipped)."""
    found: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, *args], capture_output=True, text=True, timeout=120, check=False)


def test_service_directives() -> None:
    d = directives(UNIT)
    one = {k: v[-1] for k, v in d.items()}
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["ExecStart"] == EXEC_START
    assert one["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert one["WatchdogSec"] and one["Restart"] == "on-failure"
    assert one["StartLimitIntervalSec"] and one["StartLimitBurst"] and one["TimeoutStopSec"]
    assert one["DynamicUser"] == "yes" and one["SupplementaryGroups"] == "audio"
    assert one["StateDirectory"] == "voiced" and one["ConfigurationDirectory"] == "voiced"
    # held messages survive a restart of the service, not a reboot
    assert one["RuntimeDirectory"] == "voiced" and one["RuntimeDirectoryPreserve"] == "restart"
    assert one["DevicePolicy"] == "closed" and d["DeviceAllow"] == ["char-alsa rw"]
    assert "PrivateDevices" not in d  # it would hide /dev/snd
    assert set(one["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert one["NoNewPrivileges"] == "yes" and one["CapabilityBoundingSet"] == ""
    assert one["MemoryDenyWriteExecute"] == "yes" and one["ProtectSystem"] == "strict"
    assert {c.split(":")[0] for c in d["LoadCredential"]} == {"mqtt-password", "cloud-token"}
    # Credential sources are names (searched in /etc/credstore), so a missing one is not fatal.
    assert all(not c.split(":")[1].startswith("/") for c in d["LoadCredential"])
    filters = d["SystemCallFilter"]
    assert filters[0] == "@system-service" and filters[1].startswith("~")
    assert "@resources" in filters[1] and "@privileged" in filters[1]
    assert "sched_setaffinity" in filters[2].split()  # stage pinning and ONNX thread affinities
    assert "IPAddressDeny" not in d  # the broker may be anywhere on the LAN


@needs_analyze
@pytest.mark.parametrize("unit", [UNIT, CPU_UNIT], ids=lambda u: u.name)
def test_verify_is_clean_as_shipped(unit: Path) -> None:
    proc = analyze("verify", str(unit))
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if unit.name in line]
    assert proc.returncode == 0, proc.stderr
    assert ours == []


def exposure(unit: Path) -> float:
    proc = analyze("security", "--offline=yes", str(unit))
    if "offline" in proc.stderr and proc.returncode != 0:
        pytest.skip(f"systemd-analyze has no --offline (systemd < 250): {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert match, proc.stdout
    return float(match.group(1))


@needs_analyze
def test_service_exposure() -> None:
    score = exposure(UNIT)
    print(f"voiced.service exposure {score}")
    assert score <= MAX_EXPOSURE


@needs_analyze
def test_cpu_performance_unit_exposure() -> None:
    assert exposure(CPU_UNIT) <= MAX_EXPOSURE


def test_cpu_performance_unit_sets_and_restores(tmp_path: Path) -> None:
    """The unit's two shell lines, run against a fake sysfs ($$ is systemd's escape for $)."""
    d = {k: v[-1] for k, v in directives(CPU_UNIT).items()}
    sysfs = tmp_path / "cpu"
    for cpu, gov in ((0, "ondemand"), (1, "powersave")):
        (sysfs / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (sysfs / f"cpu{cpu}" / "cpufreq" / "scaling_governor").write_text(gov + "\n")
    runtime = tmp_path / "run"
    runtime.mkdir()

    def run(command: str) -> None:
        command = command.replace("$$", "$").replace("/sys/devices/system/cpu", str(sysfs))
        argv = command.split(" ", 2)
        assert argv[:2] == ["/bin/sh", "-c"]
        subprocess.run(["/bin/sh", "-c", argv[2].strip("'")], check=True, env={"RUNTIME_DIRECTORY": str(runtime)})

    def governors() -> list[str]:
        return [(sysfs / f"cpu{c}" / "cpufreq" / "scaling_governor").read_text().strip() for c in (0, 1)]

    run(d["ExecStart"])
    assert governors() == ["performance", "performance"]
    run(d["ExecStop"])
    assert governors() == ["ondemand", "powersave"]


# -- MemoryDenyWriteExecute --------------------------------------------------------------------


MDWE_PROBE = """
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit(3)
try:  # proof the restriction is on
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    sys.exit(4)
except OSError:
    pass
import numpy as np
from voiced.runtime.onnx import SessionOptions, create_session
session = create_session(sys.argv[1], SessionOptions(threads=2))
a = np.arange(64, dtype=np.uint8).reshape(1, 64)
(y,) = session.run(None, {"a": a})
print(int(y.sum()))
"""


def int8_model(path: Path) -> Path:
    """MatMulInteger (uint8 × int8 → int32): the quantized kernels voiced's INT8 models use."""
    b = (np.arange(64 * 16) % 7 - 3).astype(np.int8).reshape(64, 16)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "B"], ["y"])], "int8",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 16])],
        [onnx.numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_onnxruntime_runs_under_memory_deny_write_execute(tmp_path: Path) -> None:
    """PR_SET_MDWE (Linux ≥ 6.3) is the kernel's form of the unit's MemoryDenyWriteExecute=yes."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(ctypes.c_int(66), 0, 0, 0, 0) < 0:  # PR_GET_MDWE
        pytest.skip("kernel without PR_SET_MDWE (< 6.3): cannot emulate MemoryDenyWriteExecute")
    model = int8_model(tmp_path / "int8.onnx")
    proc = subprocess.run([sys.executable, "-c", MDWE_PROBE, str(model)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr}"
    b = (np.arange(64 * 16) % 7 - 3).astype(np.int64).reshape(64, 16)
    assert int(proc.stdout) == int((np.arange(64).reshape(1, 64) @ b).sum())

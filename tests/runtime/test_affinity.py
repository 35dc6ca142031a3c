"""Thread pinning read back from the kernel, SCHED_FIFO, governors, ONNX affinity strings."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.runtime.conftest import NotifySocket
from voiced.errors import ConfigError
from voiced.runtime.affinity import (
    available_cpus,
    check_governors,
    clamp_cpus,
    format_cpu_list,
    ort_thread_affinities,
    parse_cpu_list,
    pin_current_thread,
    read_governors,
    set_realtime,
    thread_cpus,
)
from voiced.runtime.hardware import Stage, known_profiles, load_profile
from voiced.runtime.notify import SystemdNotifier, WatchdogConfig
from voiced.runtime.supervisor import StageContext, Supervisor

REPO = Path(__file__).resolve().parents[2]


def kernel_cpus(tid: int) -> frozenset[int]:
    """Cpus_allowed_list of a thread, straight from /proc/<pid>/task/<tid>/status."""
    status = Path(f"/proc/{os.getpid()}/task/{tid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
    return parse_cpu_list(line.split(":", 1)[1])


def in_thread(fn):
    result = []
    t = threading.Thread(target=lambda: result.append(fn()))
    t.start()
    t.join()
    return result[0]


@pytest.mark.parametrize(("text", "cpus"), [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0-2,4,6-7", {0, 1, 2, 4, 6, 7}),
                                            (" 1 , 3 \n", {1, 3}), ("", set())])
def test_cpu_lists_round_trip(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "-1", "1-x"])
def test_bad_cpu_list(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_cpu_list(bad)


def test_clamp_drops_missing_cores_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.affinity"):
        assert clamp_cpus({0, 2, 3}, available={0, 1}, label="listen") == {0}
    assert "cores 2-3 for listen are not available here (have 0-1): using 0" in caplog.text


def test_clamp_with_nothing_left_uses_all_available(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.affinity"):
        assert clamp_cpus({6, 7}, available={0, 1}) == {0, 1}
    assert "not available" in caplog.text


def test_pin_current_thread_is_per_thread() -> None:
    target = min(available_cpus())
    main_before = kernel_cpus(threading.get_native_id())
    tid, applied = in_thread(lambda: (threading.get_native_id(), pin_current_thread({target})))
    assert applied == {target}
    assert thread_cpus() == main_before  # pid 0 = the calling thread: the main thread is untouched
    # The thread is gone now; pin one that stays alive and read it from outside.
    ready, done = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def worker() -> None:
        seen["tid"] = threading.get_native_id()
        pin_current_thread({target, 99})  # 99 does not exist here: clamped away
        ready.set()
        done.wait()

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert ready.wait(20)
        assert kernel_cpus(seen["tid"]) == {target}
        assert thread_cpus(seen["tid"]) == {target}
    finally:
        done.set()
        t.join()
    assert tid != threading.get_native_id()


def test_pin_none_leaves_the_thread_alone() -> None:
    assert in_thread(lambda: pin_current_thread(None)) == available_cpus()


@pytest.mark.parametrize("profile_name", known_profiles())
def test_stage_threads_run_on_the_profile_cores(profile_name: str, notify_socket: NotifySocket) -> None:
    """Each supervisor stage thread, as the kernel reports it, on its profile cores (clamped here)."""
    profile = load_profile(profile_name)
    sup = Supervisor(notifier=SystemdNotifier(), watchdog=WatchdogConfig())

    def stage(ctx: StageContext) -> None:
        while not ctx.stop.is_set():
            ctx.beat()
            ctx.wait(0.05)

    for name in Stage:
        sup.add_stage(name.value, stage, cpus=profile.cpus(name))
    sup.start()
    try:
        have = available_cpus()
        for info in sup.stages():
            wanted = profile.cpus(info.name)
            expected = have if wanted is None else (wanted & have or have)
            assert info.tid is not None
            assert kernel_cpus(info.tid) == expected, info.name
            assert info.cpus == expected
    finally:
        assert sup.stop(timeout=10)


# -- SCHED_FIFO --------------------------------------------------------------------------------


def test_realtime_priority_range() -> None:
    with pytest.raises(ConfigError, match="realtime_priority"):
        set_realtime(0)


def test_realtime_granted_with_privilege() -> None:
    def try_fifo() -> tuple[bool, int]:
        granted = set_realtime(1, label="probe")
        return granted, os.sched_getscheduler(0)

    if not in_thread(lambda: _can_fifo()):
        pytest.skip("this machine refuses SCHED_FIFO to this process (no CAP_SYS_NICE / RLIMIT_RTPRIO)")
    granted, policy = in_thread(try_fifo)
    assert granted and policy == os.SCHED_FIFO
    assert os.sched_getscheduler(0) != os.SCHED_FIFO  # only the probe thread changed


def _can_fifo() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        return False
    return True


PROBE = """
import logging, resource, threading
resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))  # what an unprivileged user has by default
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from voiced.runtime.affinity import set_realtime
result = []
t = threading.Thread(target=lambda: result.append(set_realtime(5, label="capture")))
t.start(); t.join()
print("granted" if result[0] else "refused")
"""


def test_realtime_refused_is_a_warning_and_normal_priority() -> None:
    cmd = [sys.executable, "-c", PROBE]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop CAP_SYS_NICE")
        cmd = [setpriv, "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice", *cmd]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "refused"
    assert "no realtime scheduling for capture" in proc.stderr
    assert "LimitRTPRIO" in proc.stderr


# -- ONNX Runtime affinity strings ---------------------------------------------------------------


@pytest.mark.parametrize(("cpus", "threads", "expected"), [
    ({2, 3}, 1, None),
    ({2, 3}, 2, "4"),          # caller on 2 (or 3); the extra thread on core 3, written 1-based
    ({1, 2, 3}, 3, "3;4"),
    ({0}, 3, "1;1"),           # one core: every extra thread shares it
    ({0, 1}, 4, "2;2;2"),
    (set(), 2, None),
])
def test_ort_thread_affinities(cpus: set[int], threads: int, expected: str | None) -> None:
    assert ort_thread_affinities(cpus, threads) == expected


# -- governor ----------------------------------------------------------------------------------


def fake_cpufreq(root: Path, governors: dict[int, str]) -> Path:
    for cpu, gov in governors.items():
        d = root / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
    (root / "cpufreq").mkdir()  # the policy directory sits beside cpuN: must not be read as a core
    return root


def test_powersave_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = fake_cpufreq(tmp_path, {0: "powersave", 1: "powersave", 2: "ondemand", 3: "performance"})
    assert read_governors(root) == {0: "powersave", 1: "powersave", 2: "ondemand", 3: "performance"}
    with caplog.at_level(logging.WARNING, logger="voiced.runtime.affinity"):
        report = check_governors(root)
    assert report.powersave == {0, 1}
    assert len(report.warnings) == 1 and "cores 0-1" in report.warnings[0]
    assert "voiced-cpu-performance.service" in caplog.text


def test_performance_and_no_cpufreq_are_quiet(tmp_path: Path) -> None:
    assert check_governors(fake_cpufreq(tmp_path / "a", {0: "performance", 1: "schedutil"})).warnings == ()
    assert check_governors(tmp_path / "missing").governors == {}

"""``voiced doctor``'s checks of the machine: sound devices and their rates, the CPU governor, and
that pinning threads to the hardware profile's cores (and SCHED_FIFO for capture) takes effect."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from voiced.audio.source import SourceKind, WavSource, parse_source
from voiced.doctor.report import Check, CheckStatus, DoctorOptions
from voiced.errors import ConfigError, VoicedError
from voiced.runtime.affinity import (
    GOVERNOR_FIX,
    available_cpus,
    check_governors,
    format_cpu_list,
    kept_cpus,
    pin_current_thread,
    set_realtime,
)
from voiced.runtime.hardware import GENERIC, HardwareProfile, Stage, detect_board, select_profile

__all__ = ["PROBE_RATES", "check_capture", "check_governor", "check_playback", "check_profile"]

PROBE_RATES = (16_000, 48_000, 44_100)
"""Rates reported as supported (besides the configured ones)."""


# -- audio -------------------------------------------------------------------------------------


def check_capture(audio: Any, where: str, profile_device: str = "default") -> list[Check]:
    """The capture source; a bare ``alsa`` is ``profile_device``, as in the daemon."""
    try:
        kind, rest = parse_source(audio.source)
    except ConfigError as exc:  # a config that loaded has a good one; kept for callers that build one
        return [Check("capture", CheckStatus.FAIL, str(exc), f"correct audio.source in {where}")]
    if kind is SourceKind.NONE:
        return [Check("capture", CheckStatus.WARN, "audio.source = 'none': nothing is listened to",
                      f"set audio.source = 'alsa:DEVICE' in {where}")]
    if kind is SourceKind.FILE:
        if not Path(rest or "").is_file():
            return [Check("capture", CheckStatus.FAIL, f"file {rest} does not exist", f"correct audio.source in {where}")]
        source = WavSource(rest or "", channel=audio.channel)
        try:  # as the daemon opens it: a WAV it can read, with the channel audio.channel picks
            source.open()
            heard = source.describe()
        except VoicedError as exc:
            return [Check("capture", CheckStatus.FAIL, str(exc), f"correct audio.source / audio.channel in {where}")]
        finally:
            source.close()
        return [Check("capture", CheckStatus.OK, heard)]
    rest = rest or profile_device
    rates = list(dict.fromkeys((audio.capture_rate, audio.fallback_rate, *PROBE_RATES)))
    return [_probe_pcm("capture", rest, rates, audio.channels, capture=True, where=where,
                       wanted=audio.capture_rate)]


def _probe_pcm(name: str, device: str, rates: Sequence[int], channels: int, *, capture: bool,
               where: str, wanted: int) -> Check:
    try:
        import alsaaudio
    except ImportError as exc:
        return Check(name, CheckStatus.FAIL, f"pyalsaaudio unavailable ({exc})",
                     "apt-get install libasound2-dev && pip install pyalsaaudio")
    from voiced.audio.alsalog import route_libasound_messages

    route_libasound_messages()  # the check says what failed; libasound's own lines would repeat it on stderr
    kind = alsaaudio.PCM_CAPTURE if capture else alsaaudio.PCM_PLAYBACK
    opened: list[int] = []
    errors: list[str] = []
    for rate in rates:
        try:
            # Non-blocking: a device another process holds fails with EBUSY instead of hanging.
            pcm = alsaaudio.PCM(type=kind, mode=alsaaudio.PCM_NONBLOCK, device=device, channels=channels,
                                rate=rate, format=alsaaudio.PCM_FORMAT_S16_LE, periodsize=max(1, rate // 100))
        except alsaaudio.ALSAAudioError as exc:
            errors.append(str(exc))
            continue
        try:
            if int(pcm.info().get("rate", rate)) == rate:
                opened.append(rate)
        finally:
            pcm.close()
    if not opened:
        known = ", ".join(alsaaudio.pcms(kind)) or "none"
        busy = any("busy" in e.lower() for e in errors)
        fix = ("another program holds it: stop it, or share the device with dsnoop/dmix "
               "(hardware/alsa/dsnoop-dmix.conf)" if busy else
               f"pick a device from `{'arecord' if capture else 'aplay'} -L` / `-l` (ALSA knows: {known}) "
               f"and set it in {where}")
        return Check(name, CheckStatus.FAIL, f"cannot open {device!r}: {errors[0] if errors else 'unknown error'}",
                     fix)
    rate_list = ", ".join(str(r) for r in sorted(opened))
    if wanted in opened:
        return Check(name, CheckStatus.OK, f"{device!r} opens at {wanted} Hz (supports {rate_list} Hz)")
    return Check(name, CheckStatus.WARN, f"{device!r} refuses {wanted} Hz; opens at {rate_list} Hz (resampled)",
                 "fine, resampling costs a little CPU; a plughw: device or hardware/alsa/usb-mic-48k.conf "
                 "does it in ALSA instead")


# -- CPU ---------------------------------------------------------------------------------------


def check_governor(root: Path) -> list[Check]:
    report = check_governors(root)
    if not report.governors:
        return [Check("governor", CheckStatus.OK, "no cpufreq here (VM or container): nothing to tune")]
    if report.powersave:
        return [Check("governor", CheckStatus.WARN,
                      f"'powersave' on cores {format_cpu_list(report.powersave)}: speech is recognized late",
                      GOVERNOR_FIX)]
    govs = ", ".join(sorted(set(report.governors.values())))
    return [Check("governor", CheckStatus.OK, f"{govs} on {len(report.governors)} core(s)")]


def _in_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a fresh thread (pinning and SCHED_FIFO must not touch the caller)."""
    result: list[Any] = []
    probe = threading.Thread(target=lambda: result.append(fn()), name="doctor-probe")
    probe.start()
    probe.join()
    if not result:
        raise RuntimeError("probe thread failed")
    return result[0]


def check_profile(options: DoctorOptions) -> tuple[list[Check], HardwareProfile | None]:
    try:
        profile = select_profile(options.profile, paths=options.device_tree)
    except ConfigError as exc:
        return [Check("hardware", CheckStatus.FAIL, str(exc), "pick one of the known profiles or fix the file")], None
    board = detect_board(options.device_tree) or "no device-tree model"
    checks = [Check("hardware", CheckStatus.OK, f"profile {profile.name} ({board})")]
    have = available_cpus()
    for stage in Stage:
        wanted = profile.cpus(stage)
        if wanted is None:
            continue
        expected = kept_cpus(wanted, have)
        # pinned to what it expects: the check says it, no log warning repeats it
        applied = _in_thread(functools.partial(pin_current_thread, expected, label=f"doctor {stage}"))
        if applied != expected:
            checks.append(Check(f"affinity {stage}", CheckStatus.FAIL,
                                f"asked for cores {format_cpu_list(expected)}, kernel reports {format_cpu_list(applied)}",
                                "sched_setaffinity is blocked or ignored (seccomp, container cpuset?): "
                                "allow it in SystemCallFilter= or run unpinned"))
        elif wanted - have and profile.name != GENERIC:  # the generic profile is meant to be clamped
            checks.append(Check(f"affinity {stage}", CheckStatus.WARN,
                                f"profile wants cores {format_cpu_list(wanted)}, this machine has "
                                f"{format_cpu_list(have)}: runs on {format_cpu_list(applied)}",
                                "use the profile for this board (--profile / hardware.profile)"))
        else:
            checks.append(Check(f"affinity {stage}", CheckStatus.OK, f"pinned to cores {format_cpu_list(applied)}"))
    if profile.realtime_priority:
        granted = _in_thread(lambda: set_realtime(profile.realtime_priority, label="doctor capture"))
        checks.append(Check("realtime", CheckStatus.OK if granted else CheckStatus.WARN,
                            f"SCHED_FIFO {profile.realtime_priority} for capture "
                            + ("granted" if granted else "refused: capture runs at normal priority"),
                            None if granted else "run as systemd/voiced.service (LimitRTPRIO=10) "
                            "or grant CAP_SYS_NICE"))
    return checks, profile


def check_playback(device: str) -> Check:
    check = _probe_pcm("playback", device, [22_050, 16_000, 48_000], 1, capture=False, where="the config",
                       wanted=22_050)  # Piper voices speak at 22.05 kHz
    if check.status is CheckStatus.FAIL:
        return Check(check.name, CheckStatus.WARN, check.message, check.fix)  # only speech output needs it
    return Check(check.name, CheckStatus.OK, check.message)  # other rates are resampled

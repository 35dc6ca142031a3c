"""``voiced doctor``: check the things a daemon needs and say what to fix.

Checks, each printed as ``[ ok ]``, ``[warn]`` or ``[FAIL]`` with a ``fix:`` line:
the config file; the capture device and the rates it opens at (and the playback device);
model files (present, loadable, and their checksums when ``voiced.models.manifest``
offers ``verify_model_file``); the intents (off, or how many load from where); the broker (a TCP connect); the CPU governor; and that
pinning threads to the hardware profile's cores really takes effect (and SCHED_FIFO for
capture). Any ``FAIL`` makes the exit code 1.

Independent of the pipeline: it needs only ``audio.source``, ``audio.capture_rate``,
``audio.fallback_rate``, ``audio.channels``, ``vad.model``, ``asr.model``, ``intents``,
``mqtt.host`` and ``mqtt.port`` of a config object.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from voiced.errors import ConfigError, VoicedError
from voiced.runtime.affinity import (
    CPUFREQ_ROOT,
    GOVERNOR_FIX,
    available_cpus,
    check_governors,
    format_cpu_list,
    pin_current_thread,
    set_realtime,
)
from voiced.runtime.hardware import (
    DEVICE_TREE_MODEL_PATHS,
    GENERIC,
    HardwareProfile,
    Stage,
    detect_board,
    select_profile,
)

__all__ = ["Check", "CheckStatus", "DoctorOptions", "main", "run_checks", "run_doctor"]

log = logging.getLogger(__name__)

PROBE_RATES = (16_000, 48_000, 44_100)
"""Rates reported as supported (besides the configured ones)."""


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

    profile: str | None = "auto"
    """Hardware profile name or path; ``auto`` detects the board."""
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


def run_doctor(config_path: str | Path | None = None,
               options: DoctorOptions | None = None) -> tuple[list[str], int]:
    """Run every check; the report's lines and the exit code (1 when something is broken)."""
    config, loaded = _load_config(config_path)
    checks = run_checks(config_path, options, loaded=(config, loaded))
    lines = [line for check in checks for line in check.lines()]
    if config is not None:
        from voiced.cloud import doctor_lines

        lines += doctor_lines(config.cloud)  # optional: it warns, never fails
    failed = sum(c.status is CheckStatus.FAIL for c in checks)
    warned = sum(c.status is CheckStatus.WARN for c in checks)
    lines.append(f"{failed} problem(s), {warned} warning(s)" if failed or warned else "all good")
    return lines, 1 if failed else 0


def run_checks(config_path: str | Path | None = None, options: DoctorOptions | None = None,
               loaded: tuple[Any, list[Check]] | None = None) -> list[Check]:
    """Every check; ``loaded`` is what ``_load_config(config_path)`` gave, when the caller has it."""
    options = options or DoctorOptions()
    config, checks = loaded if loaded is not None else _load_config(config_path)
    checks = list(checks)
    if config is not None:
        where = str(config.path) if getattr(config, "path", None) else "the config file"
        checks += _check_capture(config.audio, where)
        checks += _check_models(config, options)
        checks.append(_check_intents(config, where))
        checks.append(_check_broker(config.mqtt.host, config.mqtt.port, options.broker_timeout_s, where))
        checks.append(_check_state(config.daemon.resolved_state_dir(), where))
    checks += _check_governor(options.cpufreq_root)
    profile_checks, profile = _check_profile(options)
    checks += profile_checks
    # The config has no playback key yet: the profile's PCM is what speech output would use.
    playback = getattr(getattr(config, "audio", None), "playback", None) or (profile and profile.alsa.playback)
    if playback:
        checks.append(_check_playback(playback))
    return checks


# -- config ------------------------------------------------------------------------------------


def _load_config(path: str | Path | None) -> tuple[Any, list[Check]]:
    from voiced.config import DEFAULT_PATH, Config

    if path is None and not DEFAULT_PATH.is_file():
        return Config(), [Check("config", CheckStatus.WARN, f"{DEFAULT_PATH} not found; checking the defaults",
                                f"create {DEFAULT_PATH} (see README.md, Configuration) or pass --config")]
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        config = Config.from_file(path)
    except ConfigError as exc:
        fix = "correct the key named above"
        if "/run/credentials/" in str(exc):
            fix += "; credentials exist only while voiced.service runs (LoadCredential=)"
        return None, [Check("config", CheckStatus.FAIL, str(exc), fix)]
    return config, [Check("config", CheckStatus.OK, f"{path} is valid")]


# -- audio -------------------------------------------------------------------------------------


def _check_capture(audio: Any, where: str) -> list[Check]:
    spec = str(audio.source).strip()
    scheme, _, rest = spec.partition(":")
    if scheme == "none":
        return [Check("capture", CheckStatus.WARN, "audio.source = 'none': nothing is listened to",
                      f"set audio.source = 'alsa:DEVICE' in {where}")]
    if scheme == "file":
        ok = Path(rest).is_file()
        return [Check("capture", CheckStatus.OK if ok else CheckStatus.FAIL,
                      f"file {rest} " + ("exists" if ok else "does not exist"),
                      None if ok else f"correct audio.source in {where}")]
    if scheme != "alsa" or not rest:
        return [Check("capture", CheckStatus.FAIL, f"audio.source {spec!r} is not alsa:DEVICE, file:PATH or none",
                      f"correct audio.source in {where}")]
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


# -- models ------------------------------------------------------------------------------------


def _verifier() -> Callable[[Path], Any] | None:
    # voiced.models.manifest is written separately and may not exist yet.
    try:
        from voiced.models.manifest import verify_model_file
    except ImportError:
        return None
    return verify_model_file


def _check_models(config: Any, options: DoctorOptions) -> list[Check]:
    from voiced.asr.model import ModelFiles

    checks: list[Check] = []
    files: list[tuple[str, Path]] = []
    vad_model = getattr(config.vad, "model", None)
    if vad_model is not None:
        if Path(vad_model).is_file():
            files.append(("vad.model", Path(vad_model)))
        else:
            checks.append(Check("vad.model", CheckStatus.FAIL, f"{vad_model} does not exist",
                                "install it with `voiced models` or correct vad.model"))
    asr_model = getattr(config.asr, "model", None)
    if asr_model is None:
        checks.append(Check("asr.model", CheckStatus.WARN, "not set: no local speech recognition",
                            "install one with `voiced models` and set asr.model"))
    else:
        from voiced.asr.whisper_model import WhisperFiles, is_whisper_dir

        try:
            if is_whisper_dir(asr_model):
                whisper = WhisperFiles.find(asr_model)
                parts: tuple[Path, ...] = (whisper.encoder, whisper.decoder)
            else:
                found = ModelFiles.find(asr_model)
                parts = (found.encoder, found.decoder, found.joiner)
        except VoicedError as exc:
            checks.append(Check("asr.model", CheckStatus.FAIL, str(exc),
                                "install it with `voiced models` or correct asr.model"))
        else:
            files += [("asr.model", p) for p in parts]
    wake = getattr(config, "wake", None)
    if wake is not None and wake.models and wake.directory is not None:
        from voiced.wake.frontend import FRONTEND_STREAM

        stream = Path(wake.directory) / FRONTEND_STREAM
        if stream.is_file():
            files.append(("wake.directory", stream))
        else:
            checks.append(Check("wake.directory", CheckStatus.WARN,
                                f"no {FRONTEND_STREAM} in {wake.directory}: the wake word runs the published front end"
                                " (about three times the CPU for the same scores)",
                                f"voiced-quantize wake-stream {wake.directory}"))
    verify = _verifier()
    for key, path in files:
        checks.append(_check_model_file(key, path, verify, options.load_models))
    return checks


def _check_model_file(key: str, path: Path, verify: Callable[[Path], Any] | None, load: bool) -> Check:
    from voiced.runtime.onnx import create_session

    fix = f"reinstall it with `voiced models` (or correct {key})"
    notes = []
    if verify is not None:
        try:
            result = verify(path)
        except VoicedError as exc:  # a checksum mismatch (ModelError) names both sums
            return Check(key, CheckStatus.FAIL, str(exc), fix)
        except Exception as exc:  # noqa: BLE001 - someone else's module: report it, don't crash
            notes.append(f"checksum not checked ({type(exc).__name__}: {exc})")
        else:
            # ManifestStatus.trust: verified, or unverified/fp32 when no record lists the file.
            trust = getattr(getattr(result, "trust", None), "value", None)
            notes.append("checksum verified" if trust == "verified" else
                         f"no checksum record ({trust})" if trust else "checksum ok")
    if load:
        try:
            create_session(path)
        except VoicedError as exc:
            return Check(key, CheckStatus.FAIL, str(exc), fix)
        notes.append("loads")
    return Check(key, CheckStatus.OK, f"{path} " + (", ".join(notes) or "exists"))


# -- intents -----------------------------------------------------------------------------------


def _check_intents(config: Any, where: str) -> Check:
    from voiced.intents import IntentRecognizer

    section = getattr(config, "intents", None)
    if section is None or not section.enabled:
        return Check("intents", CheckStatus.OK, "off: transcripts only, every query is answered intentNotRecognized",
                     None)
    try:
        recognizer = IntentRecognizer.from_section(section, where)
    except VoicedError as exc:
        return Check("intents", CheckStatus.FAIL, str(exc), "correct the [intents] key or template file named above")
    sources = [f"{len(recognizer.files)} template file(s)"]
    if recognizer.builtin.value != "none":
        sources.insert(0, f"{recognizer.builtin.value} sentences ({recognizer.language})")
    return Check("intents", CheckStatus.OK, f"{len(recognizer.intent_names)} intents from {' + '.join(sources)}")


# -- broker ------------------------------------------------------------------------------------


def _check_broker(host: str, port: int, timeout: float, where: str) -> Check:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        return Check("broker", CheckStatus.FAIL, f"{host}:{port} unreachable ({exc.strerror or exc})",
                     f"start the broker (systemctl status mosquitto) or correct mqtt.host / mqtt.port in {where}; "
                     "voiced keeps retrying, but nothing is published meanwhile")
    return Check("broker", CheckStatus.OK, f"{host}:{port} accepts TCP connections")


def _check_state(state_dir: Path, where: str) -> Check:
    from voiced.mqtt.outbox_file import disk_state

    disk = disk_state(state_dir / "outbox")
    if disk:
        return Check("state", CheckStatus.WARN, f"{state_dir} is on a {disk} disk: the outbox works from memory "
                     "(what it holds is lost if voiced stops before the disk takes writes)",
                     "free space on it" if disk == "full" else "check the SD card (dmesg) and remount it read-write")
    folder = next(p for p in (state_dir, *state_dir.parents) if p.is_dir())
    if not os.access(folder, os.W_OK | os.X_OK):
        made = "" if folder == state_dir else f" (to make {state_dir})"
        return Check("state", CheckStatus.FAIL, f"{folder} is not writable{made}: the outbox cannot be opened",
                     f"give the service user the directory (systemd StateDirectory=voiced) or set daemon.state_dir in {where}")
    free = shutil.disk_usage(folder).free
    return Check("state", CheckStatus.OK, f"{state_dir} writable, {free / 1e6:,.0f} MB free")


# -- CPU ---------------------------------------------------------------------------------------


def _check_governor(root: Path) -> list[Check]:
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


def _check_profile(options: DoctorOptions) -> tuple[list[Check], HardwareProfile | None]:
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
        expected = (wanted & have) or have
        applied = _in_thread(lambda w=wanted, s=stage: pin_current_thread(w, label=f"doctor {s}"))
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


def _check_playback(device: str) -> Check:
    check = _probe_pcm("playback", device, [22_050, 16_000, 48_000], 1, capture=False, where="the config",
                       wanted=22_050)  # Piper voices speak at 22.05 kHz
    if check.status is CheckStatus.FAIL:
        return Check(check.name, CheckStatus.WARN, check.message, check.fix)  # only speech output needs it
    return Check(check.name, CheckStatus.OK, check.message)  # other rates are resampled


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voiced doctor", description="check the setup and say what to fix")
    parser.add_argument("--config", type=Path, default=None, help="config file (default /etc/voiced/voiced.toml)")
    parser.add_argument("--profile", default="auto", help="hardware profile name or .toml path (default: detect)")
    parser.add_argument("--no-load", action="store_true", help="do not open models in ONNX Runtime")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    lines, code = run_doctor(args.config, DoctorOptions(profile=args.profile, load_models=not args.no_load))
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    raise SystemExit(main())

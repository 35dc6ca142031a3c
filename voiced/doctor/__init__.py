"""``voiced doctor``: check the things a daemon needs and say what to fix.

Checks, each printed as ``[ ok ]``, ``[warn]`` or ``[FAIL]`` with a ``fix:`` line: the config
file; the capture device and the rates it opens at (and the playback device); model files,
the Piper voice's included (present, loadable, and their checksums when
``voiced.models.manifest`` offers ``verify_model_file``); the sounds it plays of its own (a
satellite's timer bell, the feedback sounds); the
intents (off, or how many load from where); the broker (a TCP connect, and the TLS handshake with ``[mqtt] tls``); whether ``[wyoming] uri``
is free to listen on (a port in use, an address not this host's, a unix socket's directory and a
server already there); the state directory (writable, and whether its disk takes writes);
what Home Assistant set on the device (a microphone switched off there is a warning); the CPU governor;
and that pinning threads to the hardware profile's cores really takes effect (and SCHED_FIFO
for capture). Any ``FAIL`` makes the exit code 1. The setup's checks are in ``setup``, the
machine's in ``machine``.

Independent of the pipeline: it needs only ``audio.source``, ``audio.capture_rate``,
``audio.fallback_rate``, ``audio.channels``, ``vad.model``, ``asr.model``, ``intents``,
``mqtt.host``, ``mqtt.port`` (and its TLS keys), ``mqtt.availability_topic``, ``site.id``, ``daemon.state_dir``,
``playback.device``, ``tts.voice`` and
``wyoming`` and ``feedback`` of a config object.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from voiced.doctor.machine import check_capture, check_governor, check_playback, check_profile
from voiced.doctor.report import Check, CheckStatus, DoctorOptions
from voiced.doctor.setup import (
    check_broker,
    check_controls,
    check_intents,
    check_models,
    check_sounds,
    check_state,
    check_wyoming,
    load_config,
)
from voiced.runtime.hardware import AUTO as AUTO_PROFILE
from voiced.tts.playconfig import DEFAULT_PCM

__all__ = ["Check", "CheckStatus", "DoctorOptions", "main", "run", "run_checks", "run_doctor"]


def run_doctor(config_path: str | Path | None = None,
               options: DoctorOptions | None = None) -> tuple[list[str], int]:
    """Run every check; the report's lines and the exit code (1 when something is broken)."""
    config, loaded = load_config(config_path)
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
    """Every check; ``loaded`` is what ``load_config(config_path)`` gave, when the caller has it."""
    options = options or DoctorOptions()
    config, checks = loaded if loaded is not None else load_config(config_path)
    checks = list(checks)
    # the daemon's profile: the one the config names, unless the caller asked for another
    wanted = options.profile or (config.hardware.profile if config is not None else AUTO_PROFILE)
    profile_checks, profile = check_profile(replace(options, profile=wanted))
    if config is not None:
        where = str(config.path) if getattr(config, "path", None) else "the config file"
        checks += check_capture(config.audio, where, profile.alsa.capture if profile else DEFAULT_PCM)
        checks += check_models(config, options)
        checks += check_sounds(config)
        checks.append(check_intents(config, where))
        mqtt = config.mqtt
        checks.append(check_broker(mqtt.host, mqtt.port, options.broker_timeout_s, where,
                                   mqtt.tls_context() if mqtt.uses_tls else None))
        wyoming = getattr(config, "wyoming", None)
        checks += check_wyoming(wyoming.uri if wyoming is not None else None, where)
        checks.append(check_state(config.daemon.resolved_state_dir(), config.daemon.resolved_runtime_dir(), where))
        checks.append(check_controls(config.daemon.resolved_state_dir(), config.site.id,
                                     config.mqtt.availability_topic))
    checks += check_governor(options.cpufreq_root)
    checks += profile_checks
    # The daemon plays through [playback] device, else through the profile's PCM.
    playback = (config.playback.device if config is not None else None) or (profile and profile.alsa.playback)
    if playback:
        checks.append(check_playback(playback))
    return checks


def run(args: argparse.Namespace) -> int:
    """Print the checks of ``args`` (``voiced.cli.add_doctor_arguments``); the exit code."""
    lines, code = run_doctor(args.config, DoctorOptions(profile=args.profile, load_models=not args.no_load))
    print("\n".join(lines))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    from voiced.cli import add_doctor_arguments

    parser = argparse.ArgumentParser(prog="voiced doctor", description="check the setup and say what to fix")
    add_doctor_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    return run(args)

"""``voiced doctor``'s checks of the setup: the config file, model files, intents, the broker, the
Wyoming server's address and the state directory."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import ssl
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voiced.doctor.report import Check, CheckStatus, DoctorOptions
from voiced.errors import ConfigError, VoicedError

__all__ = ["check_broker", "check_intents", "check_models", "check_sounds", "check_state", "check_wyoming",
           "load_config"]


# -- config ------------------------------------------------------------------------------------


def load_config(path: str | Path | None) -> tuple[Any, list[Check]]:
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


# -- models ------------------------------------------------------------------------------------


def _verifier() -> Callable[[Path], Any] | None:
    # voiced.models.manifest is written separately and may not exist yet.
    try:
        from voiced.models.manifest import verify_model_file
    except ImportError:
        return None
    return verify_model_file


def check_models(config: Any, options: DoctorOptions) -> list[Check]:
    from voiced.asr.model import ModelFiles

    checks: list[Check] = []
    files: list[tuple[str, Path]] = []
    vad_model = getattr(config.vad, "model", None)
    if vad_model is not None:
        if Path(vad_model).is_file():
            files.append(("vad.model", Path(vad_model)))
        else:
            what = "is a folder, not the Silero .onnx file" if Path(vad_model).is_dir() else "does not exist"
            checks.append(Check("vad.model", CheckStatus.FAIL, f"{vad_model} {what}",
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
        from voiced.models.manifest import manifest_path
        from voiced.wake.frontend import FRONTEND_STREAM
        from voiced.wake.model import WakeModel, check_made_from

        stream = Path(wake.directory) / FRONTEND_STREAM
        try:  # what the daemon refuses: a missing head or front end, a stream made from other models
            melspec, embedding, heads = WakeModel.find(wake.directory, list(wake.models))
            if stream.is_file():
                check_made_from(stream, melspec, embedding)
        except VoicedError as exc:
            checks.append(Check("wake.models", CheckStatus.FAIL, str(exc),
                                "correct wake.directory / wake.models, or run the command the message names"))
        else:
            files += [("wake.models", head) for head in heads]
            if wake.thresholds and options.load_models:
                checks += _wake_threshold_labels(wake.thresholds, melspec, embedding, heads)
        if stream.is_file() and not manifest_path(stream).is_file():
            checks.append(Check("wake.directory", CheckStatus.WARN,
                                f"{stream} has no manifest ({manifest_path(stream).name}): it may have been made from"
                                " other models, so the published front end runs (the same scores, three times the CPU)",
                                f"voiced-quantize wake-stream {wake.directory}"))
        elif stream.is_file():
            files.append(("wake.directory", stream))
        else:
            checks.append(Check("wake.directory", CheckStatus.WARN,
                                f"no {FRONTEND_STREAM} in {wake.directory}: the wake word runs the published front end"
                                " (about three times the CPU for the same scores)",
                                f"voiced-quantize wake-stream {wake.directory}"))
    voice = getattr(getattr(config, "tts", None), "voice", None)
    if voice is not None:
        from voiced.tts.voice import VoiceFiles

        try:
            found_voice = VoiceFiles.find(voice)
        except VoicedError as exc:
            checks.append(Check("tts.voice", CheckStatus.FAIL, str(exc),
                                "install a Piper voice (README, Speak) or correct tts.voice"))
        else:
            parts = tuple(p for p in (found_voice.model, found_voice.encoder, found_voice.decoder) if p is not None)
            files += [("tts.voice", p) for p in parts]
    llm_model = getattr(getattr(config, "llm", None), "model", None)
    if llm_model is not None:  # what the daemon reads at start (the model itself loads after READY)
        from voiced.llm.runtime import read_genai_config

        try:
            read_genai_config(llm_model)
        except VoicedError as exc:
            checks.append(Check("llm.model", CheckStatus.FAIL, str(exc),
                                "build or download an onnxruntime-genai model folder, or unset llm.model"))
        else:
            checks.append(Check("llm.model", CheckStatus.OK, f"{llm_model} has its genai_config.json"))
    verify = _verifier()
    for key, path in files:
        checks.append(_check_model_file(key, path, verify, options.load_models, _LOADERS.get(key)))
    return checks


def _load_silero(path: Path) -> object:
    from voiced.vad.silero import SileroVad

    return SileroVad.load(path)


_LOADERS: dict[str, Callable[[Path], object]] = {"vad.model": _load_silero}
"""How the daemon loads a model when more than an ONNX session proves it (the VAD's signature); the
rest are opened as sessions."""


def check_sounds(config: Any) -> list[Check]:
    """The WAVs the daemon plays of its own: a satellite's timer bell (``wyoming.timer_finished_wav``)
    and the feedback sounds (``feedback.wake_wav``, ``feedback.heard_wav``), when configured and on."""
    from voiced.tts.tones import read_sound

    wanted: list[tuple[str, Path]] = []
    wyoming, feedback = getattr(config, "wyoming", None), getattr(config, "feedback", None)
    if wyoming is not None and wyoming.satellite and wyoming.timer_finished_wav is not None:
        wanted.append(("wyoming.timer_finished_wav", wyoming.timer_finished_wav))
    if feedback is not None:
        wanted += [(f"feedback.{kind}_wav", path) for kind, on, path in
                   (("wake", feedback.wake, feedback.wake_wav), ("heard", feedback.heard, feedback.heard_wav))
                   if on and path is not None]
    checks = []
    for key, path in wanted:
        try:
            sound = read_sound(path, key)
        except ConfigError as exc:
            checks.append(Check(key, CheckStatus.FAIL, exc.problem,
                                "point it at a readable WAV file, or unset it for the built-in sound"))
        else:
            checks.append(Check(key, CheckStatus.OK, f"{path}: {sound.duration:.1f} s at {sound.sample_rate} Hz"))
    return checks


def _wake_threshold_labels(thresholds: dict[str, float], melspec: Path, embedding: Path,
                           heads: list[Path]) -> list[Check]:
    """What the daemon refuses at start: a ``wake.thresholds`` key that is no label of the heads (a
    multi-class head's labels are in its graph, so the heads are loaded)."""
    from voiced.runtime.onnx import SessionOptions
    from voiced.wake.model import WakeModel

    try:
        model = WakeModel(melspec, embedding, heads, SessionOptions(), stream=False)
        labels = [label for head in model.heads for label in head.labels]
    except VoicedError:
        return []  # the model file checks say what is wrong with them
    unknown = sorted(set(thresholds) - set(labels))
    if not unknown:
        return []
    return [Check(f"wake.thresholds.{unknown[0]}", CheckStatus.FAIL, "no such wake word: the daemon would not start",
                  f"use one of the models' labels: {', '.join(labels)}")]


def _check_model_file(key: str, path: Path, verify: Callable[[Path], Any] | None, load: bool,
                      loader: Callable[[Path], object] | None = None) -> Check:
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
            (loader or create_session)(path)  # as the daemon loads it (a vad.model must be a Silero VAD)
        except VoicedError as exc:
            return Check(key, CheckStatus.FAIL, str(exc), fix)
        notes.append("loads")
    from voiced.models.manifest import failed_validation, stale_source

    why = failed_validation(path)  # left for inspection, loaded only when no FP32 files are beside it
    if why is not None:
        return Check(key, CheckStatus.WARN, f"{path} " + ", ".join(notes + [f"failed validation ({why})"]),
                     "quantize it again with more or better --audio, or delete it and its manifest")
    int8 = path.with_name(path.name.removesuffix(".onnx") + ".int8.onnx")
    why = failed_validation(int8) if int8.is_file() else None  # the finders chose this FP32 file for that reason
    if why is not None:
        return Check(key, CheckStatus.WARN, f"{path} " + ", ".join(notes + [
            f"loaded instead of {int8.name}, which failed validation ({why}): the larger, slower model runs"]),
            f"quantize it again with more or better --audio, or delete {int8.name} and its manifest")
    stale = stale_source(path)  # still loads as it is, but it is not the model beside it any more
    if stale is not None:
        return Check(key, CheckStatus.WARN, f"{path} " + ", ".join(notes + [stale]),
                     "quantize it again (voiced-quantize), or it keeps running the older model")
    return Check(key, CheckStatus.OK, f"{path} " + (", ".join(notes) or "exists"))


# -- intents -----------------------------------------------------------------------------------


def check_intents(config: Any, where: str) -> Check:
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


def check_broker(host: str, port: int, timeout: float, where: str, tls: ssl.SSLContext | None = None) -> Check:
    """A TCP connect to the broker, and with ``tls`` (``[mqtt] tls`` on) the TLS handshake the daemon
    makes: a plain MQTT port answers TCP, so without it a TLS setup was called fine."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if tls is None:
                return Check("broker", CheckStatus.OK, f"{host}:{port} accepts TCP connections")
            try:
                with tls.wrap_socket(sock, server_hostname=host):
                    pass  # the handshake is done in wrap_socket, within the connect's timeout
            except ssl.SSLCertVerificationError as exc:
                return Check("broker", CheckStatus.FAIL, f"TLS handshake with {host}:{port} failed "
                             f"({exc.verify_message}): the broker's certificate is not trusted",
                             f"set mqtt.ca_file in {where} to the CA that signed it, and mqtt.host to the name "
                             "it was issued for")
            except (ssl.SSLError, ConnectionError) as exc:
                why = getattr(exc, "reason", None) or exc.strerror or exc
                return Check("broker", CheckStatus.FAIL, f"TLS handshake with {host}:{port} failed ({why}): "
                             "is that port TLS? [mqtt] tls is on",
                             f"set mqtt.port in {where} to the broker's TLS listener (8883 is usual), or tls = false "
                             "(and no ca_file / cert_file / key_file) for a plain one")
            return Check("broker", CheckStatus.OK, f"{host}:{port} accepts TLS connections (certificate verified)")
    except OSError as exc:
        return Check("broker", CheckStatus.FAIL, f"{host}:{port} unreachable ({exc.strerror or exc})",
                     f"start the broker (systemctl status mosquitto) or correct mqtt.host / mqtt.port in {where}; "
                     "voiced keeps retrying, but nothing is published meanwhile")


# -- wyoming -----------------------------------------------------------------------------------

WYOMING_KEY = "wyoming.uri"
"""The name of the Wyoming server's check: the key to correct."""
_PROBE_TIMEOUT_S = 2.0
"""How long connecting to a socket already at a ``unix://`` path may take."""


def check_wyoming(uri: str | None, where: str) -> list[Check]:
    """Whether the daemon could listen on ``[wyoming] uri`` now: a port another server holds (a
    voiced already running, wyoming-satellite) otherwise shows only when the daemon fails its start."""
    from voiced.wyoming.config import Scheme, parse_uri

    if uri is None:
        return []
    endpoint = parse_uri(uri)  # valid: the config loaded
    if endpoint.scheme is Scheme.UNIX:
        return [_check_wyoming_socket(uri, Path(endpoint.path), where)]
    return [_check_wyoming_port(uri, endpoint.host, endpoint.port, where)]


def _check_wyoming_port(uri: str, host: str, port: int, where: str) -> Check:
    fix = f"stop the other server (ss -ltnp 'sport = :{port}' names it) or choose another port in [wyoming] uri in {where}"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return Check(WYOMING_KEY, CheckStatus.FAIL, f"{host} is no address or known host name ({exc.strerror})",
                     f"correct the host of [wyoming] uri in {where} (0.0.0.0: every address of this host)")
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # As asyncio's start_server binds (what the daemon does): a port left in TIME_WAIT by a
            # daemon just stopped is free to it, so it is free here too. Listened on for an instant
            # and closed at once: a port only bound elsewhere is refused at listen, as it would be.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
                probe.listen(1)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return Check(WYOMING_KEY, CheckStatus.FAIL,
                                 f"port {port} is in use (another voiced or Wyoming service running?)", fix)
                if exc.errno == errno.EADDRNOTAVAIL:  # the daemon waits for it (a DHCP lease after boot)
                    return Check(WYOMING_KEY, CheckStatus.WARN,
                                 f"{host} is not an address of this host: the daemon serves nothing until it is "
                                 "assigned", f"use 0.0.0.0 or an address of this host in [wyoming] uri in {where}, "
                                 "unless that address comes later (DHCP)")
                return Check(WYOMING_KEY, CheckStatus.FAIL, f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                             f"choose another address or port in [wyoming] uri in {where}")
    return Check(WYOMING_KEY, CheckStatus.OK, f"{uri}: free to listen on")


def _check_wyoming_socket(uri: str, path: Path, where: str) -> Check:
    fix = f"choose another path in [wyoming] uri in {where}"
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return Check(WYOMING_KEY, CheckStatus.FAIL, f"cannot look at {path}: {exc.strerror or exc}", fix)
    if mode is not None and not stat.S_ISSOCK(mode):  # the daemon refuses to remove it
        kind = "a directory" if stat.S_ISDIR(mode) else "a file"
        return Check(WYOMING_KEY, CheckStatus.FAIL, f"{path} is {kind}, not a socket", f"remove it or {fix}")
    if mode is not None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(_PROBE_TIMEOUT_S)
            try:
                probe.connect(str(path))
            except ConnectionRefusedError:
                pass  # left by a run that ended: the daemon replaces it
            except OSError as exc:
                return Check(WYOMING_KEY, CheckStatus.WARN,
                             f"cannot tell whether a server listens on {path}: {exc.strerror or exc}", fix)
            else:
                return Check(WYOMING_KEY, CheckStatus.FAIL,
                             f"a server listens on {path} (another voiced or Wyoming service running?)",
                             f"stop it or {fix}")
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not existing.is_dir():
        return Check(WYOMING_KEY, CheckStatus.FAIL, f"{existing} is a file, not a directory: no socket can be made "
                     f"at {path}", fix)
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == path.parent else f" (to make {path.parent})"
        return Check(WYOMING_KEY, CheckStatus.FAIL, f"{existing} is not writable{made}: the socket cannot be made",
                     f"give the service user the directory (systemd RuntimeDirectory=voiced) or {fix}")
    made = "" if existing == path.parent else f" (the daemon makes {path.parent})"
    stale = " (a socket left by an earlier run is there: the daemon replaces it)" if mode is not None else ""
    return Check(WYOMING_KEY, CheckStatus.OK, f"{uri}: {existing} writable{made}{stale}")


# -- state -------------------------------------------------------------------------------------


def check_controls(state_dir: Path, site_id: str, availability_topic: str) -> Check:
    """What Home Assistant set on the device and the daemon keeps (``controls.json``): a microphone
    switched off there is the first thing to know when the box seems deaf."""
    from voiced.core.controls import CONTROLS_FILE, read_controls
    from voiced.mqtt.discovery import DiscoveryConfig, state_topics

    path = state_dir / CONTROLS_FILE
    if not path.exists():
        return Check("controls", CheckStatus.OK, "nothing set from Home Assistant yet (microphone on)")
    controls, problems = read_controls(path)  # what is damaged reads as the defaults, as in the daemon
    volume = "[playback] volume" if controls.volume is None else f"volume {round(controls.volume * 100)} %"
    told = f"{volume}, wake word {controls.wake_sensitivity.value.lower()} (in {path})"
    if problems:
        return Check("controls", CheckStatus.WARN, f"{'; '.join(problems)}; so: microphone "
                     f"{'on' if controls.microphone else 'off'}, {told}",
                     "set them again from Home Assistant (the daemon then writes the file whole)")
    if not controls.microphone:
        topic = state_topics(DiscoveryConfig(site_id=site_id, availability_topic=availability_topic)).microphone_set
        return Check("controls", CheckStatus.WARN, f"the microphone was switched off from Home Assistant: nothing "
                     f"is heard; {told}", f"switch Microphone on in Home Assistant (or publish ON to {topic})")
    return Check("controls", CheckStatus.OK, f"microphone on, {told}")


def check_state(state_dir: Path, runtime_dir: Path | None, where: str) -> Check:
    """Whether the outbox can live in ``state_dir``: a disk that takes no writes is a warning (the daemon
    runs, from memory, kept in ``runtime_dir`` across a restart), a directory voiced may not write a failure."""
    from voiced.mqtt.outbox import OUTBOX_FILE
    from voiced.mqtt.outbox_file import DiskProblem, disk_state

    disk = disk_state(state_dir / OUTBOX_FILE)
    if disk:
        fix = "free space on it" if disk is DiskProblem.FULL else "check the SD card (dmesg) and remount it read-write"
        kept = (f"kept in {runtime_dir} across a restart of voiced, lost on a reboot" if runtime_dir is not None
                else "lost if voiced stops before the disk takes writes: no runtime directory")
        return Check("state", CheckStatus.WARN, f"{state_dir} is on a {disk} disk: the outbox works from memory "
                     f"(what it holds is {kept})", fix)
    existing = next(p for p in (state_dir, *state_dir.parents) if p.exists())
    if not existing.is_dir():  # the daemon refuses it at start
        return Check("state", CheckStatus.FAIL, f"{existing} is a file, not a directory: the outbox cannot live "
                     f"{'there' if existing == state_dir else f'in {state_dir}'}",
                     f"move the file away or set daemon.state_dir in {where}")
    folder = existing
    if not os.access(folder, os.W_OK | os.X_OK):
        made = "" if folder == state_dir else f" (to make {state_dir})"
        return Check("state", CheckStatus.FAIL, f"{folder} is not writable{made}: the outbox cannot be opened",
                     "give the service user the directory (systemd StateDirectory=voiced) "
                     f"or set daemon.state_dir in {where}")
    free = shutil.disk_usage(folder).free
    return Check("state", CheckStatus.OK, f"{state_dir} writable, {free / 1e6:,.0f} MB free")

"""Per-board hardware profiles: which cores each stage runs on, ONNX threads, audio defaults.

Profiles are TOML files shipped inside the package (``voiced/runtime/profiles/*.toml``,
package data, so an installed wheel has them; ``hardware/*.toml`` in the repository links
there). A profile is chosen by name (``pi4``), by path (``/etc/voiced/myboard.toml``), or
detected from the device-tree model string (``Raspberry Pi 4 Model B Rev 1.4``).
"""

from __future__ import annotations

import logging
import platform
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from voiced.configfile import read_toml, section_from_dict
from voiced.errors import ConfigError
from voiced.runtime.affinity import available_cpus, clamp_cpus, format_cpu_list, kept_cpus, ort_thread_affinities
from voiced.runtime.onnx import SessionOptions

__all__ = [
    "AUTO",
    "DEVICE_TREE_MODEL_PATHS",
    "GENERIC",
    "PROFILES_DIR",
    "AlsaDevices",
    "CoreMap",
    "HardwareProfile",
    "OnnxRole",
    "OnnxThreads",
    "Stage",
    "detect_board",
    "detect_profile",
    "known_profiles",
    "load_profile",
    "select_profile",
]

log = logging.getLogger(__name__)

PROFILES_DIR = Path(__file__).with_name("profiles")
"""The profiles shipped with voiced (package data)."""
DEVICE_TREE_MODEL_PATHS = (Path("/proc/device-tree/model"), Path("/sys/firmware/devicetree/base/model"))
"""Where the board names itself; the /sys path still works under the unit's ProtectProc=."""
AUTO = "auto"
"""Profile name meaning: detect the board."""
GENERIC = "x86-64"
"""The fallback for boards no profile matches (its core map is clamped to what exists)."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class Stage(StrEnum):
    """The daemon's pinned threads (also the supervisor's stage names)."""

    CAPTURE = "capture"
    LISTEN = "listen"
    INTENT = "intent"
    SPEAK = "speak"
    MQTT = "mqtt"


class OnnxRole(StrEnum):
    """The ONNX models whose thread counts a profile sets."""

    ASR = "asr"
    VAD = "vad"
    TTS = "tts"


_ROLE_STAGE = {OnnxRole.ASR: Stage.LISTEN, OnnxRole.VAD: Stage.LISTEN, OnnxRole.TTS: Stage.SPEAK}
"""Which stage's thread runs each model, and so whose cores its extra ONNX threads get."""


@dataclass(frozen=True)
class CoreMap:
    """Cores per stage (``[cores]``); an empty list leaves that stage unpinned."""

    capture: tuple[int, ...] = ()
    """ALSA capture and windowing: light, but must never wait for a core."""
    listen: tuple[int, ...] = ()
    """VAD + streaming ASR: the heavy stage."""
    intent: tuple[int, ...] = ()
    """Template matching and LLM/cloud fallback."""
    speak: tuple[int, ...] = ()
    """TTS and playback; capture is muted meanwhile, so it may share the listen cores."""
    mqtt: tuple[int, ...] = ()
    """paho's network thread and the outbox."""

    def __post_init__(self) -> None:
        for stage in Stage:
            cores = getattr(self, stage.value)
            if any(not 0 <= c < 1024 for c in cores):
                raise ConfigError(stage.value, f"cores must be within 0..1023, got {list(cores)}")


@dataclass(frozen=True)
class OnnxThreads:
    """ONNX Runtime intra-op threads per model (``[threads]``)."""

    asr: int = 1
    """Streaming recognizer (encoder, decoder, joiner)."""
    vad: int = 1
    """Silero VAD; 1 is plenty for 512-sample chunks."""
    tts: int = 1
    """Piper voice."""

    def __post_init__(self) -> None:
        for role in OnnxRole:
            value = getattr(self, role.value)
            if not 1 <= value <= 64:
                raise ConfigError(role.value, f"must be within 1..64, got {value}")


@dataclass(frozen=True)
class AlsaDevices:
    """Default ALSA PCM names (``[alsa]``); the config file's audio settings win over these."""

    capture: str = "default"
    """Capture PCM, e.g. ``plughw:CARD=seeed2micvoicec`` or ``voiced_mic`` from hardware/alsa/."""
    playback: str = "default"
    """Playback PCM, e.g. ``plughw:CARD=Headphones`` or ``voiced_speaker``."""

    def __post_init__(self) -> None:
        for key in ("capture", "playback"):
            if not getattr(self, key).strip():
                raise ConfigError(key, "must be a non-empty ALSA PCM name")


@dataclass(frozen=True)
class HardwareProfile:
    """One board's profile (a file in ``voiced/runtime/profiles/``)."""

    name: str
    """Short name, the file's stem (``pi4``)."""
    description: str = ""
    """What board this is for, for logs and ``voiced doctor``."""
    match: tuple[str, ...] = ()
    """Device-tree model prefixes that select this profile (``Raspberry Pi 4``)."""
    cores: CoreMap = field(default_factory=CoreMap)
    """[cores]: cores per stage."""
    threads: OnnxThreads = field(default_factory=OnnxThreads)
    """[threads]: ONNX Runtime threads per model."""
    alsa: AlsaDevices = field(default_factory=AlsaDevices)
    """[alsa]: default capture and playback PCMs."""
    realtime_priority: int = 0
    """SCHED_FIFO priority of the capture thread (1..10 with the shipped unit's LimitRTPRIO=10); 0 = off."""
    tts_release_after_phonemes: int = 150
    """``[tts] release_after_phonemes`` when the config leaves it unset: 1 on boards short of memory,
    where a level RSS is worth 3-16 % more synthesis CPU (see ``VoiceSettings.release_after_phonemes``)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError("name", f"must be lowercase letters, digits and '-', got {self.name!r}")
        if not 0 <= self.realtime_priority <= 99:
            raise ConfigError("realtime_priority", f"must be within 0..99, got {self.realtime_priority}")
        if self.tts_release_after_phonemes < 0:
            raise ConfigError("tts_release_after_phonemes", f"must be >= 0, got {self.tts_release_after_phonemes}")

    def fitted(self, available: Iterable[int] | None = None) -> HardwareProfile:
        """This profile with each stage's cores cut to the ``available`` ones (this process's),
        said once here rather than by every thread and ONNX session that is pinned later."""
        have = frozenset(available) if available is not None else available_cpus()
        fitted, dropped = {}, set()
        for stage in Stage:
            cores = getattr(self.cores, stage.value)
            kept = tuple(sorted(kept_cpus(cores, have))) if cores else ()
            fitted[stage.value] = kept
            dropped.update(set(cores) - have)
        if not dropped:
            return self
        stages = ", ".join(f"{stage} {format_cpu_list(fitted[stage.value])}" for stage in Stage
                           if fitted[stage.value] != getattr(self.cores, stage.value))
        # The generic profile is written for 4 cores and meant to be cut down: no cause for a warning.
        level = logging.INFO if self.name == GENERIC else logging.WARNING
        log.log(level, "profile %s: cores %s are not available here (have %s): %s", self.name,
                format_cpu_list(frozenset(dropped)), format_cpu_list(have), stages)
        return replace(self, cores=CoreMap(**fitted))

    def cpus(self, stage: Stage | str) -> frozenset[int] | None:
        """The cores ``stage`` is pinned to, as written (unclamped); None = unpinned."""
        cores = getattr(self.cores, Stage(stage).value)
        return frozenset(cores) if cores else None

    def session_options(self, role: OnnxRole | str, optimize: bool = True) -> SessionOptions:
        """Options for :func:`voiced.runtime.onnx.create_session`: threads, and their cores.

        The extra intra-op threads go to the cores of the stage that runs the model,
        clamped to the cores that exist here.
        """
        role = OnnxRole(role)
        threads = getattr(self.threads, role.value)
        cpus = self.cpus(_ROLE_STAGE[role])
        affinities = None
        if cpus is not None:
            affinities = ort_thread_affinities(clamp_cpus(cpus, label=f"{role.value} ONNX threads"), threads)
        return SessionOptions(threads=threads, optimize=optimize, thread_affinities=affinities)


def known_profiles(directory: Path = PROFILES_DIR) -> tuple[str, ...]:
    """Names of the profiles in ``directory``, sorted."""
    return tuple(sorted(p.stem for p in directory.glob("*.toml")))


def is_profile_path(text: str) -> bool:
    """Whether ``[hardware] profile`` names a file (else a shipped profile or ``auto``)."""
    return "/" in text or text.endswith(".toml")


def load_profile(name_or_path: str | Path, directory: Path = PROFILES_DIR) -> HardwareProfile:
    """A profile by name (``pi4``) or by file path; ConfigError lists the known names."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or is_profile_path(text):
        return _read(Path(text).expanduser(), expected_name=None)
    path = directory / f"{text}.toml"
    if not _NAME.match(text) or not path.is_file():
        known = ", ".join(known_profiles(directory))
        raise ConfigError("hardware.profile", f"unknown profile {text!r} (known: {known}, {AUTO}, or a .toml path)")
    return _read(path, expected_name=text)


def detect_board(paths: Sequence[Path] = DEVICE_TREE_MODEL_PATHS) -> str | None:
    """The device-tree model string (``Raspberry Pi 4 Model B Rev 1.4``), or None off a DT board."""
    for path in paths:
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        model = raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
        if model:
            return model
    return None


def detect_profile(paths: Sequence[Path] = DEVICE_TREE_MODEL_PATHS,
                   directory: Path = PROFILES_DIR) -> HardwareProfile:
    """The profile whose ``match`` is the longest prefix of the board's model; else the generic one."""
    model = detect_board(paths)
    if model is not None:
        best: tuple[int, HardwareProfile] | None = None
        for name in known_profiles(directory):
            profile = load_profile(name, directory)
            for prefix in profile.match:
                if model.startswith(prefix) and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), profile)
        if best is not None:
            log.info("board %r: hardware profile %s", model, best[1].name)
            return best[1]
        log.warning("no hardware profile for board %r: using %s (cores clamped to this machine)", model, GENERIC)
    elif platform.machine().lower() not in ("x86_64", "amd64"):
        log.warning("cannot tell which board this is (%s, no device-tree model): using %s",
                    platform.machine(), GENERIC)
    return load_profile(GENERIC, directory)


def select_profile(name: str | Path | None = AUTO, paths: Sequence[Path] = DEVICE_TREE_MODEL_PATHS,
                   directory: Path = PROFILES_DIR) -> HardwareProfile:
    """``auto`` (or None) detects the board; anything else is :func:`load_profile`."""
    if name is None or str(name) == AUTO:
        return detect_profile(paths, directory)
    return load_profile(name, directory)


_RETIRED = {"window_frames": "[audio] window_frames", "capture_rate": "[audio] capture_rate"}
"""Keys earlier profiles had that nothing read (the config's [audio] keys always decided)."""


def _read(path: Path, expected_name: str | None) -> HardwareProfile:
    data = read_toml(path, "hardware.profile")
    for key in sorted(_RETIRED.keys() & data.keys()):  # a copy of an older shipped profile still loads
        log.warning("%s: %s is not a profile key (it never took effect); set %s in the config instead",
                    path, key, _RETIRED[key])
        del data[key]
    profile = section_from_dict(HardwareProfile, data, "hardware", str(path))
    if expected_name is not None and profile.name != expected_name:
        raise ConfigError("hardware.name", f"must be the file's name {expected_name!r}, got {profile.name!r}",
                          str(path))
    return profile

"""File fuzzing: mutated configs, WAVs, models, token tables, templates, voice configs and outbox files.

Every case is written to a file and handed to the loader voiced uses for it. The only
acceptable outcomes are a correct load, a recovery the loader documents (a corrupt outbox set
aside, what it could read kept), or a :class:`VoicedError` whose message names the file (or,
for config keys, the key); anything else (another exception, a hang, a crash of the
interpreter) is a failure. Inputs come from Hypothesis strategies (seeded, reproducible,
shrunk to a minimal case on failure); ``voiced bench fuzz`` runs thousands, the tests a slice.
"""

from __future__ import annotations

import json
import struct
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from voiced.errors import VoicedError

__all__ = ["Outcome", "Recovered", "Tally", "check", "load_config", "load_intents", "load_outbox", "load_silero",
           "load_tokens", "load_voice_config", "load_wake_head", "load_wav", "mutate_bytes", "outbox_file",
           "wav_header"]


class Outcome(Enum):
    LOADED = "loaded"
    """The input was valid (or made valid by the loader's documented leniency)."""
    RECOVERED = "recovered"
    """The input was damaged and the loader went on as it documents (a corrupt outbox set aside)."""
    CLEAR_ERROR = "clear_error"
    """A VoicedError naming the file (or the key)."""
    UNNAMED_ERROR = "unnamed_error"
    """A VoicedError that does not say which file or key: a failure of the message."""
    FAILURE = "failure"
    """Anything else: a bug."""


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)

    def add(self, outcome: Outcome, detail: str = "", case: str = "") -> None:
        self.counts[outcome.value] = self.counts.get(outcome.value, 0) + 1
        if outcome in (Outcome.FAILURE, Outcome.UNNAMED_ERROR) and len(self.failures) < 20:
            self.failures.append({"outcome": outcome.value, "detail": detail[-1500:], "case": case[:300]})


def check(load: Callable[[Path], object], path: Path, names: tuple[str, ...] = ()) -> tuple[Outcome, str]:
    """Run ``load(path)``; classify what happened. ``names``: what else a message may name (config keys)."""
    try:
        result = load(path)
    except VoicedError as exc:
        text = str(exc)
        named = path.name in text or any(n in text for n in names)
        return (Outcome.CLEAR_ERROR if named else Outcome.UNNAMED_ERROR), text
    except Exception:  # noqa: BLE001 - the point: anything but VoicedError is a finding
        return Outcome.FAILURE, traceback.format_exc()
    if isinstance(result, Recovered):
        return Outcome.RECOVERED, str(result)
    return Outcome.LOADED, ""


def mutate_bytes(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    """Overwrite bytes (position modulo the length, value) and optionally cut the end off."""
    buf = bytearray(data)
    for pos, value in edits:
        if buf:
            buf[pos % len(buf)] = value & 0xFF
    return bytes(buf[:cut] if cut is not None else buf)


# -- loaders (what voiced does with each kind of file) --------------------------------------------


class Recovered(str):
    """What a loader returns when it went on past damage, saying how."""


class AcceptedNonsense(Exception):
    """A loader took a value no setting means (NaN, a NUL in a name): a finding, like a traceback."""


def load_config(path: Path) -> object:
    from voiced.bench.fuzz_config import accepted_nonsense
    from voiced.config import Config

    config = Config.from_file(path)
    bad = accepted_nonsense(config)
    if bad:
        raise AcceptedNonsense(f"{path.name} loaded with {bad}")
    return config


def load_wav(path: Path) -> object:
    """As the daemon reads a file source: header, every block, resampled to 16 kHz."""
    from voiced.audio.source import WavSource

    with WavSource(path) as source:
        return sum(len(c) for c in source.chunks())


def load_intents(path: Path) -> object:
    from voiced.intentconfig import IntentsSection
    from voiced.intents import IntentRecognizer

    recognizer = IntentRecognizer.from_section(IntentsSection(templates=(str(path),)), "fuzz.toml")
    return recognizer.recognize("turn on the kitchen light")


def load_silero(path: Path) -> object:
    from voiced.vad import SileroVad

    return SileroVad.load(path)


def load_wake_head(path: Path) -> object:
    """A head beside the real front end, as ``[wake] models`` loads it; then scored on a second of audio."""
    import numpy as np

    from voiced.wake import WakeDetector, WakeModel

    detector = WakeDetector(WakeModel.load(path.parent, [path.stem]))
    return list(detector.create_stream().accept_waveform(np.zeros(16_000, np.float32)))


def load_tokens(path: Path) -> object:
    from voiced.asr.tokens import SymbolTable

    return SymbolTable.load(path)


def load_outbox(path: Path) -> object:
    """As the daemon starts on it: open (a ConfigError is a failure here: the daemon would not
    start), hand out and acknowledge everything, append; every message handed out in id order.
    The files it leaves (WAL, a corrupt one set aside) go, for the next case."""
    from voiced.errors import ConfigError
    from voiced.mqtt.outbox import Outbox, OutboxConfig

    try:
        try:
            box = Outbox(OutboxConfig(str(path), max_age_s=0))
        except ConfigError as exc:  # only the file's bytes differ from case to case: damage must not stop a start
            raise AssertionError(f"the daemon would not start on this outbox: {exc}") from None
        with box:
            handed, after = [], 0
            while batch := box.peek(after, 64):
                handed += [m.id for m in batch]
                for m in batch:
                    box.ack(m.id)
                after = batch[-1].id
            if handed != sorted(set(handed)):
                raise AssertionError(f"ids handed out out of order or twice: {handed[:20]}")
            if box.append("t", b"after") is None or len(box) != 1:
                raise AssertionError("the outbox does not take a message after its file")
            aside = box.set_aside
        return Recovered(f"set aside, {len(handed)} messages kept") if aside else len(handed)
    finally:
        for leftover in path.parent.glob(path.name + "?*"):
            leftover.unlink()


def outbox_file(workdir: Path, messages: int = 60) -> bytes:
    """A real outbox file holding ``messages`` messages of 10-500 bytes (the daemon's own writing)."""
    from voiced.mqtt.outbox import Outbox, OutboxConfig

    path = workdir / "made-outbox.sqlite3"
    with Outbox(OutboxConfig(str(path))) as box:
        for n in range(messages):
            box.append(f"hermes/intent/n{n}", b"%d" % n * (10 + n * 7 % 490))
    data = path.read_bytes()
    for made in workdir.glob(path.name + "*"):
        made.unlink()
    return data


def load_voice_config(path: Path) -> object:
    from voiced.tts.config import VoiceConfig

    return VoiceConfig.from_file(path)


# -- generators' raw material -------------------------------------------------------------------------


def wav_header(rate: int, channels: int, bits: int, tag: int, data_size: int, fmt_size: int = 16,
               riff_size: int | None = None, block_align: int | None = None) -> bytes:
    """A RIFF/WAVE header with every field given (so any of them can be wrong)."""
    align = block_align if block_align is not None else channels * max(bits, 8) // 8
    fmt = struct.pack("<HHIIHH", tag & 0xFFFF, channels & 0xFFFF, rate & 0xFFFFFFFF,
                      (rate * align) & 0xFFFFFFFF, align & 0xFFFF, bits & 0xFFFF)
    fmt = fmt.ljust(fmt_size, b"\0")[:max(fmt_size, 0)]
    body = b"WAVE" + b"fmt " + struct.pack("<I", fmt_size & 0xFFFFFFFF) + fmt + b"data" + struct.pack(
        "<I", data_size & 0xFFFFFFFF)
    size = riff_size if riff_size is not None else len(body) + data_size
    return b"RIFF" + struct.pack("<I", size & 0xFFFFFFFF) + body


VALID_CONFIG: dict[str, dict[str, Any]] = {
    "site": {"id": "kitchen"},
    "audio": {"source": "none", "realtime": False, "window_frames": 10, "queue_windows": 50},
    "vad": {"kind": "energy"},
    "asr": {"method": "greedy_search", "max_active_paths": 4, "hotword_boost": 1.5, "tail_padding_ms": 800,
            "partials": False, "template_margin": 1.5},
    "mqtt": {"host": "localhost", "port": 1883, "keepalive": 30, "max_payload_bytes": 65536, "max_inflight": 20},
    "daemon": {"stats_interval_s": 60.0},
    "tts": {"max_text_chars": 5000, "tail_ms": 300, "max_pending": 16},
    "wake": {"threshold": 0.5, "patience": 1, "refractory_s": 2.0, "timeout_s": 5.0},
    "wyoming": {"max_clients": 8, "max_audio_s": 60.0, "workers": 2, "zeroconf": True},
    "playback": {"device": "default", "volume": 1.0},
}
"""A valid configuration whose every key the config fuzzer mutates."""


def toml_value(value: Any) -> str:
    """``value`` as TOML (strings JSON-quoted, which TOML accepts for basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            return {True: "inf", False: "-inf"}[value > 0] if value == value else "nan"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def config_text(config: dict[str, dict[str, Any]]) -> str:
    lines = []
    for section, keys in config.items():
        lines.append(f"[{section}]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"

"""The daemon's configuration: one TOML file, every key documented and validated at load.

Errors name the key and the file (``mqtt.port in /etc/voiced/voiced.toml: must be ...``).
See README.md, "Configuration", for the full list of keys.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from voiced.asr.search import SearchMethod
from voiced.audio.source import SOURCE_KEY, AudioSource, SourceKind, open_source, parse_source, source_relative_to
from voiced.cloud.config import CloudConfig
from voiced.configfile import read_toml, section_from_dict
from voiced.errors import ConfigError
from voiced.intentconfig import IntentsSection
from voiced.llm.config import LlmConfig
from voiced.mqtt.config import MqttConfig
from voiced.runtime.hardware import is_profile_path
from voiced.tts.config import SynthesisOptions
from voiced.tts.cues import FeedbackConfig
from voiced.tts.playconfig import PlaybackConfig
from voiced.vad import EndpointConfig, EnergyGateConfig, VadKind
from voiced.wake.model import is_head_path
from voiced.wyoming.config import WyomingConfig

__all__ = ["AsrSection", "AudioSection", "Config", "DaemonSection", "HardwareSection", "IntentsSection", "SiteSection", "VadSection", "WakeSection"]

DEFAULT_PATH = Path("/etc/voiced/voiced.toml")


_MQTT_FILES = ("password_file", "ca_file", "cert_file", "key_file")


def _relative_files(mqtt: dict[str, Any], base: Path | None) -> dict[str, Any]:
    """[mqtt] file keys relative to the config file, before MqttConfig checks they exist."""
    if base is None:
        return mqtt
    return {k: str(base / v) if k in _MQTT_FILES and isinstance(v, str) and not Path(v).is_absolute() else v
            for k, v in mqtt.items()}


@dataclass(frozen=True)
class SiteSection:
    id: str = "default"
    """The Hermes ``siteId`` of this device; messages for other sites are ignored."""

    def __post_init__(self) -> None:
        if not self.id or set("/+#") & set(self.id):
            raise ConfigError("id", f"must be non-empty without '/', '+' or '#', got {self.id!r}")


@dataclass(frozen=True)
class AudioSection:
    source: str = "none"
    """``alsa:DEVICE`` (e.g. ``alsa:hw:1,0``), ``alsa`` (the hardware profile's ``[alsa] capture``),
    ``file:PATH`` (played once, then idle) or ``none``."""
    realtime: bool = False
    """Pace a file source to the wall clock instead of as fast as the pipeline goes."""
    channel: int | None = None
    """Capture/file channel to use; unset: the mean of all channels."""
    channels: int = 1
    """Channels to open an ALSA device with (a 2-mic HAT gives 2)."""
    window_frames: int = 10
    """10 ms frames per processing window (10 = 100 ms)."""
    capture_rate: int = 16_000
    """Rate asked of the ALSA device; other rates are resampled to 16 kHz."""
    fallback_rate: int = 48_000
    """Rate to capture at when the device refuses ``capture_rate``."""
    queue_windows: int = 50
    """Windows buffered between capture and listening (50 = 5 s); when full the oldest is dropped and counted."""

    def __post_init__(self) -> None:
        try:  # checked with the file, as every other key is: doctor and run say the same
            parse_source(self.source)
        except ConfigError as exc:
            raise ConfigError("source", exc.problem) from None
        if not 1 <= self.window_frames <= 100:
            raise ConfigError("window_frames", f"must be within 1..100, got {self.window_frames}")
        if not 1 <= self.queue_windows <= 100_000:
            raise ConfigError("queue_windows", f"must be within 1..100000, got {self.queue_windows}")
        if not 1 <= self.channels <= 32:
            raise ConfigError("channels", f"must be within 1..32, got {self.channels}")
        if self.channel is not None and not 0 <= self.channel < 32:
            raise ConfigError("channel", f"must be within 0..31 (counted from 0), got {self.channel}")
        for key in ("capture_rate", "fallback_rate"):  # the rates a WAV source accepts too
            rate = getattr(self, key)
            if not 1_000 <= rate <= 768_000:
                raise ConfigError(key, f"must be within 1000..768000 Hz, got {rate}")

    def open(self, profile_device: str, stop: threading.Event | None = None,
             config_file: str | None = None) -> AudioSource:
        """The source these settings describe; an ALSA one opens with ``channels``, ``channel`` and
        the rates, and a bare ``alsa`` means ``profile_device`` (the hardware profile's PCM)."""
        from voiced.audio.alsa import AlsaCaptureConfig

        alsa = None
        if self.source.strip().partition(":")[0].lower() == SourceKind.ALSA.value:
            try:
                alsa = AlsaCaptureConfig(device=profile_device, rate=self.capture_rate,
                                         fallback_rate=self.fallback_rate, channels=self.channels, channel=self.channel)
            except ConfigError as exc:  # the rates and channels an ALSA device takes are narrower than a file's
                key = {"rate": "capture_rate"}.get(exc.key, exc.key)
                raise ConfigError(f"audio.{key}", f"{exc.problem} (for {SOURCE_KEY} {self.source!r})",
                                  config_file) from None
        return open_source(self.source, alsa=alsa, channel=self.channel, realtime=self.realtime, stop=stop,
                           config_file=config_file)


@dataclass(frozen=True)
class VadSection:
    kind: VadKind = VadKind.SILERO
    """``silero`` (energy gate + Silero VAD), ``energy`` (gate only) or ``none``."""
    model: Path | None = None
    """Silero VAD v5 ONNX file; required for ``silero``."""
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    """[vad.endpoint]: onset/offset thresholds, pre_roll_ms, min_speech_ms, min_silence_ms, matched_silence_ms,
    max_utterance_s."""
    gate: EnergyGateConfig = field(default_factory=EnergyGateConfig)
    """[vad.gate]: threshold_db, adaptive, noise_margin_db, hangover_ms, noise_window_s."""

    def __post_init__(self) -> None:
        if self.kind is VadKind.SILERO and self.model is None:
            raise ConfigError("model", "kind = 'silero' needs the path of a Silero VAD ONNX file")
        if self.kind is VadKind.NONE:
            raise ConfigError("kind", "the daemon needs a VAD to find utterances: use 'silero' or 'energy'")


@dataclass(frozen=True)
class AsrSection:
    model: Path | None = None
    """Model directory, a transducer (encoder/decoder/joiner[.int8].onnx + tokens.txt) or Whisper
    (NAME-encoder/NAME-decoder[.int8].onnx + NAME-tokens.txt); unset: no local ASR."""
    language: str | None = None
    """Multilingual Whisper models: the language code ("de", "fr" …); unset: detected per utterance."""
    method: SearchMethod = SearchMethod.MODIFIED_BEAM
    """``modified_beam_search`` (boosts the intents' vocabulary) or ``greedy_search``."""
    max_active_paths: int = 4
    """Beam width of modified beam search."""
    hotword_boost: float = 1.5
    """Score bonus per token of a template phrase (and, with ``template_decoding``, ranking bonus per
    token of a template sentence in the transducer's sentence beam)."""
    max_hotwords: int = 300
    """Most phrases boosted: list values (names, areas) first, then your templates' words, then built-in words."""
    tail_padding_ms: int = 800
    """Silence appended at each endpoint before the final result."""
    threads: int | None = None
    """ONNX Runtime threads for the recognizer; unset: the hardware profile's."""
    partials: bool = False
    """Publish partial transcripts on hermes/asr/partialTextCaptured."""
    template_decoding: bool = True
    """With intents, decode each utterance also constrained to the template sentences and take
    that text unless the free one is clearly more probable (see "Template-aware decoding"):
    Whisper by a second search, transducers by a sentence beam beside the free one in modified
    beam search (not greedy_search; partial results stay the free beam's but at a pause, see
    ``template_pause_margin``)."""
    template_margin: float = 3.0
    """Nats per token by which the free transcript must beat the template one to be kept (chosen on
    the development half of ``voiced bench commands``). Smaller: fewer false intents on speech that
    is no command, more missed commands (2.5: hifitts' one false intent gone, 143 instead of 145 of
    160 development commands right; see "Template-aware decoding")."""
    template_pause_margin: float = 1.5
    """At a pause in speech (Whisper: ``whisper_decode_at_pause``; transducers: the sentence beam's
    partial): a transcript that is no command nor the start of one is replaced by the template
    sentence when it is within this many nats per token (at most ``template_margin``), so a
    misheard name ("desk clamp") still ends after the matched silence; a hesitation ("turn on the,
    um") is far further and waits."""
    whisper_prompt_lists: bool = False
    """Whisper: decode each utterance as if the phrases of your lists (``[intents.lists]`` and list
    files: names, areas) had been said before it (Whisper's previous-text prompt), so a name is
    less often heard as a similar-sounding word; the phrases' last ~220 tokens are kept. Costs
    the prompt's tokens once per decode (see "Template-aware decoding"). Off by default: measured
    with ``voiced bench commands --prompt`` (2026-11-25) it raised read speech's WER (hifitts 9.08 ->
    10.59 %) and did not help template-aware decoding on the held-aside commands."""
    whisper_dereverb: bool = False
    """Whisper: remove late room reverberation from each utterance before decoding it (WPE, see
    ``voiced.audio.dereverb``), for a microphone across the room. About 15 ms of CPU per second of
    speech here. Off by default: measured with ``voiced bench commands --dereverb`` (2026-11-25) it
    lowered free transcription's word errors on the reverberant commands but not template-aware
    decoding's (held-aside right intents 86.7 -> 85.0 %); see "Dereverberation"."""
    whisper_partial_every_s: float = 0.0
    """Whisper: re-decode the growing utterance this often for partial results (each costs a decode
    of what was said so far). 0: no periodic partials. Transducers give partials every window anyway."""
    whisper_decode_at_pause: bool = True
    """Whisper with intent-aware endpointing ([vad.endpoint] matched_silence_ms): decode what was
    said at the first silent window of each pause in speech, so a whole command ends after the
    short matched silence without periodic partials. One decode per pause."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_active_paths <= 64:
            raise ConfigError("max_active_paths", f"must be within 1..64, got {self.max_active_paths}")
        if not 0 <= self.hotword_boost <= 100:
            raise ConfigError("hotword_boost", f"must be within 0..100, got {self.hotword_boost}")
        if not 0 <= self.tail_padding_ms <= 10_000:
            raise ConfigError("tail_padding_ms", f"must be within 0..10000, got {self.tail_padding_ms}")
        if self.threads is not None and not 1 <= self.threads <= 256:
            raise ConfigError("threads", f"must be within 1..256, got {self.threads}")
        if not 0 <= self.max_hotwords <= 10_000:
            raise ConfigError("max_hotwords", f"must be within 0..10000, got {self.max_hotwords}")
        if not 0 <= self.template_margin <= 1000:
            raise ConfigError("template_margin", f"must be within 0..1000, got {self.template_margin}")
        if not 0 <= self.template_pause_margin <= 1000:
            raise ConfigError("template_pause_margin", f"must be within 0..1000, got {self.template_pause_margin}")
        if not 0 <= self.whisper_partial_every_s <= 30:
            raise ConfigError("whisper_partial_every_s", f"must be within 0..30 s, got {self.whisper_partial_every_s}")


@dataclass(frozen=True)
class WakeSection:
    """openWakeWord models; used by ``voiced run --listen-mode wake``."""

    models: tuple[str, ...] = ()
    """Heads, by name in ``directory`` (e.g. "alexa_v0.1") or path; empty: no wake word."""
    directory: Path | None = None
    """Folder with melspectrogram.onnx, embedding_model.onnx and the named heads; frontend.stream.onnx
    (voiced-quantize wake-stream: the same scores for about a third of the CPU) is used when present."""
    threshold: float = 0.5
    """Score (0..1) that counts as a detection (0 false accepts at 0.3-0.7 on the real speech in ../shared)."""
    thresholds: dict[str, float] = field(default_factory=dict)
    """Per wake word (its label, e.g. "hey_jarvis_v0.1"), instead of ``threshold``."""
    patience: int = 1
    """Consecutive 80 ms frames at or over the threshold before a detection."""
    refractory_s: float = 2.0
    """After a detection the same wake word is ignored this long."""
    timeout_s: float = 5.0
    """After a wake word, the session ends (sessionEnded: timeout) if no speech starts within this."""
    arbitration_group: str | None = None
    """Sites of one group (a satellite per room) answer a wake word once: the one that heard it best
    (highest SNR, then score). Claims travel over MQTT; unset: every site answers its own detections."""
    arbitration_window_ms: int = 150
    """How long a site waits for the other sites' claims before deciding."""

    def __post_init__(self) -> None:
        group = self.arbitration_group
        if group is not None and (not group or set("/+#") & set(group)):
            raise ConfigError("arbitration_group", f"must be non-empty without '/', '+' or '#', got {group!r}")
        if not 10 <= self.arbitration_window_ms <= 5000:
            raise ConfigError("arbitration_window_ms", f"must be within 10..5000, got {self.arbitration_window_ms}")
        if not 0 < self.threshold <= 1:
            raise ConfigError("threshold", f"must be within (0, 1], got {self.threshold}")
        for label, value in self.thresholds.items():
            if not 0 < value <= 1:
                raise ConfigError(f"wake.thresholds.{label}", f"must be within (0, 1], got {value}")  # a dotted key is whole
        if self.directory is not None and self.directory.is_file():  # it would load a head as the front end
            raise ConfigError("directory", f"{self.directory} is a file: name the folder holding melspectrogram.onnx, "
                              "embedding_model.onnx and the heads")
        if not 1 <= self.patience <= 1000:
            raise ConfigError("patience", f"must be within 1..1000, got {self.patience}")
        if self.refractory_s < 0 or self.timeout_s <= 0:
            raise ConfigError("timeout_s" if self.timeout_s <= 0 else "refractory_s", "must be positive")
        if self.refractory_s > 3600 or self.timeout_s > 3600:  # a timer that large overflows a wait
            raise ConfigError("timeout_s" if self.timeout_s > 3600 else "refractory_s", "must be at most 3600 s")
        if self.models and self.directory is None:
            raise ConfigError("directory", "is required when models are given")


@dataclass(frozen=True)
class TtsSection:
    voice: Path | None = None
    """Piper voice: voice.onnx (with voice.onnx.json beside it) or a split encoder/decoder folder; unset: silent."""
    max_text_chars: int = 5000
    """Longer hermes/tts/say texts are refused (answered with sayFinished, nothing spoken)."""
    tail_ms: int = 300
    """After speaking, the microphone stays muted this long (echo and device latency)."""
    max_pending: int = 16
    """Requests queued behind the one playing; more are refused."""
    length_scale: float | None = None
    """Speaking slowness (1 the voice's pace, 1.2 slower); unset: the voice's ``inference.length_scale``."""
    noise_scale: float | None = None
    """Variation of the voice; 0 makes speech repeatable sample for sample. Unset: the voice's default."""
    noise_w: float | None = None
    """Variation of phoneme durations; 0 with ``noise_scale = 0``: repeatable speech. Unset: the voice's default."""
    release_after_phonemes: int | None = None
    """After a sentence of more phonemes than this, ONNX Runtime's arena gives back what it grew by
    for it (``VoiceSettings.release_after_phonemes``); 1: after every sentence (RSS level, more CPU);
    0: never. Unset: the hardware profile's (1 on pi-zero-2w and pi3, else 150)."""
    strip_markup: bool = True
    """Markdown marks (``**``, ``#``, bullets, link addresses), SSML/HTML tags and emoji are not read
    aloud, the words they mark are (an LLM's replies, Rhasspy's SSML); false: the text is spoken as it comes."""

    def __post_init__(self) -> None:
        self.options  # noqa: B018 - SynthesisOptions checks the three scales and names the bad one
        if self.max_text_chars < 1:
            raise ConfigError("max_text_chars", f"must be >= 1, got {self.max_text_chars}")
        if not 0 <= self.tail_ms <= 10_000:
            raise ConfigError("tail_ms", f"must be within 0..10000, got {self.tail_ms}")
        if self.max_pending < 1:
            raise ConfigError("max_pending", f"must be >= 1, got {self.max_pending}")
        if self.release_after_phonemes is not None and self.release_after_phonemes < 0:
            raise ConfigError("release_after_phonemes", f"must be >= 0, got {self.release_after_phonemes}")


    @property
    def options(self) -> SynthesisOptions:
        """What every request is synthesized with (Hermes tts/say, Wyoming synthesize)."""
        return SynthesisOptions(length_scale=self.length_scale, noise_scale=self.noise_scale, noise_w=self.noise_w)


@dataclass(frozen=True)
class HardwareSection:
    profile: str = "auto"
    """``pi-zero-2w``, ``pi3``, ``pi4``, ``pi5``, ``x86-64``, a profile TOML path, or ``auto`` (from the device tree)."""


@dataclass(frozen=True)
class DaemonSection:
    state_dir: Path | None = None
    """Where the outbox lives; unset: $STATE_DIRECTORY (systemd), else $XDG_STATE_HOME/voiced."""
    runtime_dir: Path | None = None
    """Where messages held in memory while the state directory's disk is full or read-only are kept
    too, so that a restart of the daemon does not lose them: a RAM-backed directory on another disk;
    unset: $RUNTIME_DIRECTORY (systemd's RuntimeDirectory=), else nowhere (memory only)."""
    stats_interval_s: float = 60.0
    """Seconds between stats messages on voiced/<siteId>/stats."""

    def __post_init__(self) -> None:
        if not 0 < self.stats_interval_s <= 86_400:  # larger ones overflow the wait between messages
            raise ConfigError("stats_interval_s", f"must be within (0, 86400], got {self.stats_interval_s}")

    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        if os.environ.get("STATE_DIRECTORY"):
            return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(base) / "voiced"

    def resolved_runtime_dir(self) -> Path | None:
        if self.runtime_dir is not None:
            return self.runtime_dir
        if os.environ.get("RUNTIME_DIRECTORY"):
            return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
        return None


@dataclass(frozen=True)
class Config:
    """The whole configuration file."""

    site: SiteSection = field(default_factory=SiteSection)
    audio: AudioSection = field(default_factory=AudioSection)
    vad: VadSection = field(default_factory=lambda: VadSection(kind=VadKind.ENERGY))
    asr: AsrSection = field(default_factory=AsrSection)
    intents: IntentsSection = field(default_factory=IntentsSection)
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    daemon: DaemonSection = field(default_factory=DaemonSection)
    hardware: HardwareSection = field(default_factory=HardwareSection)
    llm: LlmConfig = field(default_factory=LlmConfig)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    tts: TtsSection = field(default_factory=TtsSection)
    playback: PlaybackConfig = field(default_factory=PlaybackConfig)
    wake: WakeSection = field(default_factory=WakeSection)
    wyoming: WyomingConfig = field(default_factory=WyomingConfig)
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    path: Path | None = None
    """The file this came from (for messages and relative paths)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: Path | None = None) -> Config:
        where = str(source) if source else None
        sections: dict[str, Any] = {}
        hints = {"site": SiteSection, "audio": AudioSection, "vad": VadSection, "asr": AsrSection,
                 "intents": IntentsSection, "mqtt": MqttConfig, "daemon": DaemonSection,
                 "hardware": HardwareSection, "llm": LlmConfig,
                 "cloud": CloudConfig, "tts": TtsSection, "playback": PlaybackConfig, "wake": WakeSection,
                 "wyoming": WyomingConfig, "feedback": FeedbackConfig}
        for key, value in data.items():
            if key not in hints:
                raise ConfigError(key, f"unknown section (known: {', '.join(hints)})", where)
            if key == "mqtt" and isinstance(value, dict):
                value = _relative_files(value, source.parent if source else None)
            if key == "vad" and isinstance(value, dict) and "kind" not in value:
                value = {"kind": VadKind.ENERGY.value if "model" not in value else VadKind.SILERO.value, **value}
            sections[key] = section_from_dict(hints[key], value, key, where)
        config = cls(**sections, path=source)
        return config._resolved(data.get("mqtt", {}))

    @classmethod
    def from_file(cls, path: str | Path) -> Config:
        path = Path(path)
        return cls.from_dict(read_toml(path, "config"), path)

    def _resolved(self, mqtt_raw: dict[str, Any]) -> Config:
        """Fill defaults that depend on other keys and make paths relative to the file."""
        base = self.path.parent if self.path else Path.cwd()

        def rel(p: Path | None) -> Path | None:
            return p if p is None or p.is_absolute() else base / p

        mqtt = self.mqtt
        if "availability_topic" not in mqtt_raw:
            mqtt = replace(mqtt, availability_topic=f"voiced/{self.site.id}/availability")
        def rel_all(paths: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(p if Path(p).is_absolute() else str(base / p) for p in paths)

        source = source_relative_to(self.audio.source, base)
        profile = self.hardware.profile
        if is_profile_path(profile):
            profile = str(rel(Path(profile).expanduser()))
        heads = tuple(str(rel(Path(h))) if is_head_path(h) else h for h in self.wake.models)

        return replace(
            self,
            vad=replace(self.vad, model=rel(self.vad.model)),
            asr=replace(self.asr, model=rel(self.asr.model)),
            intents=replace(self.intents, templates=rel_all(self.intents.templates),
                            list_files=rel_all(self.intents.list_files)),
            mqtt=mqtt,
            daemon=replace(self.daemon, state_dir=rel(self.daemon.state_dir),
                           runtime_dir=rel(self.daemon.runtime_dir)),
            llm=self.llm.relative_to(base),
            tts=replace(self.tts, voice=rel(self.tts.voice)),
            audio=replace(self.audio, source=source),
            hardware=replace(self.hardware, profile=profile),
            wake=replace(self.wake, directory=rel(self.wake.directory), models=heads),
            cloud=replace(self.cloud, api_key_file=rel(self.cloud.api_key_file), ca_file=rel(self.cloud.ca_file)),
            wyoming=replace(self.wyoming, timer_finished_wav=rel(self.wyoming.timer_finished_wav)),
            feedback=replace(self.feedback, wake_wav=rel(self.feedback.wake_wav), heard_wav=rel(self.feedback.heard_wav)),
        )

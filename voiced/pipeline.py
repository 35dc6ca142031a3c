"""The daemon: capture → listen (VAD + ASR) → intent → MQTT, and MQTT → actions.

Stages run on named threads and talk through bounded queues (DESIGN.md, "Threads"):

- ``capture``: audio source → 10 ms frames → windows → ``windows`` queue (drop oldest, counted);
- ``listen``: windows → endpointer + recognizer → Hermes ASR messages → ``utterances`` queue;
- ``intent``: transcripts and ``hermes/nlu/query`` texts → hassil → Hermes NLU messages;
- ``stats``: a periodic ``voiced/<siteId>/stats`` message;
- paho's network thread delivers incoming messages to the handlers here, which only parse,
  check and enqueue: they never block the network loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
from dataclasses import dataclass
from enum import Enum

import numpy as np

from voiced.asr.loader import SpeechRecognizer, load_recognizer
from voiced.asr.recognizer import RecognizerConfig
from voiced.asr.whisper import WhisperConfig, WhisperRecognizer
from voiced.asr.whisper_templates import TemplateDecoding
from voiced.audio.frames import Windower
from voiced.audio.source import AudioSource, NullSource, WavSource, open_source
from voiced.cloud import CloudRouter
from voiced.cloud.pool import CloudResult
from voiced.config import Config
from voiced.errors import AudioError, ConfigError
from voiced.intents import Intent, IntentRecognizer
from voiced.listener import Listener, ListenEvent, ListenEventType
from voiced.llm import LlmFallback
from voiced.mqtt import hermes
from voiced.mqtt.client import MqttClient
from voiced.mqtt.discovery import (
    Discovery,
    DiscoveryConfig,
    intent_event,
    transcript_state,
    wake_event,
)
from voiced.mqtt.outbox import Outbox, OutboxConfig
from voiced.runtime.hardware import OnnxRole, Stage, select_profile
from voiced.runtime.notify import SystemdNotifier
from voiced.runtime.onnx import SessionOptions
from voiced.runtime.supervisor import StageContext, Supervisor
from voiced.sentencespace import SentenceSpace
from voiced.stages import Counters, DropOldestQueue
from voiced.tts import (
    AlsaPlayer,
    PiperVoice,
    Speaker,
    SpeakerConfig,
    SpeechRequest,
    VoiceSettings,
)
from voiced.tts.audio import wav_to_chunk
from voiced.tts.requests import RequestKind
from voiced.vad import Endpointer, SileroVad, VadKind, create_detector
from voiced.wake import Detection, WakeConfig, WakeDetector, WakeModel

__all__ = ["Daemon", "ListenMode"]

log = logging.getLogger(__name__)

POLL_S = 0.2
"""How often an idle stage wakes to check for stop (and beat its heartbeat)."""


class ListenMode(Enum):
    ALWAYS = "always"
    """Every utterance the VAD finds is transcribed."""
    ON_REQUEST = "on_request"
    """Only utterances inside a hermes/asr/startListening session are transcribed."""
    WAKE = "wake"
    """Only the utterance after a wake word ([wake] models) is transcribed; VAD and ASR sleep until then."""


class _EndOfAudio:
    """Queued after the last window of a finite source (a file)."""

    def __init__(self, end: float) -> None:
        self.end = end


@dataclass(frozen=True)
class Utterance:
    """Text for the intent stage, from speech or from hermes/nlu/query."""

    text: str
    session_id: str | None
    confidence: float = 1.0
    tokens: tuple[hermes.AsrToken, ...] | None = None
    request_id: str | None = None
    intent_filter: tuple[str, ...] | None = None
    custom_data: str | None = None
    from_speech: bool = True


class Daemon:
    """Owns the models, the MQTT client and the stage threads."""

    def __init__(self, config: Config, mode: ListenMode = ListenMode.ALWAYS,
                 notifier: SystemdNotifier | None = None) -> None:
        self.config = config
        self.mode = mode
        self.site_id = config.site.id
        self.counters = Counters()
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._muted = False
        self._session: hermes.StartListening | None = None  # an open startListening request
        self._utterance_session: str | None = None  # sessionId of the utterance being heard
        self._speaking = False  # set by the speaker: capture is ignored meanwhile
        self._wake_enabled = True  # hermes/hotword/toggleOff clears it
        self._wake_session: str | None = None  # the session a wake word opened, until its utterance ends
        self._wake_until = 0.0  # stream time by which speech must start after the wake word
        self.profile = select_profile(config.hardware.profile)
        self.notifier = notifier or SystemdNotifier()
        self.supervisor = Supervisor(notifier=self.notifier, status=self.status_line)
        self._load_models()
        self.windows: DropOldestQueue[object] = DropOldestQueue(config.audio.queue_windows, self.counters, "windows_dropped")
        self.utterances: DropOldestQueue[Utterance] = DropOldestQueue(100, self.counters, "utterances_dropped")
        state_dir = config.daemon.resolved_state_dir()
        state_dir.mkdir(parents=True, exist_ok=True)
        self.client = MqttClient(config.mqtt, Outbox(OutboxConfig(path=str(state_dir / "outbox.sqlite3"))))
        self.discovery = Discovery(
            self.client,
            DiscoveryConfig(site_id=self.site_id, availability_topic=config.mqtt.availability_topic),
            self.intents.intent_names,
            wake_words=self.wake.labels if self.wake is not None else (),
        )
        self.source: AudioSource = open_source(
            config.audio.source, channel=config.audio.channel, realtime=config.audio.realtime,
            stop=self.stop_event, config_file=str(config.path) if config.path else None,
        )

    # -- start-up --------------------------------------------------------------------------

    def _load_models(self) -> None:
        """Everything heavy happens here, once, before READY."""
        cfg = self.config
        self.intents = IntentRecognizer.from_section(cfg.intents, str(cfg.path) if cfg.path else None)
        # The LLM runs in a worker process (its binding holds the GIL); loaded lazily unless preload.
        self.llm = LlmFallback.from_recognizer(cfg.llm, self.intents) if cfg.llm.enabled else None
        if self.llm is not None and cfg.llm.preload:
            self.llm.preload()
        # Local first: the cloud (off by default) is consulted only after the local path and a
        # reachability probe; prepare() touches no network and never raises.
        self.cloud = CloudRouter.from_recognizer(cfg.cloud, self.intents, counters=self.counters)
        self.cloud.prepare()
        self.recognizer: SpeechRecognizer | None = None
        self.commands: SentenceSpace | None = None
        if cfg.asr.model is not None:
            session = self.profile.session_options(OnnxRole.ASR)
            if cfg.asr.threads is not None:
                session = SessionOptions(threads=cfg.asr.threads)
            self.recognizer = load_recognizer(cfg.asr.model, RecognizerConfig(
                method=cfg.asr.method, max_active_paths=cfg.asr.max_active_paths,
                hotwords=tuple(self.intents.hotwords(cfg.asr.max_hotwords)), hotword_boost=cfg.asr.hotword_boost,
                tail_padding_ms=cfg.asr.tail_padding_ms, threads=session.threads,
            ), WhisperConfig(language=cfg.asr.language, threads=session.threads,
                             partial_every_s=cfg.asr.whisper_partial_every_s), session)
        self._use_sentence_space(self.intents)
        self.silero = None
        if cfg.vad.kind is VadKind.SILERO:
            self.silero = SileroVad.load(cfg.vad.model, self.profile.session_options(OnnxRole.VAD))
        self.wake: WakeDetector | None = None
        if cfg.wake.models and cfg.wake.directory is not None:
            self.wake = WakeDetector(
                WakeModel.load(cfg.wake.directory, list(cfg.wake.models), options=self.profile.session_options(OnnxRole.VAD)),
                WakeConfig(threshold=cfg.wake.threshold, patience=cfg.wake.patience, refractory_s=cfg.wake.refractory_s))
            self.wake_stream = self.wake.create_stream()
        if self.mode is ListenMode.WAKE and self.wake is None:
            raise ConfigError("wake.models", "listen mode 'wake' needs at least one wake word model", str(cfg.path))
        self.listener = self._new_listener()
        self.speaker: Speaker | None = None
        if cfg.tts.voice is not None:
            voice = PiperVoice.load(cfg.tts.voice, settings=VoiceSettings(
                session=self.profile.session_options(OnnxRole.TTS), max_text_chars=cfg.tts.max_text_chars))
            self.speaker = Speaker(voice, AlsaPlayer(cfg.playback), SpeakerConfig(cfg.tts.tail_ms, cfg.tts.max_pending),
                                   on_speaking=self._on_speaking, on_finished=self._on_spoken)
        self._warm_up()

    def _warm_up(self) -> None:
        """One second of silence through VAD and ASR: first-call allocations happen before READY."""
        list(self._new_listener().events([np.zeros(16_000, np.float32)]))
        if self.recognizer is not None:
            stream = self.recognizer.create_stream()
            stream.accept_waveform(np.zeros(16_000, np.float32))
            self.recognizer.finish(stream)

    def _use_sentence_space(self, intents: IntentRecognizer) -> None:
        """Compile the templates' sentences once (at load and reload) for what uses them: intent-aware
        endpointing and template-aware Whisper decoding."""
        cfg = self.config
        whisper = isinstance(self.recognizer, WhisperRecognizer) and cfg.asr.template_decoding
        early = self.recognizer is not None and cfg.vad.endpoint.matched_silence_ms < cfg.vad.endpoint.min_silence_ms
        self.commands = intents.sentence_space() if intents.enabled and (whisper or early) else None
        if isinstance(self.recognizer, WhisperRecognizer):
            self.recognizer.use_templates(self.commands if whisper else None,
                                          TemplateDecoding(margin=cfg.asr.template_margin))

    def _new_listener(self) -> Listener:
        cfg = self.config.vad
        endpointer = Endpointer(cfg.endpoint, create_detector(cfg.kind, self.silero, cfg.gate))
        keep_audio = self.config.cloud.enabled and self.config.cloud.asr  # audio leaves only when asked
        return Listener(self.recognizer, endpointer, self.config.audio.window_frames, keep_audio,
                        commands=self.commands)

    def start(self) -> None:
        """Connect (without waiting for the broker), open the source, start the stage threads."""
        c = self.client
        c.subscribe(hermes.Topic.NLU_QUERY, self._on_nlu_query)
        c.subscribe(hermes.Topic.START_LISTENING, self._on_start_listening)
        c.subscribe(hermes.Topic.STOP_LISTENING, self._on_stop_listening)
        c.subscribe(hermes.Topic.ASR_TOGGLE_ON, self._on_toggle)
        c.subscribe(hermes.Topic.ASR_TOGGLE_OFF, self._on_toggle)
        if self.wake is not None:
            c.subscribe(hermes.Topic.HOTWORD_TOGGLE_ON, self._on_hotword_toggle)
            c.subscribe(hermes.Topic.HOTWORD_TOGGLE_OFF, self._on_hotword_toggle)
        if self.speaker is not None:
            c.subscribe(hermes.Topic.TTS_SAY, self._on_say)
            c.subscribe(f"hermes/audioServer/{self.site_id}/playBytes/+", self._on_play_bytes)
        c.connect()
        self.source.open()
        p, sup = self.profile, self.supervisor
        sup.add_stage(Stage.CAPTURE, self._capture, p.cpus(Stage.CAPTURE), realtime_priority=p.realtime_priority)
        sup.add_stage(Stage.LISTEN, self._listen, p.cpus(Stage.LISTEN))
        sup.add_stage(Stage.INTENT, self._intent, p.cpus(Stage.INTENT))
        sup.add_stage("stats", self._stats, p.cpus(Stage.INTENT))
        if self.speaker is not None:
            speaker = self.speaker
            sup.add_stage(Stage.SPEAK, lambda ctx: speaker.run(ctx.stop, ctx.beat), p.cpus(Stage.SPEAK))
        sup.start()
        if self.llm is not None:
            self.llm.start()  # loads in the background, never delaying READY

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the stages, close the source, flush the outbox while the broker is there."""
        self.stop_event.set()
        self.source.stop()
        clean = self.supervisor.stop(timeout * 0.6)
        self.source.close()
        if self.speaker is not None:
            self.speaker.close(timeout * 0.2)
        if self.llm is not None:
            self.llm.close()
        self.cloud.close()
        self.client.close(drain_timeout=timeout * 0.4)
        return clean

    def status_line(self) -> str:
        """What STATUS= shows: ``listening on alsa:hw:1,0 · mqtt connected · 0 dropped``."""
        mqtt = "mqtt connected" if self.client.connected else "mqtt offline"
        dropped = self.counters.get("windows_dropped") + self.counters.get("utterances_dropped")
        state = "muted" if self._muted else "listening"
        return f"{state} on {self.source.describe()} · {mqtt} · {dropped} dropped"

    def reload(self, config: Config) -> None:
        """SIGHUP: new intent templates (and the discovery that lists them) without touching audio."""
        intents = IntentRecognizer.from_section(config.intents, str(config.path) if config.path else None)
        self.intents = intents  # one reference swap: the intent stage sees old or new, never half
        self._use_sentence_space(intents)
        self.listener.set_commands(self.commands)  # from the next utterance on
        if self.llm is not None:
            self.llm.set_intents(intents)
        self.cloud.set_intents(intents)
        self.discovery.set_intent_names(intents.intent_names)
        if dataclasses.replace(config, intents=self.config.intents) != self.config:
            log.warning("reload applies [intents] only; restart voiced for the other changes")
        log.info("reloaded %d intents", len(intents.intent_names))

    # -- stages ----------------------------------------------------------------------------

    def _capture(self, ctx: StageContext) -> None:
        windower = Windower(self.config.audio.window_frames)
        # A file not paced to the clock goes as fast as the pipeline: wait for room, drop nothing.
        block = isinstance(self.source, WavSource) and not self.config.audio.realtime
        if isinstance(self.source, NullSource):  # no audio at all: idle, yet alive for the watchdog
            while not ctx.wait(POLL_S):
                ctx.beat()
            return
        end = 0.0
        for chunk in self.source.chunks():
            ctx.beat()
            for window in windower.push(chunk):
                end = window.end
                self.windows.put(window, block=block, stop=ctx.stop)
            if ctx.stop.is_set():
                return
        for window in windower.flush():
            end = window.end
            self.windows.put(window, block=block, stop=ctx.stop)
        if not ctx.stop.is_set():
            self.windows.put(_EndOfAudio(end), block=block, stop=ctx.stop)
            log.info("audio source %s ended after %.1f s; idle from now on", self.source.describe(), end)
        while not ctx.wait(POLL_S):  # idle, yet alive for the watchdog
            ctx.beat()

    def _listen(self, ctx: StageContext) -> None:
        expected: float | None = None  # start of the next window if none was dropped or muted
        while not ctx.stop.is_set():
            ctx.beat()
            item = self.windows.get(POLL_S)
            if item is None:
                continue
            events: list[ListenEvent] = []
            if isinstance(item, _EndOfAudio):
                events = list(self.listener.finish(item.end))
                expected = None
            elif self._muted or self._speaking:
                # half-duplex: while we speak (and a tail after) the microphone hears ourselves
                self.counters.add("windows_muted")
                continue
            else:
                if expected is not None and abs(item.start - expected) > 1e-6:
                    # audio is missing (dropped while we lagged, or muted): close what was open
                    events = list(self.listener.finish(expected))
                self.counters.add("windows")
                if self.wake is not None and self._wake_enabled:
                    for detection in self.wake_stream.accept_waveform(item.samples):
                        self._on_wake(detection, item.end)
                if self.mode is not ListenMode.WAKE or self._listening_after_wake(item.end):
                    events += self.listener.process(item)
                expected = item.end
            for ev in events:
                self._on_listen_event(ev)

    def _intent(self, ctx: StageContext) -> None:
        while not ctx.stop.is_set():
            ctx.beat()
            utt = self.utterances.get(POLL_S)
            if utt is not None:
                self._recognize(utt)

    def _stats(self, ctx: StageContext) -> None:
        topic = f"voiced/{self.site_id}/stats"
        waited = 0.0
        while not ctx.wait(POLL_S):
            ctx.beat()
            waited += POLL_S
            if waited >= self.config.daemon.stats_interval_s:
                waited = 0.0
                self.client.publish(topic, json.dumps(self.stats()))

    def stats(self) -> dict[str, object]:
        return {
            "siteId": self.site_id,
            "counters": self.counters.snapshot(),
            "mqtt": self.client.stats(),
            "source": self.source.describe(),
            "queued_windows": len(self.windows),
            "llm": self.llm.counts() if self.llm is not None else None,
            "cloud": self.cloud.stats(),
            "stages": {i.name: {"restarts": i.restarts, "failures": i.failures, "stalled": i.stalled}
                       for i in self.supervisor.stages()},
        }

    # -- listen events → Hermes ASR ----------------------------------------------------------

    def _on_listen_event(self, ev: ListenEvent) -> None:
        topics = self.discovery.topics
        if ev.type is ListenEventType.SPEECH_START:
            with self._lock:
                request = self._session
                if self.mode is ListenMode.ON_REQUEST and request is None:
                    self._utterance_session = None
                    return
                if self.mode is ListenMode.WAKE:
                    self._utterance_session = self._wake_session
                    if self._wake_session is None:
                        return
                else:
                    self._utterance_session = (request.session_id if request and request.session_id
                                               else str(uuid.uuid4()))
            self.counters.add("utterances")
            self.client.publish(topics.listening, "ON", retain=True)
            msg = hermes.session_started(self.site_id, self._utterance_session)
            self.client.publish(msg.topic, msg.json())
            return
        session = self._utterance_session
        if session is None:
            return
        if ev.type is ListenEventType.PARTIAL and self.config.asr.partials:
            msg = hermes.partial_text_captured(ev.text, ev.result.confidence, ev.end - ev.start, self.site_id, session)
            self.client.publish(msg.topic, msg.json())
        elif ev.type is ListenEventType.SPEECH_END:
            self.client.publish(topics.listening, "OFF", retain=True)
            if self.mode is ListenMode.WAKE:
                self._wake_session = None  # one utterance per wake word
        elif ev.type is ListenEventType.FINAL:
            self._on_final(ev, session)

    def _on_final(self, ev: ListenEvent, session: str) -> None:
        with self._lock:
            request = self._session
            if request is not None and request.stop_on_silence:
                self._session = None
        intent_filter = request.intent_filter if request else None
        confidence = ev.result.confidence if ev.result is not None else None
        if ev.audio is not None and self.cloud.should_use_cloud_asr(self.recognizer is not None, confidence):
            if self.recognizer is None:  # nothing local to publish: the cloud's text is the transcript
                self.cloud.submit_asr(ev.audio, lambda r: self._on_cloud_text(r, ev, session, intent_filter),
                                      language=self.intents.language)
                return
            # a local transcript exists: it is published now; the cloud may only correct it later
            if self.config.cloud.publish_corrections:
                self.cloud.submit_asr(ev.audio, lambda r: self._on_cloud_correction(r, ev, session),
                                      language=self.intents.language)
        self._publish_transcript(ev, ev.text, session, confidence or 0.0, intent_filter)

    def _on_cloud_text(self, result: CloudResult[str], ev: ListenEvent, session: str,
                       intent_filter: tuple[str, ...] | None) -> None:
        """On a cloud worker thread: the cloud transcript of an utterance with no local one."""
        text = (result.value or "").strip() if result.ok else ""
        if not result.ok:
            log.warning("cloud ASR gave no transcript (%s)", result.outcome.value)
        self._publish_transcript(ev, text, session, 1.0, intent_filter)

    def _on_cloud_correction(self, result: CloudResult[str], ev: ListenEvent, session: str) -> None:
        if result.ok and result.value and result.value.strip() != ev.text.strip():
            msg = hermes.text_captured(result.value.strip(), 1.0, ev.end - ev.start, self.site_id, session)
            self.client.publish(msg.topic, msg.json())
            self.counters.add("cloud_corrections")

    def _publish_transcript(self, ev: ListenEvent, text: str, session: str, confidence: float,
                            intent_filter: tuple[str, ...] | None) -> None:
        text = text.strip()
        if not text:
            self.counters.add("empty_transcripts")
            self._end_session(session, hermes.TerminationReason.INTENT_NOT_RECOGNIZED)
            return
        self.counters.add("transcripts")
        tokens = tuple(_word_tokens(ev)) if ev.result is not None and text == ev.text.strip() else None
        msg = hermes.text_captured(text, confidence, ev.end - ev.start, self.site_id, session, tokens=tokens)
        self.client.publish(msg.topic, msg.json())
        state, attributes = transcript_state(text, {"siteId": self.site_id, "sessionId": session, "start": ev.start, "end": ev.end})
        topics = self.discovery.topics
        self.client.publish(topics.transcript, state, retain=True)
        self.client.publish(topics.transcript_attributes, attributes, retain=True)
        self.utterances.put(Utterance(
            text=text, session_id=session, confidence=confidence, tokens=tokens, intent_filter=intent_filter,
        ))

    # -- intents -----------------------------------------------------------------------------

    def _recognize(self, utt: Utterance) -> None:
        intent = self.intents.recognize(utt.text)
        if intent is not None and utt.intent_filter is not None and intent.name not in utt.intent_filter:
            intent = None
        if intent is None and self.llm is not None:
            # bounded by llm.time_budget_s; whatever the model says is validated against the schema
            intent = self.llm.recognize(utt.text, intent_filter=utt.intent_filter)
            self.counters.add("llm_intents" if intent is not None else "llm_misses")
        if self.cloud.should_use_cloud_intent(intent):
            # The answer comes on a cloud thread within the cloud's budget; this stage moves on.
            self.cloud.submit_intent(utt.text, lambda r: self._publish_intent(utt, r.value if r.ok else intent),
                                     intent_filter=utt.intent_filter)
            return
        self._publish_intent(utt, intent)

    def _publish_intent(self, utt: Utterance, intent: Intent | None) -> None:
        if intent is None:
            self.counters.add("intents_not_recognized")
            msg = hermes.intent_not_recognized(utt.text, self.site_id, utt.session_id, utt.request_id, utt.custom_data)
            self.client.publish(msg.topic, msg.json())
            if utt.from_speech:
                self._end_session(utt.session_id, hermes.TerminationReason.INTENT_NOT_RECOGNIZED)
            return
        self.counters.add("intents")
        msg = hermes.nlu_intent(intent, self.site_id, utt.session_id, utt.request_id, utt.custom_data,
                                asr_tokens=utt.tokens, asr_confidence=utt.confidence if utt.from_speech else None)
        self.client.publish(msg.topic, msg.json())
        self.client.publish(self.discovery.topics.intent, intent_event(intent, self.site_id))
        if utt.from_speech:
            self._end_session(utt.session_id, hermes.TerminationReason.NOMINAL)

    def _end_session(self, session: str | None, reason: hermes.TerminationReason) -> None:
        if session is not None:
            msg = hermes.session_ended(self.site_id, session, reason)
            self.client.publish(msg.topic, msg.json())

    # -- MQTT → actions (on paho's thread: parse, check, enqueue) ---------------------------

    def _on_nlu_query(self, topic: str, payload: bytes) -> None:
        query = hermes.parse_nlu_query(payload)  # MalformedMessage is logged and counted by the client
        if not hermes.for_site(query, self.site_id):
            return
        self.counters.add("queries")
        self.utterances.put(Utterance(
            text=query.input, session_id=query.session_id, request_id=query.id,
            intent_filter=query.intent_filter, custom_data=query.custom_data, from_speech=False,
        ))

    def _on_start_listening(self, topic: str, payload: bytes) -> None:
        request = hermes.parse_start_listening(payload)
        if hermes.for_site(request, self.site_id):
            with self._lock:
                self._session = request

    def _on_stop_listening(self, topic: str, payload: bytes) -> None:
        request = hermes.parse_stop_listening(payload)
        if hermes.for_site(request, self.site_id):
            with self._lock:
                self._session = None

    def _on_toggle(self, topic: str, payload: bytes) -> None:
        toggle = hermes.parse_toggle(payload, enabled=topic == hermes.Topic.ASR_TOGGLE_ON)
        if hermes.for_site(toggle, self.site_id):
            self._muted = not toggle.enabled
            log.info("ASR %s (%s)", "on" if toggle.enabled else "off", toggle.reason or "no reason given")


    # -- wake words ------------------------------------------------------------------------

    def _on_wake(self, detection: Detection, now: float) -> None:
        """On the listen thread: announce the wake word; in wake mode, listen for what follows."""
        session = str(uuid.uuid4())
        self.counters.add("wake_detections")
        msg = hermes.hotword_detected(detection.label, self.site_id, session, detection.score,
                                      self.config.wake.threshold)
        self.client.publish(msg.topic, msg.json())
        self.client.publish(self.discovery.topics.wake, wake_event(detection.label, detection.score, session, self.site_id))
        if self.mode is ListenMode.WAKE:
            self.listener = self._new_listener()  # a fresh endpointer: the wake word is not part of the utterance
            self._wake_session = session
            self._wake_until = now + self.config.wake.timeout_s

    def _listening_after_wake(self, now: float) -> bool:
        """Wake mode: feed VAD and ASR only between a wake word and the end of the utterance (or the timeout)."""
        if self._wake_session is None:
            return False
        if self.listener.active or now <= self._wake_until:
            return True
        self.counters.add("wake_timeouts")
        self._end_session(self._wake_session, hermes.TerminationReason.TIMEOUT)
        self._wake_session = None
        return False

    def _on_hotword_toggle(self, topic: str, payload: bytes) -> None:
        toggle = hermes.parse_toggle(payload, enabled=topic == hermes.Topic.HOTWORD_TOGGLE_ON)
        if hermes.for_site(toggle, self.site_id):
            self._wake_enabled = toggle.enabled
            log.info("wake word %s (%s)", "on" if toggle.enabled else "off", toggle.reason or "no reason given")

    # -- speech out (hermes/tts/say, playBytes) ---------------------------------------------

    def _on_say(self, topic: str, payload: bytes) -> None:
        say = hermes.parse_tts_say(payload)
        if hermes.for_site(say, self.site_id) and self.speaker is not None:
            # bad text is not an exception: the request finishes FAILED and still gets sayFinished
            self.speaker.say(say.text, volume=say.volume if say.volume is not None else 1.0, request_id=say.id, tag=say)

    def _on_play_bytes(self, topic: str, payload: bytes) -> None:
        site_request = hermes.site_and_request_from_play_bytes(topic)
        if site_request is None or self.speaker is None:
            return
        site, request_id = site_request
        try:
            chunk = wav_to_chunk(payload)
        except AudioError as exc:
            log.warning("playBytes %s: %s", request_id, exc)
            self.counters.add("malformed_play_bytes")
            msg = hermes.play_finished(site, request_id)
            self.client.publish(msg.topic, msg.json())
            return
        self.speaker.play(chunk, request_id=request_id)

    def _on_spoken(self, request: SpeechRequest) -> None:
        """On the speak thread: answer every request, spoken or not."""
        if request.kind is RequestKind.SAY:
            session = getattr(request.tag, "session_id", None)
            msg = hermes.say_finished(self.site_id, request.id, session)
        else:
            msg = hermes.play_finished(self.site_id, request.id)
        self.client.publish(msg.topic, msg.json())
        self.counters.add(f"spoken_{request.result.outcome.value}" if request.result else "spoken")

    def _on_speaking(self, speaking: bool) -> None:
        self._speaking = speaking
        self.client.publish(self.discovery.topics.speaking, "ON" if speaking else "OFF", retain=True)


def _word_tokens(ev: ListenEvent) -> list[hermes.AsrToken]:
    """Words of the final text with their stream times, from the recognizer's token times."""
    result = ev.result
    words: list[hermes.AsrToken] = []
    if result is None:
        return words
    starts: list[float] = []
    for sym, t in zip(result.tokens, result.timestamps):
        if sym.startswith(" ") or not starts:
            starts.append(ev.audio_start + t)
    text, pos = ev.text, 0
    for i, word in enumerate(text.split()):
        begin = text.index(word, pos)
        pos = begin + len(word)
        start = starts[i] if i < len(starts) else ev.end
        end = starts[i + 1] if i + 1 < len(starts) else ev.end
        words.append(hermes.AsrToken(word, result.confidence, begin, pos, round(start, 3), round(max(start, end), 3)))
    return words

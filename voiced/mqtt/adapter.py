"""The Hermes/MQTT adapter: core events → Hermes messages and HA discovery state; MQTT → core commands.

Incoming messages arrive on paho's network thread: the handlers here only parse, check the
siteId and hand the core a command (which enqueues); they never block the network loop.
Outgoing messages go through the client's durable outbox, so none is lost while the broker
is away.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from voiced import __version__
from voiced.audio.wav import encode_wav
from voiced.config import Config
from voiced.core.engine import Core
from voiced.core.events import (
    AudioCaptured,
    ControlsChanged,
    CoreEvent,
    IntentNotRecognized,
    IntentRecognized,
    ListenMode,
    ListenRequest,
    PartialTranscript,
    SessionEnded,
    SessionReason,
    SpeakingChanged,
    SpeechEnded,
    SpeechFinished,
    SpeechStarted,
    Transcript,
    TranscriptCorrected,
    Utterance,
    WakeDetected,
    Word,
)
from voiced.errors import AudioError
from voiced.mqtt import hermes
from voiced.mqtt.arbitration import MqttArbiter
from voiced.mqtt.client import MqttClient
from voiced.mqtt.discovery import (
    BUTTON_PRESS,
    SWITCH_OFF,
    SWITCH_ON,
    Discovery,
    DiscoveryConfig,
    intent_event,
    transcript_state,
    wake_event,
)
from voiced.mqtt.hermes_state import OwnSessions, SessionTags, StartedSessions, ToggleReasons
from voiced.mqtt.outbox import HELD_FILE, OUTBOX_FILE, Outbox, OutboxConfig
from voiced.runtime.hardware import Stage
from voiced.runtime.supervisor import StageContext
from voiced.tts.audio import wav_to_chunk
from voiced.tts.requests import RequestKind
from voiced.wake.sensitivity import Sensitivity

__all__ = ["HermesAdapter"]

log = logging.getLogger(__name__)

_REASONS = {
    SessionReason.NOMINAL: hermes.TerminationReason.NOMINAL,
    SessionReason.INTENT_NOT_RECOGNIZED: hermes.TerminationReason.INTENT_NOT_RECOGNIZED,
    SessionReason.TIMEOUT: hermes.TerminationReason.TIMEOUT,
}


class _PlayBytes:
    """Tag of the play requests this adapter made (answered with playFinished)."""


_PLAY_BYTES = _PlayBytes()


class _Notify:
    """Tag of the say requests Home Assistant's notify entity made (nobody to answer: failures are logged)."""


_NOTIFY = _Notify()


MAX_QUEUED_SESSIONS = 8
"""Apps' questions waiting for the open session; more are dropped (logged, counted)."""


@dataclass(frozen=True)
class _Turn:
    """Tag of what an app's startSession / continueSession / endSession has said: what follows it."""

    session_id: str
    listen: ListenRequest | None = None
    """Heard next (an action, a continueSession); None: nothing."""
    end: bool = False
    """The session ends once it is said (a notification)."""


class HermesAdapter:
    """Rhasspy 2.5 / Snips Hermes over MQTT, with Home Assistant discovery, for one core."""

    def __init__(self, core: Core, config: Config) -> None:
        self.core = core
        self.config = config
        self.site_id = config.site.id
        # the outbox makes the state directory itself: on a full or read-only disk it starts from memory
        state_dir, runtime_dir = config.daemon.resolved_state_dir(), config.daemon.resolved_runtime_dir()
        held = None if runtime_dir is None else str(runtime_dir / HELD_FILE)
        outbox = Outbox(OutboxConfig(path=str(state_dir / OUTBOX_FILE), held_path=held))
        self.client = MqttClient(config.mqtt.for_site(self.site_id), outbox)
        self.stats_sections: dict[str, Callable[[], object]] = {}
        """More sections of the stats message, by name (the other protocol adapters')."""
        wake = core.models.wake
        self.discovery = Discovery(
            self.client,
            DiscoveryConfig(site_id=self.site_id, availability_topic=config.mqtt.availability_topic,
                            sw_version=__version__,
                            suggested_area=config.intents.site_area or config.wyoming.area or ""),
            core.models.intents.intent_names,
            wake_words=wake.labels if wake is not None else (),
            volume=core.speaker is not None,
            speak=core.models.voice is not None,
        )
        core.subscribe(self.on_event)
        self._sessions = SessionTags()
        """The wake word and language each recent session came with, for its textCaptured and intent."""
        self._listen_now_tags: tuple[str | None, str | None] | None = None
        """(wakewordId, lang) of a startListening without a sessionId, for the session it opens."""
        self._started = StartedSessions()
        self._session_lock = threading.RLock()
        self._queued: collections.deque[tuple[str, hermes.StartSession]] = collections.deque()
        """Apps' questions (enqueueable startSession actions) waiting for the open session to end."""
        self._own = OwnSessions()
        """voiced's own recent sessions, which an app may continue or end, and their customData."""
        self._asr_off, self._wake_off = ToggleReasons(), ToggleReasons()
        """Why a dialogue manager holds the ASR / the wake word off (hermes toggles, by reason)."""
        group = config.wake.arbitration_group
        if group is not None and wake is not None:
            core.set_arbiter(MqttArbiter(self.client, self.site_id, group, config.wake.arbitration_window_ms / 1000,
                                         core.counters))

    def start(self) -> None:
        """Subscribe and connect (without waiting for the broker); the stats stage joins the core's."""
        c = self.client
        c.subscribe(hermes.Topic.NLU_QUERY, self._on_nlu_query)
        c.subscribe(hermes.Topic.START_LISTENING, self._on_start_listening)
        c.subscribe(hermes.Topic.STOP_LISTENING, self._on_stop_listening)
        c.subscribe(hermes.Topic.ASR_TOGGLE_ON, self._on_toggle)
        c.subscribe(hermes.Topic.ASR_TOGGLE_OFF, self._on_toggle)
        c.subscribe(hermes.Topic.START_SESSION, self._on_start_session)
        c.subscribe(hermes.Topic.CONTINUE_SESSION, self._on_continue_session)
        c.subscribe(hermes.Topic.END_SESSION, self._on_end_session)
        if self.core.models.wake is not None:
            c.subscribe(hermes.Topic.HOTWORD_TOGGLE_ON, self._on_hotword_toggle)
            c.subscribe(hermes.Topic.HOTWORD_TOGGLE_OFF, self._on_hotword_toggle)
            c.subscribe(self.discovery.topics.wake_sensitivity_set, self._on_wake_sensitivity_set)
        if self.core.config.feedback.any:
            c.subscribe(hermes.Topic.FEEDBACK_SOUND_TOGGLE_ON, self._on_sound_toggle)
            c.subscribe(hermes.Topic.FEEDBACK_SOUND_TOGGLE_OFF, self._on_sound_toggle)
        if self.core.speaker is not None:
            if self.core.models.voice is not None:
                c.subscribe(hermes.Topic.TTS_SAY, self._on_say)
                c.subscribe(self.discovery.topics.say, self._on_notify)
            c.subscribe(f"hermes/audioServer/{self.site_id}/playBytes/+", self._on_play_bytes,
                        max_payload_bytes=self.config.mqtt.max_audio_bytes, on_oversized=self._on_play_too_big)
            c.subscribe(self.discovery.topics.volume_set, self._on_volume_set)
            c.subscribe(self.discovery.topics.stop, self._on_stop)
        c.subscribe(self.discovery.topics.microphone_set, self._on_microphone_set)
        c.add_connect_listener(self._publish_controls)
        c.connect()
        self.core.supervisor.add_stage("stats", self._stats, self.core.profile.cpus(Stage.INTENT))

    def close(self, drain_timeout: float) -> None:
        """Flush the outbox while the broker is there."""
        self.client.close(drain_timeout=drain_timeout)

    def status(self) -> str:
        return "mqtt connected" if self.client.connected else "mqtt offline"

    def set_intent_names(self, names: list[str] | tuple[str, ...]) -> None:
        self.discovery.set_intent_names(names)

    def _publish(self, msg: hermes.HermesMessage) -> None:
        self.client.publish(msg.topic, msg.json())

    # -- core events → Hermes ----------------------------------------------------------------

    def on_event(self, ev: CoreEvent) -> None:
        topics = self.discovery.topics
        site = self.site_id
        if isinstance(ev, SpeechStarted):
            self.client.publish(topics.listening, "ON", retain=True)
            if ev.own_session:  # not a dialogue manager's startListening: that session is its own
                self._tag_listen_now(ev.session_id)
                self._start_session(ev.session_id)
        elif isinstance(ev, PartialTranscript):
            self._publish(hermes.partial_text_captured(ev.text, ev.confidence, ev.seconds, site, ev.session_id,
                                                       from_templates=ev.from_templates))
        elif isinstance(ev, SpeechEnded):
            self.client.publish(topics.listening, "OFF", retain=True)
        elif isinstance(ev, Transcript):
            if not self._sessions.known(ev.session_id):  # a listen-now request that heard nothing
                self._tag_listen_now(ev.session_id)
            tokens = _asr_tokens(ev.words)
            wakeword, lang = self._sessions.of(ev.session_id)
            self._publish(hermes.text_captured(ev.text, ev.confidence, ev.end - ev.start, site, ev.session_id,
                                               wakeword, tokens, lang, from_templates=ev.from_templates))
            state, attributes = transcript_state(ev.text, {"siteId": site, "sessionId": ev.session_id,
                                                           "start": ev.start, "end": ev.end})
            self.client.publish(topics.transcript, state, retain=True)
            self.client.publish(topics.transcript_attributes, attributes, retain=True)
        elif isinstance(ev, AudioCaptured):
            self._publish_audio(ev)
        elif isinstance(ev, TranscriptCorrected):
            self._publish(hermes.text_captured(ev.text, 1.0, ev.seconds, site, ev.session_id))
        elif isinstance(ev, IntentRecognized):
            u = ev.utterance
            wakeword, lang = self._sessions.of(u.session_id)
            self._publish(hermes.nlu_intent(ev.intent, site, u.session_id, u.request_id, self._custom_data(u),
                                            asr_tokens=_asr_tokens(u.words),
                                            asr_confidence=u.confidence if u.from_speech else None,
                                            wakeword_id=u.wakeword_id or wakeword, lang=u.lang or lang))
            self.client.publish(topics.intent, intent_event(ev.intent, site))
        elif isinstance(ev, IntentNotRecognized):
            u = ev.utterance
            self._publish(hermes.intent_not_recognized(u.text, site, u.session_id, u.request_id, self._custom_data(u)))
            if u.from_speech and u.session_id is not None and self._own.keeps_open_unrecognized(u.session_id):
                self._publish(hermes.dialogue_intent_not_recognized(site, u.session_id, u.text, self._custom_data(u)))
        elif isinstance(ev, SessionEnded):
            if ev.reason is SessionReason.INTENT_NOT_RECOGNIZED and self._own.keeps_open_unrecognized(ev.session_id):
                return  # the app was told (dialogueManager/intentNotRecognized): it continues or ends the session
            self._end_session(ev.session_id, _REASONS[ev.reason])
        elif isinstance(ev, WakeDetected):
            d = ev.detection
            self._sessions.tag(ev.session_id, d.label, None)
            self._publish(hermes.hotword_detected(d.label, site, ev.session_id, d.score, ev.threshold))
            if self.core.mode is ListenMode.WAKE:  # the wake word starts the session, as Rhasspy's dialogue manager
                self._start_session(ev.session_id)
            self.client.publish(topics.wake, wake_event(d.label, d.score, ev.session_id, site))
        elif isinstance(ev, SpeakingChanged):
            self.client.publish(topics.speaking, "ON" if ev.speaking else "OFF", retain=True)
        elif isinstance(ev, SpeechFinished):
            self._on_spoken(ev)
        elif isinstance(ev, ControlsChanged):
            self._publish_controls()

    def _start_session(self, session_id: str) -> None:
        with self._session_lock:
            self._own.add(session_id)
            if self._started.start(session_id):
                self._publish(self._session_started(session_id))

    def _session_started(self, session_id: str) -> hermes.HermesMessage:
        return hermes.session_started(self.site_id, session_id, self._own.custom_data(session_id),
                                      lang=self._sessions.of(session_id)[1])

    def _end_session(self, session_id: str, reason: hermes.TerminationReason) -> None:
        with self._session_lock:  # the core's threads end sessions, paho's starts and queues them
            self._end_session_locked(session_id, reason)

    def _end_session_locked(self, session_id: str, reason: hermes.TerminationReason) -> None:
        unstarted = self._started.end(session_id)
        if unstarted is None:  # ended already (an app ended it while its utterance was being heard)
            log.debug("session %s ended already: no second sessionEnded (%s)", session_id, reason.value)
            return
        if unstarted:  # ended before anything was heard: a wake word's timeout, a request stopped in silence
            self._publish(self._session_started(session_id))
        self._publish(hermes.session_ended(self.site_id, session_id, reason, self._own.custom_data(session_id)))
        if self._queued and not self._started.any_open():  # the device is free: the next question
            self._begin_session(*self._queued.popleft())

    def _custom_data(self, u: Utterance) -> str | None:
        return u.custom_data if u.custom_data is not None or not u.from_speech else self._own.custom_data(u.session_id)

    def _tag_listen_now(self, session_id: str) -> None:
        """A session of voiced's own that a startListening without a sessionId asked for gets that
        request's wakewordId and lang (the session's id is only made when it is heard)."""
        if self._listen_now_tags is not None:
            self._sessions.tag(session_id, *self._listen_now_tags)
            self._listen_now_tags = None

    def _publish_audio(self, ev: AudioCaptured) -> None:
        """Rhasspy's audioCaptured: QoS 0 and never stored (seconds of audio do not belong in the
        outbox; the session that asked for it is over if the broker is away)."""
        try:
            topic = hermes.audio_captured_topic(self.site_id, ev.session_id)
        except ValueError as exc:  # a caller's sessionId with "/" or "+" cannot name the topic
            log.warning("audioCaptured not sent: %s", exc)
            return
        if not self.client.publish_live(topic, encode_wav(ev.samples, ev.sample_rate)):
            log.warning("audioCaptured of session %s not sent: the broker is away", ev.session_id)

    def _publish_controls(self) -> None:
        """The switch's, the slider's and the select's state, retained: on every connection and after every change."""
        topics = self.discovery.topics
        self.client.publish_state(topics.microphone, SWITCH_ON if self.core.controls.microphone else SWITCH_OFF)
        if self.core.speaker is not None:
            self.client.publish_state(topics.volume, f"{round(self.core.volume * 100)}")
        if self.core.models.wake is not None:
            self.client.publish_state(topics.wake_sensitivity, self.core.controls.wake_sensitivity.value)

    def _on_spoken(self, ev: SpeechFinished) -> None:
        """Answer the requests this adapter made (another adapter's are its own business)."""
        request = ev.request
        error = request.result.error if request.result is not None else None
        if request.kind is RequestKind.SAY and isinstance(request.tag, hermes.TtsSay):
            if error:  # Rhasspy's TTS services say why on hermes/error/tts, then sayFinished
                self._publish(hermes.tts_error(error, self.site_id, request.id, request.tag.session_id))
            self._publish(hermes.say_finished(self.site_id, request.id, request.tag.session_id))
        elif request.kind is RequestKind.PLAY and request.tag is _PLAY_BYTES:
            if error:
                self._publish(hermes.audio_play_error(error, self.site_id, request.id))
            self._publish(hermes.play_finished(self.site_id, request.id))
        elif isinstance(request.tag, _Turn):
            self._after_turn(request.tag)
        elif request.tag is _NOTIFY and request.result is not None and request.result.error:
            log.warning("Home Assistant's message was not spoken: %s", request.result.error)

    def _stats(self, ctx: StageContext) -> None:
        topic = f"voiced/{self.site_id}/stats"
        waited = 0.0
        while not ctx.wait(0.2):
            ctx.beat()
            waited += 0.2
            if waited >= self.config.daemon.stats_interval_s:
                waited = 0.0
                # QoS 0, never stored: a broker away for days filled the outbox with stats (84 % of
                # its 10,000 messages after a week), pushing out the intents it exists to keep
                if not self.client.publish_live(topic, json.dumps(self.stats())):
                    self.core.counters.add("stats_unsent")

    def stats(self) -> dict[str, object]:
        """What ``voiced/<siteId>/stats`` carries: the core's, the client's and ``stats_sections``'."""
        return {"siteId": self.site_id, **self.core.stats(), "mqtt": self.client.stats(),
                **{name: section() for name, section in self.stats_sections.items()}}

    # -- MQTT → core commands (on paho's thread: parse, check, enqueue) -----------------------

    def _on_nlu_query(self, topic: str, payload: bytes) -> None:
        try:
            query = hermes.parse_nlu_query(payload)
        except hermes.MalformedMessage:  # answered when it can be; logged and counted by the client
            self._answer_unreadable(payload, lambda to: hermes.intent_not_recognized(
                "", to.site_id, to.session_id, to.id, to.custom_data))
            raise
        if hermes.for_site(query, self.site_id):
            self.core.query(Utterance(
                text=query.input, session_id=query.session_id, request_id=query.id,
                intent_filter=query.intent_filter, custom_data=query.custom_data, from_speech=False,
                wakeword_id=query.wakeword_id, lang=query.lang,
            ))

    def _answer_unreadable(self, payload: bytes,
                           answer: Callable[[hermes.ReplyAddress], hermes.HermesMessage]) -> None:
        """A request that does not parse but whose ``id`` can be read, for this site, gets ``answer``."""
        to = hermes.reply_address(payload)
        if to is not None and to.id is not None and hermes.for_site(to, self.site_id):
            self._publish(answer(to))

    def _on_start_listening(self, topic: str, payload: bytes) -> None:
        request = hermes.parse_start_listening(payload)
        if hermes.for_site(request, self.site_id):
            if request.session_id is not None:
                self._sessions.tag(request.session_id, request.wakeword_id, request.lang)
                self._listen_now_tags = None
            else:
                self._listen_now_tags = (request.wakeword_id, request.lang)
            self.core.start_listening(ListenRequest(request.session_id, request.intent_filter,
                                                    request.stop_on_silence, request.send_audio_captured))

    # -- an app's dialogue (Rhasspy's dialogue manager, for voiced's own sessions) ---------------

    def _on_start_session(self, topic: str, payload: bytes) -> None:
        start = hermes.parse_start_session(payload)
        if not hermes.for_site(start, self.site_id):
            return
        session = str(uuid.uuid4())
        with self._session_lock:
            self._start_or_queue(session, start)

    def _start_or_queue(self, session: str, start: hermes.StartSession) -> None:
        if start.kind is hermes.SessionKind.ACTION and (self._started.any_open() or self._queued):
            # one question at a time, as Rhasspy's dialogue manager: the user's answer must reach the
            # session that asked (a notification is only said: it waits in the speaker's queue)
            if not start.can_be_enqueued or len(self._queued) >= MAX_QUEUED_SESSIONS:
                log.info("startSession dropped: a session is open and this one %s",
                         "cannot be enqueued" if not start.can_be_enqueued else "finds the queue full")
                self.core.counters.add("sessions_dropped")
                return
            self._queued.append((session, start))
            self._publish(hermes.session_queued(self.site_id, session, start.custom_data))
            return
        self._begin_session(session, start)

    def _begin_session(self, session: str, start: hermes.StartSession) -> None:
        self._own.add(session, start.custom_data)
        if start.lang is not None:
            self._sessions.tag(session, None, start.lang)
        self._start_session(session)
        self._own.keep_open_unrecognized(session, start.send_intent_not_recognized)
        if start.kind is hermes.SessionKind.NOTIFICATION:
            self._turn(start.text, _Turn(session, end=True))
        else:
            self._turn(start.text, _Turn(session, self._listen_request(session, start.intent_filter)))

    def _on_continue_session(self, topic: str, payload: bytes) -> None:
        cont = hermes.parse_continue_session(payload)
        if cont.session_id not in self._own:  # another satellite's, or a dialogue manager's own
            log.debug("continueSession for session %s, not one of ours: ignored", cont.session_id)
            return
        self._own.add(cont.session_id, cont.custom_data)
        if cont.lang is not None:
            self._sessions.tag(cont.session_id, self._sessions.of(cont.session_id)[0], cont.lang)
        self._start_session(cont.session_id)  # open again from now: its timeout or its answer ends it
        self._own.keep_open_unrecognized(cont.session_id, cont.send_intent_not_recognized)
        self._turn(cont.text, _Turn(cont.session_id, self._listen_request(cont.session_id, cont.intent_filter)))

    def _on_end_session(self, topic: str, payload: bytes) -> None:
        end = hermes.parse_end_session(payload)
        if end.session_id not in self._own:
            log.debug("endSession for session %s, not one of ours: ignored", end.session_id)
            return
        self._own.add(end.session_id, end.custom_data)
        if end.session_id in self._started:  # still listening (a question, a wake word): it ends now, unanswered
            self.core.end_session(end.session_id)
            self._end_session(end.session_id, hermes.TerminationReason.NOMINAL)
        # else voiced ended it with its intent, before the app's reply: the app's last word is said
        self._turn(end.text, _Turn(end.session_id))

    def _listen_request(self, session_id: str, intent_filter: tuple[str, ...] | None) -> ListenRequest:
        # the answer has as long to begin as a command after a wake word: a question nobody answers
        # must not leave the device listening (a television would become the answer)
        return ListenRequest(session_id, intent_filter, dialogue=True, custom_data=self._own.custom_data(session_id),
                             timeout_s=self.config.wake.timeout_s)

    def _turn(self, text: str | None, turn: _Turn) -> None:
        """Say ``text`` (when there is a voice), then what ``turn`` says follows."""
        if text and text.strip() and self.core.speaker is not None and self.core.models.voice is not None:
            self.core.say(text, tag=turn)  # answered in _on_spoken: then the rest
        else:
            self._after_turn(turn)

    def _after_turn(self, turn: _Turn) -> None:
        if turn.listen is not None:
            self.core.start_listening(turn.listen)
        elif turn.end:
            self._end_session(turn.session_id, hermes.TerminationReason.NOMINAL)

    def _on_stop_listening(self, topic: str, payload: bytes) -> None:
        request = hermes.parse_stop_listening(payload)
        if hermes.for_site(request, self.site_id):
            self.core.stop_listening(request.session_id)  # another session's stop leaves ours open

    def _on_toggle(self, topic: str, payload: bytes) -> None:
        toggle = hermes.parse_toggle(payload, enabled=topic == hermes.Topic.ASR_TOGGLE_ON)
        if hermes.for_site(toggle, self.site_id):
            on = self._asr_off.toggle(toggle.enabled, toggle.reason)
            self.core.set_listening(on)
            log.info("ASR %s", _toggled(toggle, on, self._asr_off))

    def _on_hotword_toggle(self, topic: str, payload: bytes) -> None:
        toggle = hermes.parse_toggle(payload, enabled=topic == hermes.Topic.HOTWORD_TOGGLE_ON)
        if hermes.for_site(toggle, self.site_id):
            on = self._wake_off.toggle(toggle.enabled, toggle.reason)
            self.core.set_wake(on)
            log.info("wake word %s", _toggled(toggle, on, self._wake_off))

    def _on_notify(self, topic: str, payload: bytes) -> None:
        """Home Assistant's ``notify.send_message`` to the Speak entity: the message, as plain text."""
        try:
            text = payload.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise hermes.MalformedMessage("a message to speak must be UTF-8 text") from None
        if not text:
            raise hermes.MalformedMessage("an empty message to speak")
        self.core.counters.add("notify_messages")
        self.core.say(text, tag=_NOTIFY)

    def _on_stop(self, topic: str, payload: bytes) -> None:
        if payload.strip().upper() != BUTTON_PRESS.encode():
            raise hermes.MalformedMessage(f"the stop button sends {BUTTON_PRESS}, got {payload[:40]!r}")
        log.info("stop speaking, from Home Assistant")
        self.core.counters.add("stops_pressed")
        self.core.stop_speaking()

    def _on_microphone_set(self, topic: str, payload: bytes) -> None:
        value = payload.strip().upper()
        if value not in (SWITCH_ON.encode(), SWITCH_OFF.encode()):
            raise hermes.MalformedMessage(f"the microphone switch takes {SWITCH_ON} or {SWITCH_OFF}, got {payload[:40]!r}")
        on = value == SWITCH_ON.encode()
        log.info("microphone switched %s from Home Assistant", "on" if on else "off")
        self.core.set_microphone(on)

    def _on_volume_set(self, topic: str, payload: bytes) -> None:
        try:
            percent = float(payload.strip())
        except ValueError:
            raise hermes.MalformedMessage(f"the volume is a number of percent, got {payload[:40]!r}") from None
        if not 0 <= percent <= 100:  # NaN fails this too
            raise hermes.MalformedMessage(f"the volume must be within 0..100 %, got {percent}")
        log.info("volume set to %g %% from Home Assistant", percent)
        self.core.set_volume(percent / 100)

    def _on_wake_sensitivity_set(self, topic: str, payload: bytes) -> None:
        level = Sensitivity.named(payload.strip().decode("utf-8", "replace"))
        if level is None:
            raise hermes.MalformedMessage(f"the wake word sensitivity is one of {', '.join(Sensitivity)}, "
                                          f"got {payload[:40]!r}")
        log.info("wake word sensitivity set to %s from Home Assistant", level.value)
        self.core.set_wake_sensitivity(level)

    def _on_sound_toggle(self, topic: str, payload: bytes) -> None:
        toggle = hermes.parse_toggle(payload, enabled=topic == hermes.Topic.FEEDBACK_SOUND_TOGGLE_ON)
        if hermes.for_site(toggle, self.site_id):
            self.core.feedback.enabled = toggle.enabled
            log.info("feedback sounds %s", "on" if toggle.enabled else "off")

    def _on_say(self, topic: str, payload: bytes) -> None:
        try:
            say = hermes.parse_tts_say(payload)
        except hermes.MalformedMessage:  # nothing to speak, but its sender still waits for sayFinished
            self._answer_unreadable(payload, lambda to: hermes.say_finished(to.site_id, to.id, to.session_id))
            raise
        if hermes.for_site(say, self.site_id):
            # bad text is not an exception: the request finishes FAILED and still gets sayFinished
            self.core.say(say.text, volume=say.volume if say.volume is not None else 1.0, request_id=say.id, tag=say)

    def _on_play_too_big(self, topic: str, size: int) -> None:
        """Not played, but answered: the sender waits for playFinished (the id is in the topic)."""
        site_request = hermes.site_and_request_from_play_bytes(topic)
        if site_request is not None:
            limit = self.config.mqtt.max_audio_bytes
            self._publish(hermes.audio_play_error(f"{size} bytes of audio: over [mqtt] max_audio_bytes {limit}",
                                                  *site_request))
            self._publish(hermes.play_finished(*site_request))

    def _on_play_bytes(self, topic: str, payload: bytes) -> None:
        site_request = hermes.site_and_request_from_play_bytes(topic)
        if site_request is None:
            return
        site, request_id = site_request
        try:
            chunk = wav_to_chunk(payload, f"playBytes {request_id}")
        except AudioError as exc:
            log.warning("%s", exc)
            self.core.counters.add("malformed_play_bytes")
            self._publish(hermes.audio_play_error(str(exc), site, request_id))
            self._publish(hermes.play_finished(site, request_id))
            return
        self.core.play(chunk, request_id=request_id, tag=_PLAY_BYTES)


def _toggled(toggle: hermes.AsrToggle, on: bool, reasons: ToggleReasons) -> str:
    """The state after a toggle, for the log: "on (playAudio)", "off (dialogueSession, playAudio)"."""
    if on:
        return f"on ({toggle.reason or 'no reason given'})"
    return f"off ({', '.join(r or 'no reason given' for r in reasons.reasons)})"


def _asr_tokens(words: tuple[Word, ...] | None) -> tuple[hermes.AsrToken, ...] | None:
    if words is None:
        return None
    return tuple(hermes.AsrToken(w.value, w.confidence, w.range_start, w.range_end, w.start_s, w.end_s) for w in words)

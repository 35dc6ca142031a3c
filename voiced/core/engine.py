"""The core: capture → listen (wake word, VAD + ASR) → intent, and speech out; no protocol inside.

Stages run on named threads and talk through bounded queues (DESIGN.md, "Threads"):

- ``capture``: audio source → 10 ms frames → windows → ``windows`` queue (drop oldest, counted);
- ``listen``: windows → wake word → endpointer + recognizer → events;
- ``intent``: transcripts and adapters' queries → hassil (→ LLM → cloud) → intent events;
- ``speak``: say/play requests → Piper → ALSA, capture muted meanwhile (half-duplex).

Adapters (Hermes/MQTT, Wyoming) subscribe to the typed events of ``voiced.core.events`` and
call the command methods here (``query``, ``start_listening``, ``say`` …).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, replace

from voiced.audio.frames import SAMPLE_RATE, Window, Windower
from voiced.audio.source import AudioSource, NullSource
from voiced.cloud.pool import CloudResult
from voiced.config import Config
from voiced.core.controls import CONTROLS_FILE, Controls, load_controls, save_controls
from voiced.core.events import (
    AudioCaptured,
    ControlsChanged,
    CoreEvent,
    EventHandler,
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
)
from voiced.core.feedback import Feedback
from voiced.core.intent_stage import IntentStage
from voiced.core.listen_requests import ListenRequests
from voiced.core.models import Models
from voiced.core.wake_sessions import WakeSessions
from voiced.core.words import word_timings
from voiced.errors import ConfigError
from voiced.listener import ListenEvent, ListenEventType
from voiced.llm.config import MAX_BUDGET_S
from voiced.runtime.hardware import Stage, select_profile
from voiced.runtime.lograte import sparse_level
from voiced.runtime.notify import SystemdNotifier
from voiced.runtime.supervisor import StageContext, Supervisor
from voiced.stages import Counters, DropOldestQueue
from voiced.tts import AlsaPlayer, Speaker, SpeakerConfig, SpeechRequest
from voiced.tts.audio import AudioChunk
from voiced.wake import Sensitivity
from voiced.wake.arbitration import Arbiter

__all__ = ["Core", "WindowTap"]

log = logging.getLogger(__name__)

POLL_S = 0.2
"""How often an idle stage wakes to check for stop (and beat its heartbeat)."""
LLM_STAGE = "llm"
"""The thread that waits for the LLM fallback (on the intent stage's cores: it mostly waits)."""

WindowTap = Callable[[Window], None]
"""Sees every window the listen stage hears (not the muted ones), on the listen thread."""


class _EndOfAudio:
    """Queued after the last window of a finite source (a file)."""

    def __init__(self, end: float) -> None:
        self.end = end


class Core:
    """Owns the models, the audio source, the sessions and the stage threads."""

    def __init__(self, config: Config, mode: ListenMode = ListenMode.ALWAYS,
                 notifier: SystemdNotifier | None = None, status: Callable[[], str] | None = None) -> None:
        self.config = config
        self.mode = mode
        state = config.daemon.resolved_state_dir()
        if state.exists() and not state.is_dir():  # before the models load; the outbox named its own file
            raise ConfigError("daemon.state_dir", f"{state} is a file, not a directory",
                              str(config.path) if config.path else None)
        self.counters = Counters()
        self.stop_event = threading.Event()
        self._handlers: list[EventHandler] = []
        self._taps: list[WindowTap] = []
        self._muted = False
        self._utterance_session: str | None = None  # session of the utterance being heard
        self._speaking = False  # set by the speaker: capture is ignored meanwhile
        self.profile = select_profile(config.hardware.profile).fitted()
        self.notifier = notifier or SystemdNotifier()
        self.supervisor = Supervisor(notifier=self.notifier, status=status or self.status_line)
        self.models = Models.load(config, self.profile, self.counters)
        if mode is ListenMode.WAKE and self.models.wake is None:
            raise ConfigError("wake.models", "listen mode 'wake' needs at least one wake word model", str(config.path))
        self.wake = WakeSessions(self)
        self.requests = ListenRequests(self)
        self.listener = self.models.new_listener()
        self._cloud_audio = self.listener.keep_audio  # the cloud takes utterances' audio; requests may ask too
        self.feedback = Feedback(self, config.feedback, str(config.path) if config.path else None)
        self.subscribe(self.feedback.on_event)
        self.speaker: Speaker | None = None
        # a satellite plays Home Assistant's audio; feedback sounds need a speaker even without a voice
        if self.models.voice is not None or config.wyoming.satellite or config.feedback.any:
            playback = replace(config.playback, device=config.playback.device or self.profile.alsa.playback)
            self.speaker = Speaker(self.models.voice, AlsaPlayer(playback),
                                   SpeakerConfig(config.tts.tail_ms, config.tts.max_pending),
                                   on_speaking=self._on_speaking, on_finished=self._on_spoken)
        self._controls_path = config.daemon.resolved_state_dir() / CONTROLS_FILE
        self.controls = load_controls(self._controls_path)
        """The microphone switch and the volume as the user last set them (kept in the state directory)."""
        if self.controls.volume is not None and self.speaker is not None:
            self.speaker.player.volume = self.controls.volume
        if not self.controls.microphone:
            log.info("the microphone is switched off (%s): nothing is heard until it is switched on",
                     self._controls_path)
        self._apply_wake_sensitivity()
        self.windows: DropOldestQueue[object] = DropOldestQueue(config.audio.queue_windows, self.counters, "windows_dropped")
        self.utterances: DropOldestQueue[Utterance] = DropOldestQueue(100, self.counters, "utterances_dropped")
        self.intent_stage = IntentStage(self.models, self.counters, self._emit)
        self.source: AudioSource = config.audio.open(self.profile.alsa.capture, self.stop_event,
                                                     str(config.path) if config.path else None)

    # -- adapters ----------------------------------------------------------------------------

    def subscribe(self, handler: EventHandler) -> None:
        """``handler`` gets every event, on the stage thread that made it: translate and enqueue only."""
        self._handlers.append(handler)

    def unsubscribe(self, handler: EventHandler) -> None:
        if handler in self._handlers:
            self._handlers.remove(handler)

    def add_window_tap(self, tap: WindowTap) -> None:
        self._taps.append(tap)

    def remove_window_tap(self, tap: WindowTap) -> None:
        if tap in self._taps:
            self._taps.remove(tap)

    def _emit(self, event: CoreEvent) -> None:
        for handler in tuple(self._handlers):  # adapters may come and go meanwhile
            try:
                handler(event)
            except Exception:  # one adapter's bug must not stop the stage or the other adapters
                log.exception("event handler failed on %s", type(event).__name__)
                self.counters.add("handler_failures")

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Open the source and start the stage threads (adapters have subscribed by now)."""
        self.source.open()
        p, sup = self.profile, self.supervisor
        sup.add_stage(Stage.CAPTURE, self._capture, p.cpus(Stage.CAPTURE), realtime_priority=p.realtime_priority)
        sup.add_stage(Stage.LISTEN, self._listen, p.cpus(Stage.LISTEN))
        sup.add_stage(Stage.INTENT, self._intent, p.cpus(Stage.INTENT))
        if self.models.llm is not None:  # its turns wait apart: template matches never queue behind them
            self.intent_stage.use_llm_lane()
            sup.add_stage(LLM_STAGE, self._llm_turns, p.cpus(Stage.INTENT), heartbeat_timeout_s=2 * MAX_BUDGET_S)
        if self.speaker is not None:
            speaker = self.speaker
            sup.add_stage(Stage.SPEAK, lambda ctx: speaker.run(ctx.stop, ctx.beat), p.cpus(Stage.SPEAK))
        sup.start()
        if self.models.llm is not None:
            self.models.llm.start()  # loads in the background, never delaying READY

    def stop(self, timeout: float = 5.0) -> bool:
        self.stop_event.set()
        self.source.stop()
        if self.speaker is not None:
            self.speaker.interrupt()  # a long sentence being synthesized ends now, not in seconds
        clean = self.supervisor.stop(timeout * 0.7)
        self.source.close()
        if self.speaker is not None:
            self.speaker.close(timeout * 0.3)
        self.models.close()
        return clean

    def status_line(self) -> str:
        """``listening on alsa:hw:1,0 · 0 dropped``."""
        dropped = self.counters.get("windows_dropped") + self.counters.get("utterances_dropped")
        state = "microphone off" if not self.controls.microphone else "muted" if self._muted else "listening"
        return f"{state} on {self.source.describe()} · {dropped} dropped"

    def stats(self) -> dict[str, object]:
        m = self.models
        return {
            "counters": self.counters.snapshot(),
            "source": self.source.describe(),
            "queued_windows": len(self.windows),
            "llm": m.llm.counts() if m.llm is not None else None,
            "cloud": m.cloud.stats(),
            "speaker": ({**asdict(self.speaker.stats), "speaking": self.speaker.speaking}
                        if self.speaker is not None else None),
            "stages": {i.name: {"restarts": i.restarts, "failures": i.failures, "stalled": i.stalled}
                       for i in self.supervisor.stages()},
        }

    def reload(self, config: Config) -> None:
        """SIGHUP: new intent templates without touching audio."""
        from voiced.intents import IntentRecognizer

        self.models.use_intents(IntentRecognizer.from_section(config.intents, str(config.path) if config.path else None))
        self.listener.set_commands(self.models.commands)  # from the next utterance on

    # -- commands (any thread) ----------------------------------------------------------------

    def query(self, utterance: Utterance) -> None:
        """Recognize the intent of a text (an adapter's query); answered by an intent event."""
        self.counters.add("queries")
        self.utterances.put(utterance)

    def start_listening(self, request: ListenRequest) -> None:
        """hermes/asr/startListening: hear the next utterance(s) in ``request``'s session."""
        self.requests.open(request)

    def end_session(self, session_id: str) -> None:
        """An app ended ``session_id`` (hermes endSession): what listens for it stops, unanswered."""
        self.requests.cancel(session_id)
        if self.wake.session == session_id:
            self.wake.session = None  # read on the listen thread: no utterance of it will begin

    def stop_listening(self, session_id: str | None = None) -> bool:
        """hermes/asr/stopListening: end the open request (of ``session_id``; None: whichever);
        False if there was none. See ``listen_requests``."""
        return self.requests.close(session_id)

    def set_listening(self, enabled: bool) -> None:
        """Off: no window reaches the VAD and the recognizer (hermes/asr/toggleOff); the wake word
        still listens (hermes/hotword/toggleOff is its own switch)."""
        self._muted = not enabled

    @property
    def volume(self) -> float:
        """The gain everything is played with, in [0, 1]."""
        return self.speaker.player.volume if self.speaker is not None else self.config.playback.volume

    def set_microphone(self, on: bool) -> None:
        """The user's switch (Home Assistant): off drops every window until it is on again, across
        restarts. Apart from ``set_listening``, which dialogue managers toggle per session."""
        self._set_controls(replace(self.controls, microphone=on))

    def set_volume(self, volume: float) -> None:
        """The gain of everything played from now on, in [0, 1], across restarts."""
        if not 0 <= volume <= 1:
            raise ConfigError("volume", f"must be within 0..1, got {volume!r}")
        if self.speaker is not None:
            self.speaker.player.volume = volume
        self._set_controls(replace(self.controls, volume=volume))

    def set_wake_sensitivity(self, level: Sensitivity) -> None:
        """How readily the wake words are taken from the next window on, across restarts."""
        self._set_controls(replace(self.controls, wake_sensitivity=level))
        self._apply_wake_sensitivity()

    def _apply_wake_sensitivity(self) -> None:
        detector, stream = self.models.wake, self.wake.stream
        if detector is not None and stream is not None:  # the listen thread reads the rules whole, once per frame
            stream.config = detector.config.at(self.controls.wake_sensitivity)

    def _set_controls(self, controls: Controls) -> None:
        self.controls = controls
        save_controls(self._controls_path, controls)
        self._emit(ControlsChanged(controls.microphone, self.volume, controls.wake_sensitivity))

    def set_wake(self, enabled: bool) -> None:
        self.wake.enabled = enabled

    def set_arbiter(self, arbiter: Arbiter | None) -> None:
        """Wake words become claims settled by ``arbiter`` (several rooms, one answer); before start()."""
        self.wake.arbiter = arbiter

    def say(self, text: str, volume: float = 1.0, request_id: str | None = None, tag: object = None) -> SpeechRequest | None:
        """Speak through our speaker; None when no voice is configured. Bad text ends FAILED, still answered."""
        if self.speaker is None or self.models.voice is None:
            return None
        return self.speaker.say(text, self.config.tts.options, volume=volume, request_id=request_id, tag=tag)

    def stop_speaking(self) -> bool:
        """End what is being said and everything queued (each ends INTERRUPTED, still answered);
        False when there is no speaker."""
        if self.speaker is None:
            return False
        self.speaker.interrupt()
        return True

    def play(self, chunk: AudioChunk, request_id: str | None = None, tag: object = None) -> SpeechRequest | None:
        if self.speaker is None:
            return None
        return self.speaker.play(chunk, request_id=request_id, tag=tag)

    # -- stages ----------------------------------------------------------------------------

    def _capture(self, ctx: StageContext) -> None:
        windower = Windower(self.config.audio.window_frames)
        # A file not paced to the clock goes as fast as the pipeline: wait for room, drop nothing.
        block = self.source.lossless
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
        heard_until = 0.0  # stream time of the last window taken
        while not ctx.stop.is_set():
            ctx.beat()
            item = self.windows.get(POLL_S)
            if self.requests.take_fresh() and (self.mode is ListenMode.ON_REQUEST or (
                    self.mode is ListenMode.WAKE and not self.listener.active)):  # not a wake word's utterance
                # a new request hears from now on (speech under way too), not a half-heard utterance
                self.listener, expected, self.requests.hearing = self.models.new_listener(), None, None
            self.requests.answer_stop(heard_until)
            if item is None:
                continue
            heard_until = item.end
            events: list[ListenEvent] = []
            # half-duplex: while we speak or a wake sound is due (and a tail after) the microphone hears ourselves
            ours = self._speaking or self.feedback.holding()
            if isinstance(item, _EndOfAudio):
                events = list(self.listener.finish(item.end))
                expected = None
            elif ours or not self.controls.microphone:
                self.wake.settle()
                if ours:  # nothing said now can be heard: the wake session's timeout waits too
                    self.wake.wait(item.end - item.start)
                self.counters.add("windows_muted")
                continue
            else:
                if expected is not None and abs(item.start - expected) > 1e-6:
                    # audio is missing (dropped while we lagged, or muted): close what was open
                    events = list(self.listener.finish(expected))
                self.counters.add("windows")
                self.requests.expire(item.end - item.start)
                for tap in tuple(self._taps):
                    tap(item)
                self.wake.process(item)
                if self._muted:  # hermes/asr/toggleOff turns the ASR off, not the wake word (Hermes: two components)
                    self.counters.add("windows_asr_off")
                else:
                    # a wake sound is due: the command comes after it, not in the wake word's last window
                    if not self.feedback.holding() and self._hears(item):
                        self.listener.keep_audio = self._cloud_audio or self.requests.wants_audio()
                        events += self.listener.process(item)
                    expected = item.end
            for ev in events:
                self._on_listen_event(ev)

    def _hears(self, item: Window) -> bool:
        """Whether the VAD and the recognizer get ``item``: in wake mode after a wake word, on
        request while a request is open or its utterance is heard, else always."""
        if self.mode is ListenMode.WAKE:
            return self.wake.listening(item.end) or self.requests.wanted()
        return self.mode is not ListenMode.ON_REQUEST or self.requests.wanted()

    def _intent(self, ctx: StageContext) -> None:
        while not ctx.stop.is_set():
            ctx.beat()
            utt = self.utterances.get(POLL_S)
            if utt is not None:
                self.intent_stage.recognize(utt)

    def _llm_turns(self, ctx: StageContext) -> None:
        while not ctx.stop.is_set():
            ctx.beat()
            self.intent_stage.llm_turn(POLL_S)

    # -- listening → sessions and transcripts ----------------------------------------------

    def _on_listen_event(self, ev: ListenEvent) -> None:
        if self.wake.hold(ev):
            return
        if ev.type is ListenEventType.SPEECH_START:
            request = self.requests.began()
            if self.mode is ListenMode.ON_REQUEST and request is None:
                self._utterance_session = None
                return
            if self.mode is ListenMode.WAKE and request is None:
                self._utterance_session, callers = self.wake.session, False
                if self.wake.session is None:
                    return
            else:  # a request's session (in wake mode too: a dialogue's next turn needs no wake word)
                callers = request is not None and request.callers_session
                given = request.session_id if request is not None else None
                self._utterance_session = given or str(uuid.uuid4())
            self.counters.add("utterances")
            self._emit(SpeechStarted(self._utterance_session, ev.start, own_session=not callers))
            return
        session = self._utterance_session
        if session is None:
            return
        if ev.type is ListenEventType.PARTIAL and self.config.asr.partials and ev.result is not None:
            self._emit(PartialTranscript(session, ev.text, ev.result.confidence, ev.end - ev.start,
                                         ev.result.from_templates))
        elif ev.type is ListenEventType.SPEECH_END:
            self._emit(SpeechEnded(session, ev.end))
            if self.mode is ListenMode.WAKE and session == self.wake.session:
                self.wake.session = None  # one utterance per wake word (a request's utterance was not its)
        elif ev.type is ListenEventType.FINAL:
            self._on_final(ev, session)

    def _on_final(self, ev: ListenEvent, session: str) -> None:
        request = self.requests.ended()
        confidence = ev.result.confidence if ev.result is not None else None
        m = self.models
        if ev.audio is not None and m.cloud.should_use_cloud_asr(m.recognizer is not None, confidence):
            if m.recognizer is None:  # nothing local to publish: the cloud's text is the transcript
                m.cloud.submit_asr(ev.audio, lambda r: self._on_cloud_text(r, ev, session, request),
                                   language=m.intents.language)
                return
            # a local transcript exists: it is published now; the cloud may only correct it later
            if self.config.cloud.publish_corrections:
                m.cloud.submit_asr(ev.audio, lambda r: self._on_cloud_correction(r, ev, session),
                                   language=m.intents.language)
        elif m.recognizer is None:  # speech heard and nobody to transcribe it: say so, or it vanishes in silence
            self.counters.add("utterances_untranscribed")
            n = self.counters.get("utterances_untranscribed")
            log.log(sparse_level(n, first=3), "an utterance of %.1f s was not transcribed: no [asr] model, and the "
                    "cloud is not to be used now: %s (%d so far)", ev.end - ev.start, m.cloud.status().detail, n)
        self._publish_transcript(ev, ev.text, session, confidence or 0.0, request)
        self._hand_back_audio(ev, session, request)

    def _hand_back_audio(self, ev: ListenEvent, session: str, request: ListenRequest | None) -> None:
        """After its transcript, the audio of an utterance whose listening request asked for it."""
        if request is not None and request.send_audio and ev.audio is not None:
            self._emit(AudioCaptured(session, ev.audio, SAMPLE_RATE))

    def _on_cloud_text(self, result: CloudResult[str], ev: ListenEvent, session: str,
                       request: ListenRequest | None) -> None:
        """On a cloud worker thread: the cloud transcript of an utterance with no local one."""
        text = (result.value or "").strip() if result.ok else ""
        if not result.ok:
            log.warning("cloud ASR gave no transcript (%s)", result.outcome.value)
        self._publish_transcript(ev, text, session, 1.0, request)
        self._hand_back_audio(ev, session, request)

    def _on_cloud_correction(self, result: CloudResult[str], ev: ListenEvent, session: str) -> None:
        if result.ok and result.value and result.value.strip() != ev.text.strip():
            self._emit(TranscriptCorrected(session, result.value.strip(), ev.end - ev.start))
            self.counters.add("cloud_corrections")

    def _publish_transcript(self, ev: ListenEvent, text: str, session: str, confidence: float,
                            request: ListenRequest | None) -> None:
        """The transcript, then, in the core's own sessions, the intent that ends the session."""
        text = text.strip()
        # A caller's session (a dialogue manager's) gets its textCaptured, empty or not, and nothing
        # more: it asks hermes/nlu/query itself, and an intent from here too would act twice.
        callers = request is not None and request.callers_session and request.session_id == session
        if not text and not callers:
            self.counters.add("empty_transcripts")
            self._emit(SessionEnded(session, SessionReason.INTENT_NOT_RECOGNIZED))
            return
        self.counters.add("transcripts" if text else "empty_transcripts")
        result = ev.result if text and text == ev.text.strip() else None  # None: the cloud's text, or none
        words = tuple(word_timings(ev)) if result is not None else None
        from_templates = result is not None and result.from_templates
        transcript = Transcript(session, text, confidence if text else 0.0, ev.start, ev.end, words, from_templates)
        if not (callers and request is not None and self.requests.hold(request, transcript)):
            self._emit(transcript)
        if not callers:
            self.utterances.put(Utterance(text=text, session_id=session, confidence=confidence, words=words,
                                          intent_filter=request.intent_filter if request else None,
                                          custom_data=request.custom_data if request else None))

    # -- speech out --------------------------------------------------------------------------

    def _on_spoken(self, request: SpeechRequest) -> None:
        """On the speak thread: every request is answered, spoken or not."""
        self._emit(SpeechFinished(request))
        self.counters.add(f"spoken_{request.result.outcome.value}" if request.result else "spoken")

    def _on_speaking(self, speaking: bool) -> None:
        self._speaking = speaking
        self._emit(SpeakingChanged(speaking))


"""Speaker: one request at a time, half-duplex signalling, interrupts, failures that still answer."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.audio.test_alsa import needs_alsa
from tests.tts.joe import joe_voice_path
from tests.tts.test_playback import Device, playback_pcm, run_scenario, tone
from tests.tts.voicegen import decode_id_audio
from voiced.audio.wav import write_wav
from voiced.errors import AudioError, ConfigError
from voiced.tts.audio import AudioChunk, wav_to_chunk
from voiced.tts.playback import AlsaPlayer
from voiced.tts.playconfig import PlaybackConfig
from voiced.tts.requests import SpeakerConfig, SpeechOutcome, SpeechRequest
from voiced.tts.speaker import Speaker
from voiced.tts.voice import PiperVoice


class Rig:
    """A speaker on a scripted device, recording callbacks in order."""

    def __init__(self, voice: PiperVoice | None, device: Device, config: SpeakerConfig | None = None,
                 queue_chunks: int = 32) -> None:
        self.device = device
        self.events: list[Any] = []
        self.finished: list[SpeechRequest] = []
        self.player = AlsaPlayer(PlaybackConfig(device="fake", queue_chunks=queue_chunks), open_pcm=device)
        self.speaker = Speaker(voice, self.player, config or SpeakerConfig(tail_ms=20),
                               on_speaking=self._speaking, on_finished=self._finished)

    def _speaking(self, on: bool) -> None:
        self.events.append(("speaking", on, self.written()))

    def _finished(self, request: SpeechRequest) -> None:
        self.finished.append(request)
        self.events.append(("finished", request.id, request.result.outcome if request.result else None))

    def written(self) -> int:
        return sum(len(b) for p in self.device.pcms for b in p.written) // 2

    def audio(self, pcm: int) -> np.ndarray:
        return np.frombuffer(b"".join(self.device.pcms[pcm].written), "<i2")


@pytest.fixture
def voice(id_voice: Path) -> PiperVoice:
    return PiperVoice.load(id_voice)


def test_speaking_goes_on_before_the_first_audio_and_off_after_the_tail(voice: PiperVoice) -> None:
    rig = Rig(voice, Device({16000: 16000}))
    rig.speaker.start()
    first = rig.speaker.say("Good morning. The kettle is on.", request_id="a")
    second = rig.speaker.say("Anything else?", request_id="b")
    assert first.wait(30) and second.wait(30)
    rig.speaker.close()
    assert rig.events[0] == ("speaking", True, 0)  # muted before a single sample reached the device
    assert rig.events[1:3] == [("finished", "a", SpeechOutcome.COMPLETED), ("finished", "b", SpeechOutcome.COMPLETED)]
    assert rig.events[3][:2] == ("speaking", False) and len(rig.events) == 4  # back to back: no off/on between
    assert [len(s.ids) for s in voice.sentences("Good morning. The kettle is on.")] == \
        [len(d.ids) for d in decode_id_audio(rig.audio(0))]
    result = first.result
    assert result is not None and result.sentences == 2 and result.played_frames == len(rig.audio(0))
    assert result.first_audio_s is not None and result.audio_s == pytest.approx(len(rig.audio(0)) / 16000)


def test_bad_text_fails_the_request_but_answers_it(voice: PiperVoice) -> None:
    rig = Rig(voice, Device({16000: 16000}))
    rig.speaker.start()
    empty = rig.speaker.say("   ", request_id="empty")
    assert empty.wait(30) and empty.result is not None
    assert empty.result.outcome is SpeechOutcome.FAILED and "empty" in (empty.result.error or "")
    ok = rig.speaker.say("Fine.", request_id="ok")
    assert ok.wait(30) and ok.result is not None and ok.result.outcome is SpeechOutcome.COMPLETED
    rig.speaker.close()
    assert [e for e in rig.events if e[0] == "finished"] == [("finished", "empty", SpeechOutcome.FAILED),
                                                             ("finished", "ok", SpeechOutcome.COMPLETED)]
    assert rig.events[0] == ("finished", "empty", SpeechOutcome.FAILED)  # no audio: never muted for it
    assert rig.speaker.stats.failed == 1 and rig.speaker.stats.completed == 1


def test_punctuation_only_completes_with_no_audio(voice: PiperVoice) -> None:
    rig = Rig(voice, Device({16000: 16000}))
    rig.speaker.start()
    dots = rig.speaker.say("...", request_id="dots")
    assert dots.wait(30) and dots.result is not None
    assert dots.result.outcome is SpeechOutcome.COMPLETED and dots.result.error is None
    assert dots.result.sentences == 0 and dots.result.played_frames == 0
    ok = rig.speaker.say("Fine.", request_id="ok")
    assert ok.wait(30) and ok.result is not None and ok.result.outcome is SpeechOutcome.COMPLETED
    rig.speaker.close()
    assert rig.events[0] == ("finished", "dots", SpeechOutcome.COMPLETED)  # nothing played: never muted for it
    assert rig.speaker.stats.failed == 0 and rig.speaker.stats.completed == 2


def test_interrupt_ends_the_current_and_the_queued_requests(voice: PiperVoice) -> None:
    gate = threading.Semaphore(0)
    rig = Rig(voice, Device({16000: 16000}, gate=gate))
    rig.speaker.start()
    long = rig.speaker.say(" ".join(f"Sentence {i} goes on a while." for i in range(20)), request_id="long")
    queued = rig.speaker.say("Never heard.", request_id="queued")
    for _ in range(3):
        gate.release()  # the device takes three periods
    while rig.written() < 3 * 320:
        threading.Event().wait(0.01)
    rig.speaker.interrupt()
    for _ in range(1000):
        gate.release()
    assert long.wait(30) and queued.wait(30)
    assert long.result and long.result.outcome is SpeechOutcome.INTERRUPTED
    assert queued.result and queued.result.outcome is SpeechOutcome.INTERRUPTED and queued.result.played_frames == 0
    assert rig.written() <= 4 * 320  # the write in progress at most
    after = rig.speaker.say("Back again.", request_id="after")  # the speaker goes on
    assert after.wait(30) and after.result and after.result.outcome is SpeechOutcome.COMPLETED
    rig.speaker.close()
    assert rig.device.pcms[0].dropped and rig.speaker.stats.interrupted == 2


def test_a_full_queue_refuses_at_once(voice: PiperVoice) -> None:
    rig = Rig(voice, Device({16000: 16000}), SpeakerConfig(max_pending=1))
    kept = rig.speaker.say("One.", request_id="kept")  # not started: requests wait
    refused = rig.speaker.say("Two.", request_id="refused")
    assert refused.done.is_set() and refused.result and refused.result.outcome is SpeechOutcome.FAILED
    assert "too many requests" in (refused.result.error or "") and rig.finished == [refused]
    rig.speaker.start()
    assert kept.wait(30) and kept.result and kept.result.outcome is SpeechOutcome.COMPLETED
    rig.speaker.close()
    assert rig.speaker.stats.refused == 1


def test_play_bytes_plays_a_wav_exactly(tmp_path: Path) -> None:
    rig = Rig(None, Device({22050: 22050}))
    audio = tone(22050, 0.3)
    buf = tmp_path / "reply.wav"
    write_wav(buf, audio, 22050)
    chunk = wav_to_chunk(buf.read_bytes())
    assert chunk.sample_rate == 22050 and np.array_equal(chunk.samples, audio)
    rig.speaker.start()
    req = rig.speaker.play(chunk, request_id="wav")
    assert req.wait(30) and req.result and req.result.outcome is SpeechOutcome.COMPLETED
    rig.speaker.close()
    np.testing.assert_array_equal(rig.audio(0), audio)
    with pytest.raises(ConfigError, match="no voice"):
        rig.speaker.say("Hi.")


def test_wav_to_chunk_downmixes_and_rejects_garbage(tmp_path: Path) -> None:
    stereo = np.stack([np.full(100, 1000, np.int16), np.full(100, 3000, np.int16)], axis=1)
    write_wav(tmp_path / "stereo.wav", stereo, 16000)
    chunk = wav_to_chunk((tmp_path / "stereo.wav").read_bytes())
    assert chunk.channels == 1 and chunk.sample_rate == 16000 and np.all(chunk.samples == 2000)
    with pytest.raises(AudioError, match="not a RIFF/WAVE file"):
        wav_to_chunk(b"not a wav file")


def test_a_wav_from_the_network_is_read_in_memory_and_named_by_its_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It went through a temporary file: a full or read-only /tmp lost it (an OSError, unanswered),
    and errors named voiced-play-XXXX.wav instead of the request."""
    write_wav(tmp_path / "x.wav", np.full(100, 1000, np.int16), 16000)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "no such directory"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    assert np.all(wav_to_chunk((tmp_path / "x.wav").read_bytes(), "playBytes r1").samples == 1000)
    with pytest.raises(AudioError, match="^playBytes r7: "):
        wav_to_chunk(b"RIFF\x00\x00", "playBytes r7")


def test_run_as_a_supervised_stage(voice: PiperVoice) -> None:
    rig = Rig(voice, Device({16000: 16000}))
    stop, beats = threading.Event(), [0]

    def beat() -> None:
        beats[0] += 1

    stage = threading.Thread(target=rig.speaker.run, args=(stop, beat))
    stage.start()
    req = rig.speaker.say("Supervised.", request_id="s")
    assert req.wait(30) and req.result and req.result.outcome is SpeechOutcome.COMPLETED
    queued_then_stopped = [rig.speaker.say(f"Left over {i}.") for i in range(3)]
    stop.set()
    stage.join(30)
    assert not stage.is_alive() and beats[0] > 0
    assert all(r.done.is_set() for r in queued_then_stopped)
    assert {r.result.outcome for r in queued_then_stopped if r.result} <= {SpeechOutcome.INTERRUPTED,
                                                                          SpeechOutcome.COMPLETED}
    rig.player.close()


def test_heartbeat_goes_on_while_the_device_is_slow(voice: PiperVoice) -> None:
    gate = threading.Semaphore(0)  # the device takes nothing until released
    rig = Rig(voice, Device({16000: 16000}, gate=gate), queue_chunks=1)
    stop, beats = threading.Event(), [0]

    def beat() -> None:
        beats[0] += 1

    stage = threading.Thread(target=rig.speaker.run, args=(stop, beat))
    stage.start()
    rig.speaker.say(" ".join(f"Sentence {i}." for i in range(10)))
    before = None
    while before is None or beats[0] < before + 20:  # the speak thread waits for room, beating meanwhile
        threading.Event().wait(0.01)
        before = beats[0] if before is None else before
    assert rig.written() == 0
    stop.set()
    rig.speaker.interrupt()
    for _ in range(100):
        gate.release()
    stage.join(30)
    rig.player.close()
    assert not stage.is_alive()


def test_speaker_config_validation() -> None:
    with pytest.raises(ConfigError) as err:
        SpeakerConfig(tail_ms=-1)
    assert err.value.key == "tail_ms"
    with pytest.raises(ConfigError, match=r"tts.max_pending in v.toml"):
        SpeakerConfig.from_dict({"max_pending": 0}, source="v.toml")
    with pytest.raises(ConfigError, match="unknown key"):
        SpeakerConfig.from_dict({"tail": 1})
    assert SpeakerConfig.from_dict({"tail_ms": 500}).tail_ms == 500


def test_chunk_layout_is_checked() -> None:
    with pytest.raises(ValueError):
        AudioChunk(np.zeros(4, np.float32), 16000)
    chunk = AudioChunk(np.arange(4, dtype=np.int16), 16000)
    assert chunk.frames == 4 and chunk.duration == 4 / 16000 and chunk.to_bytes() == np.arange(4, dtype="<i2").tobytes()


def test_threads_are_named_and_pinned(voice: PiperVoice) -> None:
    import os

    cpu = min(os.sched_getaffinity(0))
    seen: dict[str, Any] = {}

    def record(who: str) -> None:
        seen[who] = (threading.current_thread().name, os.sched_getaffinity(0))

    player = AlsaPlayer(PlaybackConfig(device="fake"), open_pcm=Device({16000: 16000}), cpus={cpu},
                        on_thread_start=lambda: record("play"))
    speaker = Speaker(voice, player, cpus={cpu}, on_thread_start=lambda: record("speak"))
    speaker.start()
    request = speaker.say("Pinned.")
    assert request.wait(30) and request.result and request.result.outcome is SpeechOutcome.COMPLETED
    speaker.close()
    assert seen == {"play": ("play", {cpu}), "speak": ("speak", {cpu})}


@needs_alsa
def test_a_device_that_does_not_open_never_turns_speaking_on(tmp_path: Path) -> None:
    """An unplugged speaker made the "speaking" sensor blip on and off for every request, though nothing
    was heard: speaking went on when the first audio was ready, before the device failed to open."""
    out = tmp_path / "spk.raw"
    voice = str(joe_voice_path())
    missing = run_scenario(tmp_path, playback_pcm("spk", out), voice=voice, mode="speaker",
                           config={"device": "unplugged"}, texts=["The kitchen light is on."])
    (result,) = missing["results"]
    assert result["outcome"] == "failed" and "cannot open playback device unplugged" in result["error"]
    assert missing["events"] == ["0"]  # answered, and never speaking
    present = run_scenario(tmp_path, playback_pcm("spk", out), voice=voice, mode="speaker",
                           config={"device": "spk"}, texts=["The kitchen light is on."])
    assert [r["outcome"] for r in present["results"]] == ["completed"]
    assert present["events"] == [True, "0", False]
    assert present["results"][0]["frames"] == len(np.fromfile(out, dtype="<i2")) > 0  # and it was heard

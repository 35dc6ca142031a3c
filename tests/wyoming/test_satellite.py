"""voiced run as a Wyoming satellite, driven by a test client playing Home Assistant's part.

Real parts only: ``voiced run`` as a process, real libasound through the ALSA file plugin (the
microphone a FIFO this test writes in 100 ms steps, the speaker a raw file), the real alexa head,
real Silero, a real mosquitto; the command is spoken by the real joe voice and what the
satellite streams is checked by real Whisper. Flow: run-satellite → "alexa" + command in the
room → detection, run-pipeline, the command's audio (ended by our endpointer) → Home Assistant's
transcript and TTS audio back → played through our speaker → played.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.ping import Ping
from wyoming.satellite import PauseSatellite, RunSatellite
from wyoming.timer import TimerFinished, TimerStarted
from wyoming.tts import Synthesize

from tests.audio.test_alsa import file_pcm, needs_alsa
from tests.mqtt.test_voice_daemon import Room, voiced_run
from tests.mqtt.test_whisper_daemon import _spoken
from tests.support import free_port
from tests.tts.test_playback import playback_pcm
from tests.tts.joe import joe_voice_path
from voiced.audio.wav import read_wav, write_wav

COMMAND = "Turn on the kitchen light."


async def _connect(port: int, proc: subprocess.Popen) -> AsyncTcpClient:
    deadline = time.monotonic() + 60
    while True:
        client = AsyncTcpClient("127.0.0.1", port)
        try:
            await client.connect()
            return client
        except OSError:
            assert proc.poll() is None, "voiced run exited"
            assert time.monotonic() < deadline, "the Wyoming server never listened"
            await asyncio.sleep(0.2)


async def _listening(sat: Satellite) -> None:
    await (await _connect(sat.port, sat.proc)).disconnect()


async def _next(client: AsyncTcpClient, timeout: float = 30) -> Event:
    event = await asyncio.wait_for(client.read_event(), timeout)
    assert event is not None, "the satellite closed the connection"
    return event


@dataclass
class Satellite:
    """``voiced run`` as a satellite: its Wyoming port, process, microphone (a Room) and speaker file."""

    port: int
    proc: subprocess.Popen
    room: Room
    speaker: Path


@contextlib.contextmanager
def satellite(tmp_path: Path, broker, models: Path, wyoming: str = "", speaker_file: str | None = None,
              sections: str = "", daemon: str = "", tts: str = "", command: str = "run") -> Iterator[Satellite]:
    """A satellite in the den: real Silero, the real alexa head, a real broker; ``wyoming``: more
    keys; ``speaker_file``: the ALSA file plugin's file (default: speaker.raw); ``sections``: more TOML;
    ``daemon``, ``tts``: more keys of theirs; ``command``: ``voiced run`` or ``voiced wyoming`` (no
    --listen-mode: a satellite with wake words listens in wake mode by itself)."""
    fifo, speaker = tmp_path / "mic.fifo", tmp_path / "speaker.raw"
    if not fifo.exists():  # a second start in the same directory (a restart) reuses it
        os.mkfifo(fifo)
    (tmp_path / "asoundrc").write_text(playback_pcm("spk", speaker_file or speaker) + file_pcm("mic", fifo))
    port = free_port()
    (tmp_path / "voiced.toml").write_text(f"""
[site]
id = "den"
[audio]
source = "alsa:mic"
[vad]
kind = "silero"
model = "{models / 'silero_vad_v5' / 'silero_vad.onnx'}"
[wake]
directory = "{models / 'openwakeword'}"
models = ["alexa_v0.1"]
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
{daemon}
[tts]
tail_ms = 300
{tts}
[playback]
device = "spk"
[wyoming]
uri = "tcp://127.0.0.1:{port}"
zeroconf = false
satellite = true
area = "Den"
{wyoming}
{sections}
""")
    room = Room(fifo)
    with voiced_run(tmp_path, command=command) as proc:
        try:
            yield Satellite(port, proc, room, speaker)
        finally:
            room.stop.set()


@needs_alsa
@pytest.mark.shared
def test_home_assistant_drives_the_satellite_wake_word_to_played(tmp_path, broker, whisper_model_dir,
                                                                 models, speech) -> None:
    # `voiced wyoming` without --listen-mode: in "always" the wake word's own utterance ended every
    # pipeline and Home Assistant heard only "alexa"
    with satellite(tmp_path, broker, models, command="wyoming") as sat:
        port, proc, room, speaker = sat.port, sat.proc, sat.room, sat.speaker
        alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
        gap = np.zeros(16000, np.float32)
        from voiced.tts import PiperVoice, SynthesisOptions

        voice = PiperVoice.load(joe_voice_path())
        reply = np.concatenate([c.samples for c in voice.synthesize("The kitchen light is on.",
                                                                    SynthesisOptions(noise_scale=0, noise_w=0))])

        async def home_assistant() -> tuple[list[Event], np.ndarray, list[str]]:
            client = await _connect(port, proc)
            await client.write_event(Describe().event())
            info = Info.from_event(await _next(client))
            assert info.satellite is not None and info.satellite.area == "Den"
            assert info.satellite.active_wake_words == ["alexa_v0.1"]
            await client.write_event(RunSatellite().event())
            # a pause after the wake word longer than the endpointer's silence, as people make
            room.say(np.concatenate([gap, alexa, gap, gap[:3200], _spoken(COMMAND, exact=True), gap, gap]))
            got = [await _next(client, 60)]
            while got[-1].type != "audio-stop":
                got.append(await _next(client))
            heard = np.frombuffer(b"".join(e.payload or b"" for e in got if e.type == "audio-chunk"), "<i2")
            # Home Assistant's side: its transcript, the reply's text, then the reply's audio to play
            await client.write_event(Transcript(text=COMMAND).event())
            await client.write_event(Synthesize(text="The kitchen light is on.").event())
            pcm = reply.astype("<i2").tobytes()
            await client.write_event(AudioStart(rate=22050, width=2, channels=1).event())
            for i in range(0, len(pcm), 4096):
                await client.write_event(AudioChunk(rate=22050, width=2, channels=1, audio=pcm[i:i + 4096]).event())
            await client.write_event(AudioStop().event())
            after = [await _next(client)]
            while after[-1].type != "played":
                after.append(await _next(client))
            # paused: a second "alexa" starts nothing
            await client.write_event(PauseSatellite().event())
            await asyncio.sleep(0.5)
            room.say(np.concatenate([gap, alexa, gap, gap]))
            quiet = []
            try:
                while True:
                    quiet.append((await _next(client, 6)).type)
            except asyncio.TimeoutError:
                pass
            await client.disconnect()
            return got, heard, quiet

        got, heard, quiet = asyncio.run(home_assistant())

    types = [e.type for e in got]
    assert types[:3] == ["detection", "run-pipeline", "audio-start"], types[:5]
    assert got[0].data["name"] == "alexa_v0.1"
    assert got[1].data["start_stage"] == "asr" and got[1].data["end_stage"] == "tts"
    assert (got[2].data["rate"], got[2].data["width"], got[2].data["channels"]) == (16000, 2, 1)
    # what the satellite streamed is the command, from the wake word's end (the wake word itself made
    # Home Assistant's agent match no intent), ended by our endpointer, not the timeout
    assert 1.0 < len(heard) / 16000 < 8.0
    from voiced.asr.loader import load_recognizer

    asr = load_recognizer(whisper_model_dir)
    stream = asr.create_stream()
    stream.accept_waveform(heard.astype(np.float32) / 32768)
    text = asr.finish(stream).text.lower()
    assert "kitchen light" in text and "alexa" not in text, text
    # Home Assistant's reply went out through our speaker, sample for sample
    played = np.frombuffer(speaker.read_bytes(), "<i2")
    assert len(played) >= len(reply)
    start = int(np.argmax(np.abs(played) > 0))
    assert np.array_equal(played[start:start + 2000], reply[int(np.argmax(np.abs(reply) > 0)):][:2000])
    assert quiet == []


@needs_alsa
@pytest.mark.shared
def test_a_wake_word_with_no_command_after_it_ends_the_stream_at_the_timeout(tmp_path, broker, models,
                                                                            speech) -> None:
    """"Alexa", then nothing: the satellite's stream ends when ``[wake] timeout_s`` (5 s) runs out with no
    speech, not after ``max_audio_s`` (20 s here) of silence Home Assistant has to transcribe."""
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    with satellite(tmp_path, broker, models, "max_audio_s = 20.0") as sat:

        async def home_assistant() -> list[Event]:
            client = await _connect(sat.port, sat.proc)
            await client.write_event(RunSatellite().event())
            sat.room.say(np.concatenate([np.zeros(16000, np.float32), alexa]))  # silence from then on
            got = [await _next(client, 60)]
            while got[-1].type != "audio-stop":
                got.append(await _next(client))
            await client.disconnect()
            return got

        got = asyncio.run(home_assistant())
    assert [e.type for e in got[:3]] == ["detection", "run-pipeline", "audio-start"]
    streamed = sum(len(e.payload or b"") for e in got if e.type == "audio-chunk") / 2 / 16000
    assert 5.0 <= streamed < 7.0, streamed  # the timeout after the wake word, plus the pre-roll


_T = np.arange(4800) / 16000
BELL = np.round(0.4 * 32767 * np.sin(2 * np.pi * (600 + 1000 * _T) * _T)).astype("<i2")
"""0.3 s sweeping up from 600 Hz: no stretch of it repeats within it."""


def _rings(pcm: np.ndarray) -> int:
    """Times the bell was played into ``pcm``."""
    return pcm.astype("<i2").tobytes().count(BELL[1:201].tobytes())


@needs_alsa
@pytest.mark.shared
def test_a_finished_timer_rings_and_the_wake_word_between_rings_answers_it(tmp_path, broker, models, speech) -> None:
    """Home Assistant keeps a voice timer's time and sends ``timer-finished``: the satellite rings
    its bell ``timer_rings`` times; the wake word said in a gap stops the rest (and starts a
    pipeline, as ever). Then an announcement plays as Home Assistant sends one."""
    write_wav(tmp_path / "bell.wav", BELL, 16000)
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    keys = 'timer_finished_wav = "bell.wav"\ntimer_rings = 2\ntimer_ring_gap_s = 5.0'
    # each ring is a playback of its own, and the file plugin rewrites its file per playback: a pipe appends
    with satellite(tmp_path, broker, models, keys, speaker_file=f"|cat >>{tmp_path / 'speaker.raw'}") as sat:

        def played() -> np.ndarray:
            return np.frombuffer(sat.speaker.read_bytes() if sat.speaker.exists() else b"", "<i2")

        async def rung(since: int, count: int) -> None:
            deadline = time.monotonic() + 30
            while _rings(played()[since:]) < count:
                assert time.monotonic() < deadline, f"{_rings(played()[since:])} of {count} rings"
                await asyncio.sleep(0.1)

        async def home_assistant() -> tuple[int, int, Event]:
            client = await _connect(sat.port, sat.proc)
            await client.write_event(RunSatellite().event())
            await client.write_event(TimerStarted(id="pasta", total_seconds=1, name="pasta").event())
            await client.write_event(TimerFinished(id="pasta").event())
            await rung(0, 2)
            await asyncio.sleep(6.0)  # longer than a gap: no third ring comes
            unanswered, before = _rings(played()), len(played())
            await client.write_event(TimerFinished(id="tea").event())
            await rung(before, 1)
            sat.room.say(np.concatenate([np.zeros(16000, np.float32), alexa, np.zeros(8000, np.float32)]))
            detection = await _next(client)
            while detection.type != "detection":
                detection = await _next(client)
            await asyncio.sleep(6.0)  # the ring left would have come by now
            answered = _rings(played()[before:])
            # a timer event without its id is answered with an error; the satellite lives on
            await client.write_event(Event(type="timer-finished", data={}))
            while (event := await _next(client)).type != "error":
                pass
            assert "timer-finished" in event.data["text"]
            await client.write_event(Ping(text="still there").event())
            while (pong := await _next(client)).type != "pong":
                pass
            assert pong.data["text"] == "still there"
            # an announcement (Home Assistant's assist_satellite.announce): audio outside any pipeline,
            # played through our speaker and answered with played, as a pipeline's reply is
            announced = len(played())
            pcm = BELL[::-1].tobytes()  # the bell backwards: not a ring
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            for i in range(0, len(pcm), 2048):
                await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + 2048]).event())
            await client.write_event(AudioStop().event())
            while (await _next(client)).type != "played":
                pass
            assert pcm in played()[announced:].tobytes()
            await client.disconnect()
            return unanswered, answered, detection

        unanswered, answered, detection = asyncio.run(home_assistant())
    assert unanswered == 2
    assert answered == 1
    assert detection.data["name"] == "alexa_v0.1"


_ODD_STARTS = [  # an audio-start Home Assistant should never send, and what its error must name
    ({"rate": 16000, "width": 2, "channels": 0}, "channels 0"),
    ({"rate": 0, "width": 2, "channels": 1}, "rate 0"),
    ({"rate": 10**9, "width": 2, "channels": 1}, "rate 1000000000"),
    ({"rate": "16000", "width": 2, "channels": 1}, "rate '16000'"),
    ({"width": 2, "channels": 1}, "rate None"),
    ({"rate": 16000, "width": 2, "channels": 1000}, "channels 1000"),
    ({"rate": 16000, "width": 4, "channels": 1}, "width 4"),
]


@needs_alsa
@pytest.mark.shared
def test_odd_replies_are_answered_with_errors_and_a_frame_split_between_chunks_still_plays(tmp_path, broker,
                                                                                           models) -> None:
    """What Home Assistant sends the satellite to play is checked when it starts: a rate, width or
    channel count out of range is an error naming it, and the connection lives on (channels 0
    dropped the client with a ZeroDivisionError). A 16-bit frame split between two chunks plays
    whole (an odd-length chunk was an error, and the reply lost)."""
    reply = _noise(1.0)
    pcm = reply.tobytes()
    with satellite(tmp_path, broker, models) as sat:

        async def home_assistant() -> tuple[list[list[Event]], list[Event]]:
            client = await _connect(sat.port, sat.proc)
            await client.write_event(RunSatellite().event())
            answers = []
            for i, (data, _) in enumerate(_ODD_STARTS):
                await client.write_event(Event(type="audio-start", data=data))
                await client.write_event(Event(type="audio-chunk", data=data, payload=b"\x01\x00" * 100))
                await client.write_event(AudioStop().event())
                await client.write_event(Ping(text=str(i)).event())
                answers.append([await _next(client)])
                while answers[-1][-1].type != "pong":
                    answers[-1].append(await _next(client))
            after = await _play_reply(client, pcm)
            await client.disconnect()
            return answers, after

        answers, after = asyncio.run(home_assistant())
        assert sat.proc.poll() is None
        played = _last_playback(sat.speaker)
    for (_, named), answer in zip(_ODD_STARTS, answers):
        types = [e.type for e in answer]
        assert types == ["error", "error", "error", "pong"], (named, types)  # start, then chunk and stop without one
        assert answer[0].data["text"].startswith("audio-start") and named in answer[0].data["text"], answer[0].data
    assert [e.type for e in after] == ["played"]
    assert _played_last(played, reply)
    assert "Traceback" not in (tmp_path / "voiced.log").read_text()


def _noise(seconds: float) -> np.ndarray:
    """22,050 Hz noise: no stretch of it repeats."""
    return np.round(np.random.default_rng(7).normal(0, 3000, int(22050 * seconds))).astype("<i2")


async def _play_reply(client: AsyncTcpClient, pcm: bytes) -> list[Event]:
    """Home Assistant's reply, 22,050 Hz, in chunks of odd length (every one ends inside a frame);
    what comes back up to ``played``."""
    await client.write_event(AudioStart(rate=22050, width=2, channels=1).event())
    for i in range(0, len(pcm), 4001):
        await client.write_event(AudioChunk(rate=22050, width=2, channels=1, audio=pcm[i:i + 4001]).event())
    await client.write_event(AudioStop().event())
    after = [await _next(client)]
    while after[-1].type != "played":
        after.append(await _next(client))
    return after


def _last_playback(speaker: Path) -> np.ndarray:
    """What the speaker played last: the file plugin writes each playback to a new file once
    ``speaker`` exists (speaker.0001, …)."""
    return np.frombuffer(sorted(speaker.parent.glob(speaker.name + "*"))[-1].read_bytes(), "<i2")


def _played_last(played: np.ndarray, reply: np.ndarray) -> bool:
    """Whether ``reply`` begins the playback ``played`` (at its first sound)."""
    start = int(np.argmax(played != 0))
    return bool(np.array_equal(played[start:start + len(reply)], reply))


_CLIENTS = 300
"""Generated clients (about 3 s of the test here)."""


@needs_alsa
@pytest.mark.shared
def test_generated_home_assistant_events_are_served_and_the_satellite_plays_on(tmp_path, broker, models) -> None:
    """Clients of an armed satellite drawn by Hypothesis (``satellite_case`` of the Wyoming fuzz: replies and
    announcements with odd formats and chunk lengths, timers with odd ids, pipeline progress, pauses, in
    scripted or any order): each must have its closing ping answered, every byte the satellite sends must
    parse with the ``wyoming`` library's reader with no stream out of order, and nothing may reach the log
    as an error. Then a reply still plays, sample for sample."""
    from hypothesis import HealthCheck, given, seed, settings

    from voiced.bench.fuzz_wyoming import Verdict, judge, run_client
    from voiced.bench.fuzz_wyoming_cases import Case, satellite_case

    reply = _noise(0.5)
    keys = "max_audio_s = 3.0\nread_timeout_s = 2.0\ntimer_rings = 1"
    with satellite(tmp_path, broker, models, keys) as sat:
        asyncio.run(_listening(sat))
        verdicts: Counter[str] = Counter()
        failures: list[tuple[str, str, list[str]]] = []
        kinds: Counter[str] = Counter()

        @seed(3)
        @settings(max_examples=_CLIENTS, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(satellite_case())
        def one(case: Case) -> None:
            marker = f"satellite-{sum(verdicts.values())}"
            seen = asyncio.run(run_client(sat.port, case, marker, 60.0))
            verdict, events = judge(case, seen, marker)
            verdicts[verdict.value] += 1
            kinds.update(p.header["type"] for p in case.parts)  # type: ignore[union-attr]
            if verdict is not Verdict.ANSWERED:
                failures.append((verdict.value, case.summary(), [e.type for e in events]))

        one()

        async def home_assistant() -> list[Event]:
            client = await _connect(sat.port, sat.proc)
            await client.write_event(RunSatellite().event())
            after = await _play_reply(client, reply.tobytes())
            await client.disconnect()
            return after

        after = asyncio.run(home_assistant())
        assert sat.proc.poll() is None
        played = _last_playback(sat.speaker)
    assert failures == [], failures[:3]
    assert verdicts["answered"] == _CLIENTS, verdicts
    assert min(kinds[t] for t in ("audio-start", "audio-chunk", "timer-finished", "run-pipeline")) >= 5, kinds
    assert [e.type for e in after] == ["played"] and _played_last(played, reply)
    log = (tmp_path / "voiced.log").read_text()
    assert [line for line in log.splitlines() if line.startswith(("ERROR", "CRITICAL", "Traceback"))] == []

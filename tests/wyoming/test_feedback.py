"""Feedback sounds: the wake word is answered by a rising blip, the end of the command by a falling
one, and the command said after the blip reaches Home Assistant whole.

Real parts: ``voiced run`` as a satellite (the harness of test_satellite.py: the microphone a FIFO
written in 100 ms steps, the speaker a raw file behind the ALSA file plugin), the real alexa head,
real Silero, a real mosquitto carrying the Hermes toggle and the daemon's stats; the command is
the real joe voice's and what the satellite streamed is checked by real Whisper.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest
from wyoming.event import Event
from wyoming.satellite import RunSatellite

from tests.audio.test_alsa import needs_alsa
from tests.mqtt.conftest import raw_publish
from tests.mqtt.test_whisper_daemon import _spoken
from tests.wyoming.test_satellite import COMMAND, _connect, _next, satellite
from voiced.audio.wav import read_wav, write_wav
from voiced.config import Config
from voiced.errors import ConfigError
from voiced.tts.cues import heard_blip, wake_blip
from voiced.tts.tones import TONE_RATE

FEEDBACK = "[feedback]\nwake = true\nheard = true"


def _at(played: bytes, sound: np.ndarray) -> list[int]:
    """Where the whole of ``sound`` was played in ``played``, in samples (the blips share their notes)."""
    needle, found, start = sound.astype("<i2").tobytes(), [], 0
    while (i := played.find(needle, start)) >= 0:
        if i % 2 == 0:
            found.append(i // 2)
        start = i + 1
    return found


@needs_alsa
@pytest.mark.shared
def test_the_wake_word_is_answered_by_a_blip_and_the_command_after_it_is_heard_whole(
        tmp_path, broker, subscriber_factory, whisper_model_dir, models, speech) -> None:
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    gap = np.zeros(16000, np.float32)
    command = _spoken(COMMAND, exact=True)
    stats = subscriber_factory(broker, "voiced/den/stats")
    speaker = tmp_path / "speaker.raw"
    # each blip is a playback of its own, and the file plugin rewrites its file per playback: a pipe appends
    with satellite(tmp_path, broker, models, speaker_file=f"|cat >>{speaker}", sections=FEEDBACK,
                   daemon="stats_interval_s = 1") as sat:

        def played() -> bytes:
            return speaker.read_bytes() if speaker.exists() else b""

        async def command_heard(client) -> tuple[list[Event], np.ndarray]:
            # the user waits for the blip (1 s after the wake word), then speaks
            sat.room.say(np.concatenate([gap, alexa, gap, command, gap, gap]))
            got = [await _next(client, 60)]
            while got[-1].type != "audio-stop":
                got.append(await _next(client))
            heard = np.frombuffer(b"".join(e.payload or b"" for e in got if e.type == "audio-chunk"), "<i2")
            return got, heard

        async def home_assistant() -> tuple[list[Event], np.ndarray, bytes, list[Event], bytes]:
            client = await _connect(sat.port, sat.proc)
            await client.write_event(RunSatellite().event())
            got, heard = await command_heard(client)
            deadline = time.monotonic() + 30
            while not _at(played(), heard_blip().samples):
                assert time.monotonic() < deadline, "no heard blip after the command"
                await asyncio.sleep(0.1)
            first = played()
            # a dialogue manager silences the sounds over Hermes: the next wake word plays none
            raw_publish(broker, "hermes/feedback/sound/toggleOff", b'{"siteId": "den"}')
            await asyncio.sleep(1.0)
            again, _ = await command_heard(client)
            await asyncio.sleep(2.0)  # a heard blip would have played by now
            await client.disconnect()
            return got, heard, first, again, played()

        got, heard, first, again, last = asyncio.run(home_assistant())

    assert [e.type for e in got[:3]] == ["detection", "run-pipeline", "audio-start"]
    # the wake blip, then the heard blip, each once, at the built-in sounds' own rate
    wake_at, heard_at = _at(first, wake_blip().samples), _at(first, heard_blip().samples)
    assert len(wake_at) == 1 and len(heard_at) == 1 and wake_at[0] < heard_at[0], (wake_at, heard_at)
    # the command said after the blip reached Home Assistant whole
    from voiced.asr.loader import load_recognizer

    asr = load_recognizer(whisper_model_dir)
    stream = asr.create_stream()
    stream.accept_waveform(heard.astype(np.float32) / 32768)
    assert "turn on the kitchen light" in asr.finish(stream).text.lower().replace(",", "")
    # the microphone was muted for the blip (and the tail after it); both blips were counted
    stats.wait_for(lambda ms: any(json.loads(p)["counters"].get("feedback_sounds", 0) >= 2 for _, p, _ in ms),
                   "stats counting both sounds")
    counters = json.loads(stats.payloads()[-1])["counters"]  # the last, after the second command
    assert counters["feedback_sounds"] == 2 and counters.get("windows_muted", 0) >= 3
    # toggled off: the second wake word was still heard, with no blip
    assert [e.type for e in again[:3]] == ["detection", "run-pipeline", "audio-start"]
    assert last == first


def test_built_in_blips_rise_and_fall_a_fifth_briefly_and_softly() -> None:
    for blip, notes in ((wake_blip(), (880.0, 1318.5)), (heard_blip(), (1318.5, 880.0))):
        assert blip.sample_rate == TONE_RATE and blip.channels == 1
        assert 0.15 < blip.duration < 0.25  # short enough to speak right after
        peak = int(np.max(np.abs(blip.samples.astype(np.int32))))
        assert 0.3 * 32767 < peak <= 0.35 * 32767 + 1  # softer than the timer bell's 0.5
        assert abs(int(blip.samples[0])) < 100  # no click
        halves = np.split(blip.samples[: len(blip.samples) // 2 * 2].astype(np.float64), 2)
        tops = [np.argmax(np.abs(np.fft.rfft(h))) * TONE_RATE / len(h) for h in halves]
        assert tops == [pytest.approx(n, abs=12) for n in notes]


def test_feedback_keys_are_checked_and_wavs_are_relative_to_the_config(tmp_path: Path) -> None:
    from voiced.core.feedback import Feedback

    write_wav(tmp_path / "ding.wav", np.full(800, 0.25, np.float32), 8000)
    (tmp_path / "voiced.toml").write_text('[feedback]\nwake = true\nwake_wav = "ding.wav"\n')
    config = Config.from_file(tmp_path / "voiced.toml")
    assert config.feedback.wake_wav == tmp_path / "ding.wav" and not config.feedback.heard
    (tmp_path / "bad.toml").write_text('[feedback]\nheard = "yes"\n')
    with pytest.raises(ConfigError, match=r"feedback\.heard.*true or false") as err:
        Config.from_file(tmp_path / "bad.toml")
    assert "bad.toml" in str(err.value)
    (tmp_path / "bad.toml").write_text('[feedback]\nwake = true\nwake_wav = "missing.wav"\n')
    broken = Config.from_file(tmp_path / "bad.toml")  # the file is read when the daemon starts
    with pytest.raises(ConfigError, match=r"feedback\.wake_wav.*missing\.wav") as err:
        Feedback(None, broken.feedback, str(broken.path))  # type: ignore[arg-type]
    assert "bad.toml" in str(err.value)

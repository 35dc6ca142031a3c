"""A long wake sound does not eat the time the user has to speak: ``[wake] timeout_s`` waits while
the microphone is muted for it.

Real parts: ``voiced run --listen-mode wake`` as a process, real libasound (the microphone a FIFO
written in 100 ms steps, the speaker the ALSA file plugin into a pipe read at the sound's own pace,
so the sound takes as long to play as on a real speaker), the real alexa head, real Silero, real
Whisper tiny.en, a real mosquitto; the command is the real joe voice's.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from tests.audio.test_alsa import file_pcm, needs_alsa
from tests.mqtt.test_voice_daemon import Room, voiced_run
from tests.mqtt.test_wake_daemon import wake_toml
from tests.mqtt.test_whisper_daemon import _spoken
from tests.support import wait_until
from tests.tts.test_playback import playback_pcm
from voiced.audio.wav import read_wav, write_wav

_PACE = """import pathlib, sys, time
start, taken = time.monotonic(), 0
while block := sys.stdin.buffer.read(1600):
    taken += len(block)
    time.sleep(max(0.0, start + taken / 32000 - time.monotonic()))  # 16 kHz, 16-bit, mono
    if taken >= int(sys.argv[2]):
        pathlib.Path(sys.argv[1]).touch()  # the whole sound has been heard
"""
SOUND_S = 6.0
TIMEOUT_S = 3.0


@needs_alsa
@pytest.mark.shared
def test_the_command_said_after_a_long_wake_sound_is_heard(tmp_path, broker, subscriber_factory, whisper_model_dir,
                                                           models, speech) -> None:
    """A 6 s wake sound played at its own pace and a 3 s timeout: the command starts 0.8 s after the
    sound has been heard (the microphone is back 0.3 s after it, ``tail_ms``). The timeout counted
    from the wake word had run out by then (the session ended with ``timeout``, the command unheard);
    now the muted seconds are added to it. The margin left (~2 s) is for a listen stage behind the
    clock on a loaded machine: it unmutes at an earlier point of the stream than the clock's."""
    t = np.arange(int(16000 * SOUND_S)) / 16000
    write_wav(tmp_path / "long.wav", (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    (tmp_path / "pace.py").write_text(_PACE)
    fifo = tmp_path / "mic.fifo"
    os.mkfifo(fifo)
    played = tmp_path / "played"
    pace = f"|{sys.executable} {tmp_path / 'pace.py'} {played} {int(32000 * SOUND_S)}"
    (tmp_path / "asoundrc").write_text(playback_pcm("spk", pace) + file_pcm("mic", fifo))  # type: ignore[arg-type]
    (tmp_path / "voiced.toml").write_text(wake_toml(
        broker, "alsa:mic", whisper_model_dir, models, site="den", wake=f"timeout_s = {TIMEOUT_S}",
        daemon="stats_interval_s = 1",
        sections='[feedback]\nwake = true\nwake_wav = "long.wav"\n[playback]\ndevice = "spk"\n[tts]\ntail_ms = 300'))
    alexa = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")[0][:, 0]
    silence = np.zeros(16000, np.float32)
    hermes = subscriber_factory(broker, "hermes/#")
    stats = subscriber_factory(broker, "voiced/den/stats")
    room = Room(fifo)
    try:
        with voiced_run(tmp_path, "--listen-mode", "wake") as proc:
            hermes.wait_subscribed(1)
            stats.wait_count(1)  # running: the microphone is read from now on
            room.say(np.concatenate([silence, alexa]))
            hermes.wait_count(1, "hermes/hotword/alexa_v0.1/detected")
            wait_until(played.exists, 60, "the wake sound played to its end")
            room.say(np.concatenate([silence[:12800], _spoken("Turn on the kitchen light.", exact=True),
                                     silence, silence]))
            hermes.wait_for(lambda ms: any(t in ("hermes/asr/textCaptured", "hermes/dialogueManager/sessionEnded")
                                           for t, _, _ in ms), "the command's transcript or the session's end")
            stats.wait_for(lambda ms: json.loads(ms[-1][1])["counters"].get("feedback_sounds", 0) >= 1
                           and json.loads(ms[-1][1])["counters"].get("windows", 0) > 90, "stats after the command")
            assert proc.poll() is None
    finally:
        room.stop.set()
    captured = [json.loads(p)["text"] for p in hermes.payloads("hermes/asr/textCaptured")]
    counters = json.loads(stats.payloads()[-1])["counters"]
    # the sound held the microphone a second or more past the timeout, as on a real speaker
    assert counters["windows_muted"] >= 10 * (TIMEOUT_S + 1), counters
    assert counters.get("wake_timeouts", 0) == 0, (counters, captured)
    assert [c.lower().strip(".") for c in captured] == ["turn on the kitchen light"], counters
    assert hermes.payloads("hermes/intent/HassTurnOn")

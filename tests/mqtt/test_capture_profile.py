"""The daemon's capture takes [audio]'s ALSA settings, and a hardware profile's [alsa] PCMs are its defaults.

Real parts: ``voiced run`` as a process, real libasound through the ALSA file plugin (the
microphone a FIFO written in 100 ms steps, here interleaved stereo; the speaker a raw file), a
custom hardware profile TOML naming both PCMs, the real alexa and hey_mycroft heads, Silero, and
a real mosquitto. Each channel carries a different real wake word, so the channel heard is the
wake word detected.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.audio.test_alsa import file_pcm, needs_alsa
from tests.mqtt.test_voice_daemon import Room, voiced_run
from tests.support import wait_until
from tests.tts.test_playback import playback_pcm
from voiced.audio.wav import read_wav
from voiced.tts.cues import wake_blip

PROFILE = """name = "den-hat"
description = "a 2-mic HAT on a PC"
[cores]
capture = [0]
listen = [1]
intent = [0]
speak = [1]
mqtt = [0]
[alsa]
capture = "hatmic"
playback = "hatspk"
"""


@needs_alsa
@pytest.mark.shared
def test_channel_and_channels_reach_the_device_and_the_profile_names_the_pcms(
        tmp_path, broker, subscriber_factory, models, speech) -> None:
    fifo, speaker = tmp_path / "mic.fifo", tmp_path / "speaker.raw"
    os.mkfifo(fifo)
    (tmp_path / "asoundrc").write_text(playback_pcm("hatspk", speaker) + file_pcm("hatmic", fifo))
    (tmp_path / "den-hat.toml").write_text(PROFILE)
    (tmp_path / "voiced.toml").write_text(f"""
[site]
id = "den"
[audio]
source = "alsa"                # the profile's capture PCM
channels = 2
channel = 1
[vad]
kind = "silero"
model = "{models / 'silero_vad_v5' / 'silero_vad.onnx'}"
[wake]
directory = "{models / 'openwakeword'}"
models = ["alexa_v0.1", "hey_mycroft_v0.1"]
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
stats_interval_s = 0.5
[hardware]
profile = "den-hat.toml"
[feedback]
wake = true                    # played through the profile's playback PCM: [playback] device is unset
""")
    clip = {name: read_wav(speech / "openwakeword_clips" / f"{name}.wav")[0][:, 0]
            for name in ("alexa_test", "hey_mycroft_test")}
    n = 16000 * 2 + max(len(c) for c in clip.values())
    left, right = np.zeros(n, np.float32), np.zeros(n, np.float32)
    left[16000:16000 + len(clip["hey_mycroft_test"])] = clip["hey_mycroft_test"]  # channel 0
    right[16000:16000 + len(clip["alexa_test"])] = clip["alexa_test"]  # channel 1: the one configured
    hotwords = subscriber_factory(broker, "hermes/hotword/#")
    stats = subscriber_factory(broker, "voiced/den/stats")
    room = Room(fifo)
    with voiced_run(tmp_path, "--listen-mode", "wake"):
        try:
            wait_until(lambda: stats.payloads(), timeout=60, what="the daemon's first stats")
            room.say(np.stack([left, right], axis=1).reshape(-1))  # interleaved, as the PCM delivers it

            def taken() -> float:  # seconds of audio the daemon has taken in (heard or muted)
                counters = json.loads(stats.payloads()[-1])["counters"]
                return (counters.get("windows", 0) + counters.get("windows_muted", 0)) / 10
            wait_until(lambda: taken() >= n / 16000 + 1, timeout=90, what="the stereo audio taken in")
            wait_until(lambda: speaker.exists() and speaker.stat().st_size >= wake_blip().samples.nbytes,
                       timeout=30, what="the wake blip played")
        finally:
            room.stop.set()
    detected = [t for t, _, _ in hotwords.messages if t.endswith("/detected")]
    assert detected == ["hermes/hotword/alexa_v0.1/detected"], (tmp_path / "voiced.log").read_text()[-2000:]
    assert wake_blip().samples.tobytes() in speaker.read_bytes()

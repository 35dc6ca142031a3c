"""Wyoming framing: what the ``wyoming`` library writes, we read; what we write, the library reads; limits hold."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk
from wyoming.event import Event, async_read_event
from wyoming.event import write_event as lib_write_event

from voiced.wyoming.framing import FramingError, Limits, read_event, write_event

LIMITS = Limits(line_bytes=4096, data_bytes=8192, payload_bytes=16384, read_timeout_s=0.3)


def _reader(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=LIMITS.line_bytes)
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


def _lib_bytes(event: Event) -> bytes:
    buf = io.BytesIO()
    lib_write_event(event, buf)
    return buf.getvalue()


class _Sink:
    """A StreamWriter stand-in that keeps what is written (the library only calls these three)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writelines(self, lines) -> None:
        for line in lines:
            self.data += line

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


def test_events_written_by_the_library_read_back_exactly() -> None:
    events = [
        Transcript(text="héllo wörld", language="en").event(),  # data block, non-ASCII
        AudioChunk(rate=16000, width=2, channels=1, audio=bytes(range(256)) * 4).event(),  # payload
        Event(type="describe"),  # nothing but the type
    ]
    stream = b"".join(_lib_bytes(e) for e in events)

    async def read_all() -> list[Event | None]:
        reader = _reader(stream)
        return [await read_event(reader, LIMITS) for _ in range(len(events) + 1)]

    got = asyncio.run(read_all())
    assert got[-1] is None  # a clean end between events
    for mine, sent in zip(got, events):
        assert (mine.type, mine.data, mine.payload) == (sent.type, sent.data, sent.payload or None)


def test_what_we_write_is_byte_for_byte_the_librarys_and_the_library_reads_it() -> None:
    event = AudioChunk(rate=22050, width=2, channels=1, audio=b"\x01\x02" * 300).event()
    sink = _Sink()
    asyncio.run(write_event(event, sink))  # type: ignore[arg-type]
    assert bytes(sink.data) == _lib_bytes(event)
    header = json.loads(bytes(sink.data).split(b"\n", 1)[0])
    assert header["type"] == "audio-chunk" and header["payload_length"] == 600 and "version" in header

    async def lib_read() -> Event | None:
        return await async_read_event(_reader(bytes(sink.data)))

    back = asyncio.run(lib_read())
    assert back is not None and back.payload == event.payload and back.data["rate"] == 22050


@pytest.mark.parametrize("raw, message", [
    (b"not json\n", "not JSON"),
    (b"[1, 2]\n", "JSON object"),
    (b'{"data": {}}\n', "'type'"),
    (b'{"type": "x", "data": [1]}\n', "'data'"),
    (b'{"type": "x", "payload_length": -5}\n', "non-negative"),
    (b'{"type": "x", "payload_length": "12"}\n', "non-negative"),
    (b'{"type": "x", "payload_length": 99999999}\n', "over the limit"),
    (b'{"type": "x", "data_length": 99999999}\n', "over the limit"),
    (b'{"type": "x", "data_length": 5}\n[1,2]', "JSON object"),
    (b'{"type": "x", "data_length": 3}\nab}', "not JSON"),
    (b'{"type": "x", "payload_length": 10}\nshort', "short of the event's end"),
    (b'{"type": "x"', "middle of a header line"),
    (b'{"type": "' + b"a" * 5000 + b'"}\n', "header line over"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_malformed_framing_is_refused_with_a_reason(raw: bytes, message: str) -> None:
    async def read() -> Event | None:
        return await read_event(_reader(raw), LIMITS)

    with pytest.raises(FramingError, match=message):
        asyncio.run(read())


def test_a_half_sent_event_times_out_instead_of_waiting_forever() -> None:
    async def read() -> Event | None:
        reader = _reader(b'{"type": "audio-chunk", "payload_length": 100}\n' + b"x" * 10, eof=False)
        return await read_event(reader, LIMITS)

    with pytest.raises(FramingError, match="not complete within"):
        asyncio.run(read())


def test_a_half_sent_header_line_times_out_and_a_quiet_client_does_not() -> None:
    """A header line begun and never ended would hold one of max_clients' slots for ever; a client
    that sends nothing between events (a satellite waiting) is left alone."""
    async def half_line() -> Event | None:
        async with asyncio.timeout(LIMITS.read_timeout_s * 10):  # a reader that waits for ever fails here
            return await read_event(_reader(b'{"type": "ping"', eof=False), LIMITS)

    with pytest.raises(FramingError, match="header line not complete within"):
        asyncio.run(half_line())

    async def quiet_then_ping() -> Event | None:
        reader = _reader(b"", eof=False)
        pending = asyncio.ensure_future(read_event(reader, LIMITS))
        await asyncio.sleep(LIMITS.read_timeout_s * 3)
        assert not pending.done()
        reader.feed_data(b'{"type": "ping", "data": {"text": "hi"}}\n')
        return await pending

    event = asyncio.run(quiet_then_ping())
    assert event is not None and event.type == "ping" and event.data == {"text": "hi"}

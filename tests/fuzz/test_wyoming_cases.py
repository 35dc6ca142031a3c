"""The Wyoming fuzz's own oracle: a case it calls broken framing really is broken for the server's
reader (``voiced.wyoming.framing.read_event``), so a daemon that serves one is a real failure and
not the generator's lie coming out well formed."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings

from voiced.bench.fuzz_wyoming_cases import Ending, Frame, _broken, event, ping_request
from voiced.wyoming.framing import FramingError, Limits, read_event

_LIMITS = Limits(line_bytes=65_536, data_bytes=1_048_576, payload_bytes=1_048_576, read_timeout_s=0.05)


def _read_all(data: bytes) -> list[str]:
    """Events the server's reader takes from ``data`` until the stream ends or framing breaks, as
    their types (a ping as "ping MARKER"), then "dropped" if framing broke."""

    async def go() -> list[str]:
        reader = asyncio.StreamReader(limit=_LIMITS.line_bytes)
        reader.feed_data(data)
        reader.feed_eof()
        types = []
        try:
            while (got := await read_event(reader, _LIMITS)) is not None:
                types.append(f"ping {got.data.get('text')}" if got.type == "ping" else got.type)
        except FramingError:
            types.append("dropped")
        return types

    return asyncio.run(go())


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_broken())
def test_a_broken_piece_never_lets_the_ping_after_it_through(drawn: tuple[Frame | bytes, Ending]) -> None:
    piece, ending = drawn
    if isinstance(piece, Frame) and piece.cut is None and isinstance(piece.header, dict):
        # a block that lies about its length comes with no payload announced: an announced one would
        # take the block's bytes, and one of the block's length made the lie a well-formed event
        # (seed 17 of `voiced bench fuzz`: the server rightly answered that client's ping)
        if piece.header.get("data_length", 0) != len(piece.block):
            assert "payload_length" not in piece.header, piece.header
    if ending is Ending.PING:  # the fuzz expects the server to drop this client before its ping
        raw = piece.render() if isinstance(piece, Frame) else piece
        assert "ping marker" not in _read_all(raw + ping_request("marker")), raw[:200]


def test_the_reader_sees_a_ping_after_a_well_formed_event() -> None:
    """The check above can see a ping at all: a transcribe with a 14-byte payload, then the ping."""
    raw = event("transcribe", {"text": "hi"}, b"x" * 14).render() + ping_request("marker")
    assert _read_all(raw) == ["transcribe", "ping marker"]

"""Reading Wyoming events with limits; writing them exactly as the ``wyoming`` library does.

A Wyoming event is a JSON header line (``type``, ``data``, ``data_length``, ``payload_length``,
``version``), then ``data_length`` bytes of JSON merged into ``data``, then ``payload_length``
bytes of payload. The library's own reader trusts the lengths it is given; a server on a
home network must not: a header, data or payload over the limit, a half-sent event or bad
JSON raises :class:`FramingError` and the connection is dropped.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from wyoming.event import Event, async_write_event

from voiced.errors import VoicedError

__all__ = ["FramingError", "Limits", "read_event", "write_event"]


class FramingError(VoicedError):
    """A client sent something that is not a Wyoming event within our limits."""


@dataclass(frozen=True)
class Limits:
    line_bytes: int = 65_536
    data_bytes: int = 1_048_576
    payload_bytes: int = 1_048_576
    read_timeout_s: float = 10.0
    """Time allowed for the rest of an event once its first byte has arrived."""


def _length(header: dict[str, object], key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FramingError(f"{key} must be a non-negative integer, got {value!r}")
    if value > limit:
        raise FramingError(f"{key} {value} is over the limit of {limit} bytes")
    return value


async def read_event(reader: asyncio.StreamReader, limits: Limits) -> Event | None:
    """The next event, or None at a clean end of stream (between events).

    The StreamReader must have been created with ``limit`` ≥ ``limits.line_bytes`` (asyncio's
    ``start_server(limit=...)``): an over-long line is refused by the reader itself.
    """
    first = await reader.read(1)  # between events a client may stay quiet for ever (a satellite)
    if not first:
        return None
    try:  # once it has begun, the header line must end in time: half lines would hold max_clients' slots
        async with asyncio.timeout(limits.read_timeout_s):
            line = first if first == b"\n" else first + await reader.readline()
    except ValueError as exc:  # asyncio's LimitOverrunError surfaces as ValueError from readline
        raise FramingError(f"header line over {limits.line_bytes} bytes") from exc
    except TimeoutError as exc:
        raise FramingError(f"header line not complete within {limits.read_timeout_s:g} s") from exc
    if not line.endswith(b"\n"):
        raise FramingError("connection closed in the middle of a header line")
    if len(line) > limits.line_bytes:
        raise FramingError(f"header line over {limits.line_bytes} bytes")
    try:
        header = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FramingError(f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or not isinstance(header.get("type"), str) or not header["type"]:
        raise FramingError("header must be a JSON object with a non-empty string 'type'")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise FramingError("'data' must be a JSON object")
    data_length = _length(header, "data_length", limits.data_bytes)
    payload_length = _length(header, "payload_length", limits.payload_bytes)
    try:
        async with asyncio.timeout(limits.read_timeout_s):
            if data_length:
                extra = json.loads(await reader.readexactly(data_length))
                if not isinstance(extra, dict):
                    raise FramingError("the data block must be a JSON object")
                data = {**data, **extra}
            payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError as exc:
        raise FramingError(f"connection closed {exc.expected - len(exc.partial)} bytes short of the event's end") from exc
    except TimeoutError as exc:
        raise FramingError(f"event not complete within {limits.read_timeout_s:g} s") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FramingError(f"data block is not JSON: {exc}") from exc
    return Event(type=header["type"], data=data, payload=payload)


async def write_event(event: Event, writer: asyncio.StreamWriter) -> None:
    """The library's own writer: Home Assistant's client reads exactly these bytes."""
    await async_write_event(event, writer)

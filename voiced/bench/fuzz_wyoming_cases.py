"""What the Wyoming fuzz sends: Hypothesis strategies for clients of ``voiced run``'s Wyoming port,
and what each must cause.

Each case is one client. Broken framing the server must drop (headers that are not JSON or not
objects, wrong types, negative, huge or lying lengths, data blocks that are not objects, events cut
short or stalled), well-framed events with odd data in any order (audio before audio-start,
transcribe twice, synthesize with empty, 70k-character, control or lone-surrogate text, odd
rates, widths and channels, chunks of odd lengths), and random bytes. A client ends with a ping
and a half-close, vanishes (RST) mid-request, or stalls mid-event, or follows its case with a valid
request that must be answered as on a fresh connection. ``voiced.bench.fuzz_wyoming`` runs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hypothesis import strategies as st

from voiced.bench.fuzz_cases import json_values
from voiced.wyoming.connection import EventType

__all__ = ["FOLLOW_UP_ANSWERS", "SECOND_MARKER", "VERSION", "Case", "Ending", "Expect", "FollowUp", "Frame", "event",
           "follow_up_request", "ping_request", "satellite_case", "wyoming_batches"]

VERSION = "1.10.2"
"""The version field the ``wyoming`` library writes (ignored by the server)."""
_LONG_TEXT = "x" * 70_000  # one shared object: Hypothesis keeps what it generates
_HUGE_LINE = b'{"type": "' + b"x" * 70_000 + b'"}'
_LIMIT = 1_048_576  # the daemon's max_data_bytes and max_payload_bytes (defaults)
_NOT_SERVER_TYPES = ("transcript", "audio-stop", "error", "info", "run-satellite", "pause-satellite", "no-such-event")


class Expect(Enum):
    SERVED = "served"
    """Well framed: the connection must live on and answer the closing ping."""
    DROPPED = "dropped"
    """Broken framing: the server must drop the connection (and count it malformed)."""
    ANY = "any"
    """Random bytes or a client that vanishes: only the server's health is judged."""


class Ending(Enum):
    PING = "ping"
    """A ping with the case's marker, a half-close, then read to the end."""
    CLOSE = "close"
    """A half-close (right after an event cut short), then read to the end."""
    STALL = "stall"
    """Nothing more (mid-event): the server must drop us after its read timeout."""
    VANISH = "vanish"
    """Gone at once with an RST, answers unread: a client that vanished mid-request."""


class FollowUp(Enum):
    """A valid request sent on the same connection after a served case (between two pings): it must be
    answered as on a fresh connection, whatever state the case left behind."""

    DESCRIBE = "describe"
    RECOGNIZE = "recognize"
    SYNTHESIZE = "synthesize"
    TRANSCRIBE = "transcribe"


FOLLOW_UP_ANSWERS = {  # the answers' types, space-separated
    FollowUp.DESCRIBE: r"info",
    FollowUp.RECOGNIZE: r"intent",
    FollowUp.SYNTHESIZE: r"audio-start( audio-chunk)+ audio-stop",
    FollowUp.TRANSCRIBE: r"transcript-start( transcript-chunk)* transcript transcript-stop",
}


def _json(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()  # ASCII: lone surrogates travel as \ud800 escapes


@dataclass(frozen=True)
class Frame:
    """One event as a client sends it: a header line, then a data block and a payload, any of which may lie."""

    header: Any
    block: bytes = b""
    payload: bytes = b""
    cut: int | None = None
    """Send only this many bytes (a client gone mid-event)."""

    def render(self) -> bytes:
        raw = _json(self.header) + b"\n" + self.block + self.payload
        return raw if self.cut is None else raw[:self.cut]


def event(type_: str, data: dict[str, Any] | None = None, payload: bytes = b"", inline: bool = False) -> Frame:
    """A well-framed event, its data in a block as the library writes it, or ``inline`` in the header."""
    header: dict[str, Any] = {"type": type_, "version": VERSION}
    block = b""
    if data:
        encoded = _json(data)
        if inline and len(encoded) < 32_000:  # a header line has a limit; a data block a bigger one
            header["data"] = data
        else:
            block, header["data_length"] = encoded, len(encoded)
    if payload:
        header["payload_length"] = len(payload)
    return Frame(header, block, payload)


@dataclass(frozen=True)
class Case:
    kind: str
    parts: tuple[Frame | bytes, ...]
    expect: Expect
    ending: Ending
    follow_up: FollowUp | None = None
    """Only with Ending.PING: a valid request after the case, then a second ping."""

    def render(self) -> list[bytes]:
        return [p.render() if isinstance(p, Frame) else p for p in self.parts]

    def summary(self, limit: int = 400) -> str:
        """The events' types, then the bytes (cut at ``limit``)."""
        types = [p.header.get("type", "?") if isinstance(p, Frame) and isinstance(p.header, dict) else "raw"
                 for p in self.parts]
        text = repr(b"".join(self.render()))
        follow = f" +{self.follow_up.value}" if self.follow_up else ""
        return f"{self.kind}/{self.ending.value}{follow} {types}: {text[:limit]}{'…' if len(text) > limit else ''}"


# -- strategies ----------------------------------------------------------------------------------

_odd_numbers = (st.sampled_from([0, -1, 1, 3, 7, 384_000, 384_001, 2**31, -2**63, 2**70]) | st.floats()
                | st.text(max_size=6) | st.none() | st.booleans() | json_values)
_formats = st.fixed_dictionaries({
    "rate": st.sampled_from([16_000, 22_050, 44_100, 8_000]) | _odd_numbers,
    "width": st.sampled_from([1, 2, 4]) | _odd_numbers,
    "channels": st.sampled_from([1, 2]) | _odd_numbers,
}) | st.dictionaries(st.sampled_from(["rate", "width", "channels", "timestamp"]), _odd_numbers, max_size=4)
_valid_formats: st.SearchStrategy[dict[str, int]] = st.builds(
    dict, rate=st.sampled_from([16_000, 22_050, 8_000, 1, 384_000]), width=st.sampled_from([1, 2, 4]),
    channels=st.sampled_from([1, 2, 16]))
_odd_texts = st.sampled_from(["", " ", _LONG_TEXT, "\x00", "\x00\x01\x1b[31m\x7f", "\ud800", "a\udfffb. c\ud83d.",
                              "\u202e\ufeff", "Turn on the kitchen light.", "Hello. World! ", "turn on the kitchen light"])
_texts = st.one_of(_odd_texts, _odd_texts, st.text(max_size=40), json_values)  # the odd ones twice as often


def _data(type_: str) -> st.SearchStrategy[dict[str, Any]]:
    """Data for an event of ``type_``: mostly what it needs, with odd values."""
    if type_ in (EventType.AUDIO_START, EventType.AUDIO_CHUNK):
        return _valid_formats | _formats
    if type_ in (EventType.SYNTHESIZE, EventType.SYNTHESIZE_CHUNK, EventType.RECOGNIZE, EventType.PING):
        return st.fixed_dictionaries({"text": _texts}, optional={"voice": json_values})
    if type_ == EventType.DETECT:
        return st.fixed_dictionaries({}, optional={"names": st.lists(st.sampled_from(["alexa", "alexa_v0.1", "x"]))
                                                   | json_values})
    return st.dictionaries(st.text(max_size=8), json_values, max_size=3)


_TYPES = [v for k, v in vars(EventType).items() if k.isupper()] + list(_NOT_SERVER_TYPES)
_SCRIPTS = (
    (EventType.TRANSCRIBE, EventType.AUDIO_START, EventType.AUDIO_CHUNK, EventType.AUDIO_CHUNK, EventType.AUDIO_STOP),
    (EventType.DETECT, EventType.AUDIO_START, EventType.AUDIO_CHUNK, EventType.AUDIO_STOP),
    (EventType.SYNTHESIZE_START, EventType.SYNTHESIZE_CHUNK, EventType.SYNTHESIZE, EventType.SYNTHESIZE_STOP),
    (EventType.SYNTHESIZE_START, EventType.SYNTHESIZE_CHUNK, EventType.SYNTHESIZE_STOP, EventType.SYNTHESIZE),
    (EventType.SYNTHESIZE,), (EventType.RECOGNIZE,), (EventType.DESCRIBE,),
)


def _edited(draw: st.DrawFn, script: tuple[str, ...]) -> list[str]:
    """``script`` with up to three steps dropped, doubled or swapped."""
    types = list(script)
    for edit, i in draw(st.lists(st.tuples(st.sampled_from(["drop", "double", "swap"]), st.integers(0, 9)),
                                 max_size=3)):
        if not types:
            break
        i %= len(types)
        if edit == "drop":
            del types[i]
        elif edit == "double":
            types.insert(i, types[i])
        else:
            types[i - 1], types[i] = types[i], types[i - 1]
    return types


@st.composite
def _events(draw: st.DrawFn, max_size: int = 6) -> list[Frame]:
    """Well-framed events: a real request's script with steps dropped, doubled or swapped, or any types in any order."""
    if draw(st.booleans()):
        types = _edited(draw, draw(st.sampled_from(_SCRIPTS)))
    else:
        types = draw(st.lists(st.sampled_from(_TYPES) | st.text(min_size=1, max_size=12), min_size=1,
                              max_size=max_size))
    frames = []
    for t in types[:max_size]:
        payload = draw(st.binary(max_size=3001)) if t == EventType.AUDIO_CHUNK else b""  # odd lengths too
        frames.append(event(t, draw(_data(t)), payload, inline=draw(st.booleans())))
    return frames


def _line(prefix: bytes) -> st.SearchStrategy[bytes]:
    return st.binary(max_size=200).map(lambda b: prefix + b.replace(b"\n", b"") + b"\n")


_bad_lengths = (st.integers(max_value=-1) | st.integers(min_value=_LIMIT + 1) | st.floats() | st.booleans()
                | st.text(max_size=5) | st.lists(st.integers(0, 9), max_size=2) | st.dictionaries(st.text(max_size=3), st.none()))


@st.composite
def _broken(draw: st.DrawFn) -> tuple[Frame | bytes, Ending]:
    """One piece of broken framing, and how its client ends."""
    kind = draw(st.sampled_from(["not_json", "not_object", "bad_type", "bad_data", "bad_length", "bad_block",
                                 "long_payload", "short_payload", "long_block", "short_block", "huge_line", "cut",
                                 "stall"]))
    ping_or_vanish = st.sampled_from([Ending.PING] * 4 + [Ending.VANISH])
    t = draw(st.sampled_from(_TYPES))
    if kind == "not_json":  # these prefixes cannot start a JSON text, whatever follows
        return draw(st.sampled_from([b"not json", b"\xff", b"{'type", b"]", b'{"type": describe}', b"\x00"])
                    .flatmap(_line)), draw(ping_or_vanish)
    if kind == "not_object":
        return _json(draw(json_values.filter(lambda v: not isinstance(v, dict)))) + b"\n", draw(ping_or_vanish)
    if kind == "bad_type":
        header = draw(st.dictionaries(st.sampled_from(["data", "version"]), json_values, max_size=2))
        bad = draw(st.none() | st.just("") | json_values.filter(lambda v: not isinstance(v, str)))
        return Frame({**header, **({} if bad is None else {"type": bad})}), draw(ping_or_vanish)
    if kind == "bad_data":  # a falsy non-object reads as no data at all
        return Frame({"type": t, "data": draw(json_values.filter(lambda v: bool(v) and not isinstance(v, dict)))}), \
            draw(ping_or_vanish)
    if kind == "bad_length":
        key = draw(st.sampled_from(["data_length", "payload_length"]))
        return Frame({"type": t, key: draw(_bad_lengths)}), draw(ping_or_vanish)
    if kind == "bad_block":
        block = draw(json_values.filter(lambda v: not isinstance(v, dict)).map(_json)
                     | st.binary(max_size=50).map(lambda b: b"\xff" + b) | st.just(b'{"text": "hi"'))
        return Frame({"type": t, "data_length": len(block)}, block), draw(ping_or_vanish)
    frame = event(t, draw(_data(t)) or {"text": "hi"}, draw(st.binary(min_size=1, max_size=500)))
    n_block, n_payload = len(frame.block), len(frame.payload)
    if kind == "long_payload":  # longer than the ping that follows, so the server meets the end of the stream
        lie = {**frame.header, "payload_length": n_payload + draw(st.integers(1_000, 100_000))}
        return Frame(lie, frame.block, frame.payload), Ending.PING
    if kind == "short_payload":  # what is left over starts the next header line: not JSON
        lie = {**frame.header, "payload_length": draw(st.integers(0, n_payload - 1))}
        return Frame(lie, frame.block, frame.payload + b"x"), Ending.PING
    # the block lies, and no payload is sent or announced (an announced one would take the block's
    # bytes, and one of the block's length would make the lie a well-formed event)
    unpaid = {k: v for k, v in frame.header.items() if k != "payload_length"}
    if kind == "long_block":  # a JSON object followed by more than whitespace is not JSON
        lie = {**unpaid, "data_length": n_block + draw(st.integers(1, 100_000))}
        return Frame(lie, frame.block), Ending.PING
    if kind == "short_block":  # an object cut short is not JSON; an empty block leaves it to the next line
        lie = {**unpaid, "data_length": draw(st.integers(0, n_block - 1))}
        return Frame(lie, frame.block), Ending.PING
    if kind == "huge_line":
        return _HUGE_LINE + draw(st.sampled_from([b"\n", b""])), draw(ping_or_vanish)
    raw = frame.render()
    if kind == "cut":
        return Frame(frame.header, frame.block, frame.payload, cut=draw(st.integers(1, len(raw) - 1))), \
            draw(st.sampled_from([Ending.CLOSE, Ending.VANISH]))
    # stall: a whole header line, then part of what it announced, then nothing (the read timeout's case)
    head = len(raw) - n_block - n_payload
    return Frame(frame.header, frame.block, frame.payload, cut=draw(st.integers(head, len(raw) - 1))), Ending.STALL


@st.composite
def _case(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["events", "events", "broken", "broken", "noise"]))
    if kind == "events":
        ending = draw(st.sampled_from([Ending.PING] * 4 + [Ending.VANISH]))
        follow_up = draw(st.none() | st.sampled_from(FollowUp)) if ending is Ending.PING else None
        return Case(kind, tuple(draw(_events())), Expect.SERVED, ending, follow_up)
    if kind == "broken":
        before = draw(_events(max_size=2)) if draw(st.booleans()) else []
        piece, ending = draw(_broken())
        return Case(kind, (*before, piece), Expect.ANY if ending is Ending.VANISH else Expect.DROPPED, ending)
    return Case(kind, (draw(st.binary(max_size=2000)),), Expect.ANY,
                draw(st.sampled_from([Ending.PING, Ending.CLOSE, Ending.VANISH])))


# What Home Assistant sends a satellite (``voiced.wyoming.satellite``): its reply or an announcement
# to play, its pipeline's progress, its timers, and pauses.
_SATELLITE_TYPES = ("run-satellite", "pause-satellite", "run-pipeline", "transcript", "voice-started",
                    "voice-stopped", "error", "synthesize", "timer-started", "timer-updated", "timer-cancelled",
                    "timer-finished", EventType.AUDIO_START, EventType.AUDIO_CHUNK, EventType.AUDIO_STOP,
                    EventType.PING, EventType.DESCRIBE)
_SATELLITE_SCRIPTS = (
    (EventType.AUDIO_START, EventType.AUDIO_CHUNK, EventType.AUDIO_CHUNK, EventType.AUDIO_STOP),
    ("transcript", "synthesize", EventType.AUDIO_START, EventType.AUDIO_CHUNK, EventType.AUDIO_STOP),
    ("timer-started", "timer-updated", "timer-finished", "timer-cancelled"),
    ("run-pipeline", "voice-started", "voice-stopped", "pause-satellite", "run-satellite"),
    ("timer-finished",), ("run-pipeline",),
)
_timer_ids = st.sampled_from(["pasta", "", "x" * 300]) | st.text(max_size=8) | json_values


def _satellite_data(type_: str) -> st.SearchStrategy[dict[str, Any]]:
    if type_.startswith("timer-"):
        return st.fixed_dictionaries({}, optional={"id": _timer_ids, "total_seconds": _odd_numbers,
                                                   "name": _texts, "is_active": json_values})
    return _data(type_)


@st.composite
def satellite_case(draw: st.DrawFn, max_size: int = 6) -> Case:
    """One client of an armed satellite: ``run-satellite``, then well-framed events of Home Assistant's side
    (a script with steps dropped, doubled or swapped, or any in any order) with odd data, then a ping that
    must be answered. Audio to play comes in chunks of any length, frames split between them."""
    if draw(st.booleans()):
        types = _edited(draw, draw(st.sampled_from(_SATELLITE_SCRIPTS)))
    else:
        types = draw(st.lists(st.sampled_from(_SATELLITE_TYPES), min_size=1, max_size=max_size))
    frames = [event("run-satellite")]
    for t in types[:max_size]:
        payload = draw(st.binary(max_size=3001)) if t == EventType.AUDIO_CHUNK else b""
        frames.append(event(t, draw(_satellite_data(t)), payload, inline=draw(st.booleans())))
    return Case("satellite", tuple(frames), Expect.SERVED, Ending.PING)


def wyoming_batches(max_clients: int) -> st.SearchStrategy[list[Case]]:
    """Clients that run at once: mostly one to three, sometimes a crowd over ``max_clients``."""
    few = st.lists(_case(), min_size=1, max_size=3)
    return st.one_of(few, few, few, st.lists(_case(), min_size=max_clients + 1, max_size=3 * max_clients))


# -- client scripts ----------------------------------------------------------------------------

SECOND_MARKER = "-after"  # the second ping's marker: the first's, and this


def ping_request(marker: str) -> bytes:
    return event(EventType.PING, {"text": marker}).render()


def follow_up_request(kind: FollowUp) -> bytes:
    if kind is FollowUp.SYNTHESIZE:
        return event(EventType.SYNTHESIZE, {"text": "Turn on the light."}).render()
    if kind is FollowUp.RECOGNIZE:
        return event(EventType.RECOGNIZE, {"text": "turn on the kitchen light"}).render()
    if kind is FollowUp.TRANSCRIBE:  # half a second of faint noise: any text will do, the events' order is judged
        fmt = {"rate": 16_000, "width": 2, "channels": 1}
        noise = bytes((i * 7919) % 7 for i in range(16_000))
        return b"".join(event(t, d, p).render() for t, d, p in (
            (EventType.TRANSCRIBE, {}, b""), (EventType.AUDIO_START, fmt, b""), (EventType.AUDIO_CHUNK, fmt, noise),
            (EventType.AUDIO_STOP, {}, b"")))
    return event(EventType.DESCRIBE).render()

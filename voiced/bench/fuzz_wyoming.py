"""Wyoming fuzz: generated clients over real TCP connections into ``voiced run``'s Wyoming port.

Each case is one client. Broken framing the server must drop (headers that are not JSON or not
objects, wrong types, negative, huge or lying lengths, data blocks that are not objects, events cut
short or stalled), well-framed events with odd data in any order (audio before audio-start,
transcribe twice, synthesize with empty, 70k-character, control or lone-surrogate text, odd
rates, widths and channels, chunks of odd lengths), and random bytes. A client ends with a ping
and a half-close, vanishes (RST) mid-request, or stalls mid-event; cases run in concurrent batches,
some larger than ``max_clients``. What each client sees is judged against what its case must cause:
a well-framed case is served (its ping's pong comes back), a broken one costs its connection, and
every byte the server sends parses with the ``wyoming`` library's reader. Afterwards the daemon must
still describe itself, transcribe real speech and speak, with the malformed clients counted,
nothing in ``wyoming_failures``, no error in its log and its RSS bounded.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import struct
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from voiced.bench.fuzz import FuzzedDaemon
from voiced.bench.fuzz_cases import json_values
from voiced.wyoming.connection import EventType

__all__ = ["Case", "Ending", "Expect", "Frame", "Verdict", "WyomingFuzz", "fuzz_wyoming", "wyoming_batches"]

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


_FOLLOW_UP_ANSWERS = {  # the answers' types, space-separated
    FollowUp.DESCRIBE: r"info",
    FollowUp.RECOGNIZE: r"intent",
    FollowUp.SYNTHESIZE: r"audio-start( audio-chunk)+ audio-stop",
    FollowUp.TRANSCRIBE: r"transcript-start( transcript-chunk)* transcript transcript-stop",
}


class Verdict(Enum):
    ANSWERED = "answered"
    DROPPED = "dropped"
    REFUSED = "refused"
    """Closed with no answer at all: over max_clients (checked against ``wyoming_refused``)."""
    VANISHED = "vanished"
    WRONG = "wrong"
    """Served when it had to be dropped, or dropped when it had to be served: a failure."""
    UNREADABLE = "unreadable"
    """What the server sent does not parse with the library's reader: a failure."""
    HUNG = "hung"
    """The server neither answered nor closed in time: a failure."""
    OUT_OF_ORDER = "out_of_order"
    """Answers a client cannot follow (audio-chunk without audio-start …): a failure."""
    LEFT_OVER = "left_over"
    """The follow-up request was not answered as on a fresh connection: the case left state behind."""


FAILED = (Verdict.WRONG, Verdict.UNREADABLE, Verdict.HUNG, Verdict.OUT_OF_ORDER, Verdict.LEFT_OVER)


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
_valid_formats = st.builds(dict, rate=st.sampled_from([16_000, 22_050, 8_000, 1, 384_000]),
                           width=st.sampled_from([1, 2, 4]), channels=st.sampled_from([1, 2, 16]))
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


@st.composite
def _events(draw: st.DrawFn, max_size: int = 6) -> list[Frame]:
    """Well-framed events: a real request's script with steps dropped, doubled or swapped, or any types in any order."""
    if draw(st.booleans()):
        types = list(draw(st.sampled_from(_SCRIPTS)))
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
    if kind == "long_block":  # a JSON object followed by more than whitespace is not JSON
        lie = {**frame.header, "data_length": n_block + draw(st.integers(1, 100_000))}
        return Frame(lie, frame.block), Ending.PING
    if kind == "short_block":  # an object cut short is not JSON; an empty block leaves it to the next line
        lie = {**frame.header, "data_length": draw(st.integers(0, n_block - 1))}
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


def wyoming_batches(max_clients: int) -> st.SearchStrategy[list[Case]]:
    """Clients that run at once: mostly one to three, sometimes a crowd over ``max_clients``."""
    few = st.lists(_case(), min_size=1, max_size=3)
    return st.one_of(few, few, few, st.lists(_case(), min_size=max_clients + 1, max_size=3 * max_clients))


# -- one client ----------------------------------------------------------------------------------


@dataclass
class Seen:
    """What one client saw."""

    received: bytes = b""
    reset: bool = False
    hung: bool = False


def _ping(marker: str) -> bytes:
    return event(EventType.PING, {"text": marker}).render()


def _follow_up(kind: FollowUp) -> bytes:
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


async def _client(port: int, case: Case, marker: str, timeout_s: float) -> Seen:
    seen = Seen()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()
    try:
        for part in case.render():
            writer.write(part)
            await writer.drain()
        if case.ending is Ending.VANISH:  # SO_LINGER 0: close sends an RST, as a client that crashed
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return seen
        if case.ending is Ending.PING:
            writer.write(_ping(marker))
            if case.follow_up is not None:
                writer.write(_follow_up(case.follow_up) + _ping(marker + _SECOND))
        if case.ending is not Ending.STALL:
            writer.write_eof()
        async with asyncio.timeout(timeout_s):
            while chunk := await reader.read(65_536):
                received += chunk
    except TimeoutError:
        seen.hung = True
    except OSError:  # refused at accept or dropped while we still wrote: the server reset us
        seen.reset = True
    finally:
        writer.transport.abort()
        seen.received = bytes(received)
    return seen


def parse_answers(raw: bytes) -> tuple[list[Any], bool]:
    """The events in ``raw`` by the ``wyoming`` library's own reader, and whether they were all of it."""
    from wyoming.event import read_event

    stream, events = io.BytesIO(raw), []
    try:
        while (ev := read_event(stream)) is not None:
            events.append(ev)
    except Exception:  # noqa: BLE001 - whatever the library's reader chokes on, the server sent wrongly
        return events, False
    return events, stream.tell() == len(raw)


_STREAMS = {  # what the server sends as a stream: its opening, its middle, its end
    "audio": ("audio-start", "audio-chunk", "audio-stop"),
    "transcript": ("transcript-start", "transcript-chunk", "transcript-stop"),
}


def protocol_slip(events: list[Any]) -> str | None:
    """The first answer out of order: a stream's middle or end while it is not open. A second opening is
    allowed (a client that starts a new request abandons the open one). After an ``error`` a stream may
    have ended or go on (a bad chunk is skipped): its next event decides."""
    open_: set[str] = set()
    unsure: set[str] = set()
    for i, e in enumerate(events):
        if e.type == "error":
            unsure = set(open_)
        for name, (start, middle, stop) in _STREAMS.items():
            if name in unsure and e.type in (start, middle, stop):
                unsure.discard(name)
                open_.discard(name)
                if e.type in (start, middle):
                    open_.add(name)
                continue
            if e.type == start:
                open_.add(name)
            elif e.type in (middle, stop) and name not in open_:
                return f"#{i} {e.type} without {start}"
            elif e.type == stop:
                open_.discard(name)
    return None


_SECOND = "-after"  # the second ping's marker: the first's, and this


def _left_over(case: Case, events: list[Any], marker: str, has_voice: bool) -> bool:
    """Whether the answers between the two pongs are not what the follow-up gets on a fresh connection."""
    assert case.follow_up is not None
    pongs = [i for i, e in enumerate(events) if e.type == "pong" and e.data.get("text") in (marker, marker + _SECOND)]
    if len(pongs) != 2:
        return True
    between = " ".join(e.type for e in events[pongs[0] + 1:pongs[1]])
    expected = _FOLLOW_UP_ANSWERS[case.follow_up]
    if case.follow_up is FollowUp.SYNTHESIZE:
        if not has_voice:
            expected = "error"
        elif any(isinstance(p, Frame) and p.header.get("type") == EventType.SYNTHESIZE_START for p in case.parts):
            expected = f"({expected})?"  # a streamed synthesis still open ignores the whole text (as Home Assistant sends it)
    return re.fullmatch(expected, between) is None


def judge(case: Case, seen: Seen, marker: str, has_voice: bool = True) -> tuple[Verdict, list[Any]]:
    if case.ending is Ending.VANISH:
        return Verdict.VANISHED, []
    events, whole = parse_answers(seen.received)
    if not whole:
        return Verdict.UNREADABLE, events
    if seen.hung:
        return Verdict.HUNG, events
    if protocol_slip(events) is not None:
        return Verdict.OUT_OF_ORDER, events
    pong = any(e.type == "pong" and e.data.get("text") == marker for e in events)
    if case.expect is Expect.SERVED:
        if pong and case.follow_up is not None and _left_over(case, events, marker, has_voice):
            return Verdict.LEFT_OVER, events
        if pong:
            return Verdict.ANSWERED, events
        return (Verdict.REFUSED if not seen.received else Verdict.WRONG), events
    if case.expect is Expect.DROPPED and pong:
        return Verdict.WRONG, events
    return (Verdict.ANSWERED if pong else Verdict.DROPPED), events


# -- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WyomingFuzz:
    """One ``voiced bench fuzz`` Wyoming run."""

    batches: int
    """Generated batches of clients (each batch's clients connect at once)."""
    asr_model: Path
    """A Whisper model directory (sherpa-onnx layout) for the daemon's [asr]."""
    speech: Path
    """../shared/speech: the real recording transcribed after the fuzz."""
    voice: Path | None = None
    """A Piper voice for [tts] (synthesize cases, and the check after)."""
    models: Path | None = None
    """../shared/models: the openWakeWord alexa head for [wake] (detect cases)."""
    seed: int = 0
    max_clients: int = 4
    """The daemon's [wyoming] max_clients: crowds of up to three times this many are sent."""
    read_timeout_s: float = 1.0
    """The daemon's [wyoming] read_timeout_s: what each stalled client costs."""
    max_audio_s: float = 3.0
    """The daemon's [wyoming] max_audio_s: keeps each generated transcription short."""
    rss_samples: int = 5
    client_timeout_s: float = 120.0
    """A client not answered nor closed by then: the server hung."""

    def __post_init__(self) -> None:
        if self.batches < 1 or self.max_clients < 1 or self.rss_samples < 1:
            raise ValueError("batches, max_clients and rss_samples must be at least 1")


FINAL_CLIP = Path("hifitts_6097_5min") / "audio" / "roots_19_morris_0269.wav"
"""Real speech transcribed after the fuzz; its reference text is in the set's transcripts.tsv."""


def _reference(speech: Path) -> str:
    tsv = speech / FINAL_CLIP.parts[0] / "transcripts.tsv"
    for line in tsv.read_text().splitlines():
        parts = line.split("\t")
        if parts[0] == "/".join(FINAL_CLIP.parts[1:]):
            return parts[2]
    raise ValueError(f"{FINAL_CLIP} is not in {tsv}")


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


@dataclass
class _Tally:
    verdicts: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)
    clients: int = 0
    dropped_expected: int = 0
    refused_seen: int = 0
    largest_batch: int = 0

    def add(self, case: Case, verdict: Verdict, events: list[Any], seen: Seen) -> None:
        self.clients += 1
        self.verdicts[verdict.value] += 1
        self.kinds[f"{case.kind}/{case.ending.value}"] += 1
        self.answers.update(e.type for e in events)
        self.dropped_expected += case.expect is Expect.DROPPED
        self.refused_seen += verdict is Verdict.REFUSED
        if verdict in FAILED and len(self.failures) < 20 and not any(f["case"] == case.summary() for f in self.failures):
            self.failures.append({"verdict": verdict.value, "case": case.summary(), "slip": str(protocol_slip(events)),
                                  "answers": ", ".join(e.type for e in events)[:300], "reset": str(seen.reset)})


async def _batch(port: int, cases: list[Case], first: int, options: WyomingFuzz, tally: _Tally) -> None:
    markers = [f"fuzz-{first + i}" for i in range(len(cases))]
    stall_timeout = options.read_timeout_s + 10.0
    seen = await asyncio.gather(*(
        _client(port, c, m, stall_timeout if c.ending is Ending.STALL else options.client_timeout_s)
        for c, m in zip(cases, markers)))
    for case, s, marker in zip(cases, seen, markers):
        verdict, events = judge(case, s, marker, options.voice is not None)
        tally.add(case, verdict, events, s)
    tally.largest_batch = max(tally.largest_batch, len(cases))


async def _still_serves(port: int, speech: Path, voice: bool) -> dict[str, Any]:
    """A valid describe, transcribe of real speech and (with a voice) synthesize, by the library's client."""
    import numpy as np
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe, Info
    from wyoming.tts import Synthesize

    from voiced.audio.wav import read_wav

    async def ask(*events: Any, until: str) -> list[Any]:
        client = AsyncTcpClient("127.0.0.1", port)
        await client.connect()
        for e in events:
            await client.write_event(e)
        got = []
        while (e := await client.read_event()) is not None:
            got.append(e)
            if e.type == until:
                break
        await client.disconnect()
        return got

    out: dict[str, Any] = {}
    info = await ask(Describe().event(), until="info")
    parsed = Info.from_event(info[-1]) if info and info[-1].type == "info" else None
    out["describe_ok"] = parsed is not None and bool(parsed.asr) and (bool(parsed.tts) or not voice)
    samples, rate = read_wav(speech / FINAL_CLIP)
    pcm = np.clip(np.round(samples[:, 0] * 32768), -32768, 32767).astype("<i2").tobytes()
    step = int(rate * 0.02) * 2  # 20 ms chunks, as a satellite sends them
    chunks = [AudioChunk(rate=rate, width=2, channels=1, audio=pcm[i:i + step]).event() for i in range(0, len(pcm), step)]
    got = await ask(Transcribe().event(), AudioStart(rate=rate, width=2, channels=1).event(), *chunks,
                    AudioStop().event(), until="transcript")
    text = got[-1].data.get("text", "") if got and got[-1].type == "transcript" else None
    out["transcript"] = text
    out["transcript_correct"] = text is not None and _words(text) == _words(_reference(speech))
    if voice:
        spoken = await ask(Synthesize(text="Turn on the kitchen light.").event(), until="audio-stop")
        audio = sum(len(e.payload or b"") for e in spoken if e.type == "audio-chunk")
        out["synthesis_ok"] = bool(spoken) and spoken[-1].type == "audio-stop" and audio > 10_000
    return out


def _log_errors(text: str) -> list[str]:
    """ERROR lines and tracebacks in the daemon's log (an exception that never reached a counter shows here)."""
    return [line[:300] for line in text.splitlines() if line.startswith(("ERROR", "CRITICAL", "Traceback"))
            or "exception was never retrieved" in line]


def fuzz_wyoming(options: WyomingFuzz) -> dict[str, Any]:
    """``options.batches`` generated batches of clients into ``voiced run``'s Wyoming port, then the checks."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    o = options
    sections = (f'[asr]\nmodel = "{o.asr_model.resolve()}"\ntemplate_decoding = false\n'
                f'[wyoming]\nuri = "tcp://127.0.0.1:{port}"\nzeroconf = false\nmax_clients = {o.max_clients}\n'
                f'read_timeout_s = {o.read_timeout_s}\nmax_audio_s = {o.max_audio_s}\n')
    if o.voice is not None:
        sections += f'[tts]\nvoice = "{o.voice.resolve()}"\nmax_text_chars = 200\n'
    if o.models is not None:
        sections += f'[wake]\ndirectory = "{(o.models / "openwakeword").resolve()}"\nmodels = ["alexa_v0.1"]\n'
    tally = _Tally()
    with tempfile.TemporaryDirectory() as tmp, FuzzedDaemon(Path(tmp), sections) as daemon:
        # the same valid requests first: the models' first runs allocate their arenas, which is not growth
        warm = asyncio.run(asyncio.wait_for(_still_serves(port, o.speech, o.voice is not None), 120))
        before = dict(daemon.fresh_stats().get("wyoming", {}))
        log_start = len(daemon.log_path.read_bytes())
        rss_before = daemon.rss_mb()
        rss: list[float] = []
        done = {"n": 0}
        t0 = time.monotonic()

        @seed(o.seed)
        @settings(max_examples=o.batches, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(wyoming_batches(o.max_clients))
        def one(cases: list[Case]) -> None:
            asyncio.run(_batch(port, cases, tally.clients, o, tally))
            done["n"] += 1
            if done["n"] % max(1, o.batches // o.rss_samples) == 0:
                rss.append(round(daemon.rss_mb(), 1))

        one()
        fuzz_s = time.monotonic() - t0
        final = asyncio.run(asyncio.wait_for(_still_serves(port, o.speech, o.voice is not None), 120))
        after = daemon.fresh_stats().get("wyoming", {})
        rss_after = daemon.rss_mb()
        alive = daemon.alive()
        errors = _log_errors(daemon.log_path.read_bytes()[log_start:].decode(errors="replace"))
    counters = {k: v - before.get(k, 0) for k, v in after.items() if k.startswith("wyoming_")}
    malformed, refused = counters.get("wyoming_malformed", 0), counters.get("wyoming_refused", 0)
    return {
        "batches": done["n"], "clients": tally.clients, "largest_batch": tally.largest_batch,
        "cases": dict(sorted(tally.kinds.items())), "verdicts": dict(sorted(tally.verdicts.items())),
        "answers": dict(sorted(tally.answers.items())), "failures": tally.failures,
        "seconds": round(fuzz_s, 1), "process_alive": alive, "served_before": warm == final, **final,
        "counters": dict(sorted(counters.items())),
        # every client that had to be dropped was counted malformed, unless it was refused at accept
        "dropped_expected": tally.dropped_expected,
        "malformed_all_counted": malformed + refused >= tally.dropped_expected,
        "refused_all_counted": refused >= tally.refused_seen,
        "log_errors": errors[:20],
        "daemon_rss_mb_before": round(rss_before, 1), "daemon_rss_mb_samples": rss,
        "daemon_rss_mb_after": round(rss_after, 1),
    }

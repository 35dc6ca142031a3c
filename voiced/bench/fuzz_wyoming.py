"""Wyoming fuzz: generated clients (``voiced.bench.fuzz_wyoming_cases``) over real TCP connections into
``voiced run``'s Wyoming port.

Cases run in concurrent batches, some larger than ``max_clients``. What each client sees is judged
against what its case must cause: a well-framed case is served (its ping's pong comes back), a broken
one costs its connection, and every byte the server sends parses with the ``wyoming`` library's reader.
Afterwards the daemon must still describe itself, transcribe real speech and speak, with the malformed
clients counted, nothing in ``wyoming_failures``, no error in its log and its RSS bounded.
"""

from __future__ import annotations

import asyncio
import io
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

from voiced.asr.wer import normalize
from voiced.bench.common import free_port
from voiced.bench.fuzz import FuzzedDaemon
from voiced.bench.fuzz_cases import settle_constant_pool
from voiced.bench.fuzz_wyoming_cases import (
    FOLLOW_UP_ANSWERS,
    SECOND_MARKER,
    Case,
    Ending,
    Expect,
    Frame,
    FollowUp,
    follow_up_request,
    ping_request,
    wyoming_batches,
)
from voiced.wyoming.connection import EventType

__all__ = ["FAILED", "Seen", "Verdict", "WyomingFuzz", "fuzz_wyoming", "judge", "parse_answers", "protocol_slip",
           "run_client"]


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


# -- one client ----------------------------------------------------------------------------------


@dataclass
class Seen:
    """What one client saw."""

    received: bytes = b""
    reset: bool = False
    hung: bool = False


async def run_client(port: int, case: Case, marker: str, timeout_s: float) -> Seen:
    """One client: ``case`` sent, then its ending (a ping and a half-close, an RST, a stall); what came back."""
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
            writer.write(ping_request(marker))
            if case.follow_up is not None:
                writer.write(follow_up_request(case.follow_up) + ping_request(marker + SECOND_MARKER))
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


def _left_over(case: Case, events: list[Any], marker: str, has_voice: bool) -> bool:
    """Whether the answers between the two pongs are not what the follow-up gets on a fresh connection."""
    assert case.follow_up is not None
    markers = (marker, marker + SECOND_MARKER)
    pongs = [i for i, e in enumerate(events) if e.type == "pong" and e.data.get("text") in markers]
    if len(pongs) != 2:
        return True
    between = " ".join(e.type for e in events[pongs[0] + 1:pongs[1]])
    expected = FOLLOW_UP_ANSWERS[case.follow_up]
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
    workers: int = 2
    """The daemon's [wyoming] workers: how many requests run the models at once (the warm-up sends that many)."""
    release_after_phonemes: int = 1
    """The daemon's [tts] release_after_phonemes. Every sentence gives its memory back by default here, so
    RSS shows leaks, not Piper's arena: below the bound the arena keeps what the longest sentence run
    alone needed, and which ran alone is the timing's doing (before a sentence started beside another
    was released too, two overlapping in a new way grew it: +19 to +90 MB in a pass under load)."""
    rss_samples: int = 5
    repeat: bool = False
    """Send the generated batches again, the same cases in the same order, with RSS taken across that pass
    (``daemon_rss_mb_repeat``): every input shape has been seen by then, so what grows is kept, not warm-up."""
    client_timeout_s: float = 120.0
    """A client not answered nor closed by then: the server hung."""

    def __post_init__(self) -> None:
        if min(self.batches, self.max_clients, self.workers, self.rss_samples) < 1:
            raise ValueError("batches, max_clients, workers and rss_samples must be at least 1")


FINAL_CLIP = Path("hifitts_6097_5min") / "audio" / "roots_19_morris_0269.wav"
"""Real speech transcribed after the fuzz; its reference text is in the set's transcripts.tsv."""


def _reference(speech: Path) -> str:
    from voiced.bench.whisper import transcripts_of

    clip = speech / FINAL_CLIP
    refs = transcripts_of([clip])
    if str(clip) not in refs:
        raise ValueError(f"{FINAL_CLIP} has no reference transcript under {speech}")
    return refs[str(clip)]


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
        run_client(port, c, m, stall_timeout if c.ending is Ending.STALL else options.client_timeout_s)
        for c, m in zip(cases, markers)))
    for case, s, marker in zip(cases, seen, markers):
        verdict, events = judge(case, s, marker, options.voice is not None)
        tally.add(case, verdict, events, s)
    tally.largest_batch = max(tally.largest_batch, len(cases))


async def _at_once(port: int, speech: Path, voice: bool, clients: int) -> None:
    await asyncio.gather(*(_still_serves(port, speech, voice) for _ in range(clients)))


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
    out["transcript_correct"] = text is not None and normalize(text) == normalize(_reference(speech))
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
    port = free_port()
    o = options
    sections = (f'[asr]\nmodel = "{o.asr_model.resolve()}"\ntemplate_decoding = false\n'
                f'[wyoming]\nuri = "tcp://127.0.0.1:{port}"\nzeroconf = false\nmax_clients = {o.max_clients}\n'
                f'read_timeout_s = {o.read_timeout_s}\nmax_audio_s = {o.max_audio_s}\nworkers = {o.workers}\n')
    if o.voice is not None:
        sections += (f'[tts]\nvoice = "{o.voice.resolve()}"\nmax_text_chars = 200\n'
                     f'release_after_phonemes = {o.release_after_phonemes}\n')
    if o.models is not None:
        sections += f'[wake]\ndirectory = "{(o.models / "openwakeword").resolve()}"\nmodels = ["alexa_v0.1"]\n'
    tally = _Tally()
    with tempfile.TemporaryDirectory() as tmp, FuzzedDaemon(Path(tmp), sections) as daemon:
        # the same valid requests first, alone then `workers` at once: ONNX Runtime's arenas grow to what the
        # models' first runs, and that many runs together, need (~110 MB, then ~90 MB), which is not growth
        warm = asyncio.run(asyncio.wait_for(_still_serves(port, o.speech, o.voice is not None), 120))
        asyncio.run(asyncio.wait_for(_at_once(port, o.speech, o.voice is not None, o.workers), 240))
        before = dict(daemon.fresh_stats().get("wyoming", {}))
        log_start = len(daemon.log_path.read_bytes())
        rss_before = daemon.rss_mb()
        rss: list[float] = []
        done = {"n": 0}
        played: list[list[Case]] = []
        settle_constant_pool()
        t0 = time.monotonic()

        @seed(o.seed)
        @settings(max_examples=o.batches, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(wyoming_batches(o.max_clients))
        def one(cases: list[Case]) -> None:
            asyncio.run(_batch(port, cases, tally.clients, o, tally))
            done["n"] += 1
            if o.repeat:
                played.append(cases)
            if done["n"] % max(1, o.batches // o.rss_samples) == 0:
                rss.append(round(daemon.rss_mb(), 1))

        one()
        fuzz_s = time.monotonic() - t0
        repeat_rss = [round(daemon.rss_mb(), 1)] if played else []
        for cases in played:  # clients tallied and judged as in the first pass
            asyncio.run(_batch(port, cases, tally.clients, o, tally))
        repeat_rss += [round(daemon.rss_mb(), 1)] if played else []
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
        "daemon_rss_mb_after": round(rss_after, 1), "daemon_rss_mb_repeat": repeat_rss,
    }

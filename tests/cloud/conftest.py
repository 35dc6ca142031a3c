"""Real servers on 127.0.0.1 for the cloud tests: an OpenAI-compatible fake (http or https),
a closed port, a black hole (accepts, never answers), and certificates made with openssl.

Nothing here contacts anything but loopback.
"""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import shutil
import socket
import ssl
import subprocess
import threading
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import TIMEOUT, free_port
from voiced.cloud import CloudConfig, CloudRouter, IntentCatalog
from voiced.runtime.backoff import BackoffPolicy

"""Generous: how long to wait for something that must happen."""
HOLD_S = 30.0
"""How long a slow handler holds its answer unless released: far beyond every budget here."""
TRICKLE_S = 0.05
"""Pause between the bytes of a trickled answer: far shorter than every read timeout here,
so only a deadline on the whole call can end it."""
DEEP = "[" * 100_000 + "]" * 100_000
"""Valid JSON nested far deeper than Python's recursion limit."""
KEY = "sk-test-key"

TEMPLATES = [
    {
        "language": "en",
        "intents": {
            "HassTurnOn": {"data": [{"sentences": ["turn on [the] {name}"]}]},
            "HassTurnOff": {"data": [{"sentences": ["turn off [the] {name}"]}]},
            "HassLightSet": {"data": [{"sentences": ["set [the] {area} lights to {brightness} percent"],
                                       "slots": {"domain": "light"}}]},
        },
        "lists": {
            "area": {"values": [{"in": "living room", "out": "living_room"}, "kitchen"]},
            "brightness": {"range": {"from": 0, "to": 100}},
        },
    }
]




class Mode(Enum):
    OK = "ok"
    SERVER_ERROR = "5xx"
    """Every request gets 500."""
    MALFORMED = "malformed"
    """GET works; POST answers 200 with a body that is not JSON."""
    SLOW = "slow"
    """Every request is held until released (or HOLD_S)."""
    SLOW_CALLS = "slow_calls"
    """GET answers at once; POST is held."""
    TRICKLE = "trickle"
    """GET answers at once; POST answers 200, then its body one byte per TRICKLE_S, never
    ending (until released or HOLD_S)."""
    TRICKLE_HEADERS = "trickle_headers"
    """Every request's status line and headers come one byte per TRICKLE_S, never ending."""
    REDIRECT = "redirect"
    """Every request is answered 302 to another address."""
    DEEP_JSON = "deep_json"
    """GET works; POST answers 200 with JSON nested too deeply to parse."""


@dataclass
class Seen:
    """What one request carried (recorded by the fake)."""

    method: str
    path: str
    authorization: str | None
    fields: dict[str, str]
    wav: tuple[int, int, int] | None  # rate, channels, frames
    filename: str | None
    body: Any


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients giving up at their deadline is what the tests are about


class FakeCloud:
    """An OpenAI-compatible service: GET /v1/models, POST /v1/audio/transcriptions and
    /v1/chat/completions; its behaviour switches with ``mode``."""

    def __init__(self, port: int | None = None, tls: tuple[Path, Path] | None = None, key: str | None = None) -> None:
        self.port = port or free_port()
        self.tls = tls
        self.key = key
        self.mode = Mode.OK
        self.transcript = "turn on the kitchen light"
        self.chat_content: str = json.dumps({"intent": "HassTurnOn", "slots": {"name": "kitchen light"}})
        self.seen: list[Seen] = []
        self.release = threading.Event()
        self.answered_late = threading.Event()
        """Set when a held (slow) request was finally answered."""
        self.held = threading.Event()
        """Set when a request starts being held."""
        self._server: ThreadingHTTPServer | None = None
        self._connections: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> FakeCloud:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                fake._connections.append(self.connection)

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        server = _QuietServer(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
                         name=f"fake-cloud-{self.port}").start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for conn in self._connections:  # kept-alive connections too: the service is gone
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._connections.clear()

    def posts(self) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"]

    # -- the handler ------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        seen = Seen(method, h.path, h.headers.get("Authorization"), {}, None, None, None)
        if method == "POST":
            self._parse(h, raw, seen)
        self.seen.append(seen)
        mode = self.mode
        if mode is Mode.SLOW or (mode is Mode.SLOW_CALLS and method == "POST"):
            self.held.set()
            self.release.wait(HOLD_S)
            self.answered_late.set()
        if mode is Mode.TRICKLE_HEADERS or (mode is Mode.TRICKLE and method == "POST"):
            self.held.set()
            return self._trickle(h, headers_too=mode is Mode.TRICKLE_HEADERS)
        if mode is Mode.REDIRECT:
            h.send_response(302)
            h.send_header("Location", "http://127.0.0.1:9/elsewhere")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if self.key is not None and h.headers.get("Authorization") != f"Bearer {self.key}":
            return self._send(h, 401, {"error": {"message": "bad key"}})
        if mode is Mode.SERVER_ERROR:
            return self._send(h, 500, {"error": {"message": "boom"}})
        if method == "GET":
            if h.path == "/v1/models":
                return self._send(h, 200, {"object": "list", "data": [{"id": "whisper-1"}, {"id": "gpt-4o-mini"}]})
            return self._send(h, 404, {"error": {"message": "not found"}})
        if mode is Mode.MALFORMED:
            return self._send_raw(h, 200, b"<html>this is not json", "text/html")
        if mode is Mode.DEEP_JSON:
            return self._send_raw(h, 200, DEEP.encode(), "application/json")
        if h.path == "/v1/audio/transcriptions":
            return self._send(h, 200, {"text": self.transcript})
        if h.path == "/v1/chat/completions":
            return self._send(h, 200, {"id": "x", "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": self.chat_content}, "finish_reason": "stop"}]})
        return self._send(h, 404, {"error": {"message": "not found"}})

    def _parse(self, h: BaseHTTPRequestHandler, raw: bytes, seen: Seen) -> None:
        ctype = h.headers.get("Content-Type", "")
        if ctype.startswith("multipart/form-data"):
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                payload = part.get_payload(decode=True)
                if part.get_filename():
                    seen.filename = part.get_filename()
                    with wave.open(io.BytesIO(payload)) as w:
                        seen.wav = (w.getframerate(), w.getnchannels(), w.getnframes())
                else:
                    seen.fields[str(name)] = payload.decode()
        elif raw:
            seen.body = json.loads(raw)

    def _trickle(self, h: BaseHTTPRequestHandler, headers_too: bool) -> None:
        """Answer one byte at a time, each well within a read timeout, and never finish."""
        h.close_connection = True
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        try:
            if headers_too:
                h.wfile.write(head + b"X-Slow: ")
            else:
                h.wfile.write(head + b"Content-Length: 1000000\r\n\r\n")
            h.wfile.flush()
            for _ in range(int(HOLD_S / TRICKLE_S)):
                if self.release.wait(TRICKLE_S):
                    return
                h.wfile.write(b"a" if headers_too else b" ")
                h.wfile.flush()
        except OSError:
            pass  # the client gave up: what the tests want

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        self._send_raw(h, status, json.dumps(body).encode(), "application/json")

    def _send_raw(self, h: BaseHTTPRequestHandler, status: int, data: bytes, ctype: str) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the client gave up (deadline): nothing to answer to


class BlackHole:
    """Accepts connections and never answers (nor closes) until ``stop``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(16)
        self.accepted = threading.Event()
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name=f"black-hole-{self.port}")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self._conns.append(conn)
            self.accepted.set()

    @property
    def still_holding(self) -> bool:
        """Every connection it accepted is still open on its side: it never answered."""
        return not self._stop.is_set() and bool(self._conns)

    def stop(self) -> None:
        self._stop.set()
        # Joined first: a socket closed while another thread polls it stays listening until the poll ends.
        self._thread.join(TIMEOUT)
        for c in self._conns:
            c.close()
        self.sock.close()


@dataclass(frozen=True)
class Certs:
    ca: Path
    """CA certificate that signed ``good``."""
    good: tuple[Path, Path]
    """Certificate and key for 127.0.0.1, signed by ``ca``."""
    bad: tuple[Path, Path]
    """Self-signed certificate and key for 127.0.0.1: trusted by nobody."""


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is absent")
    d = tmp_path_factory.mktemp("certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=voiced test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *ec, "-keyout", "good.key", "-out", "good.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                               "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                               "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", "good.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "good.pem", "-days", "2", "-extfile", "ext.cnf")
    run("req", "-x509", *ec, "-keyout", "bad.key", "-out", "bad.pem", "-days", "2", "-subj", "/CN=127.0.0.1",
        "-addext", "subjectAltName=IP:127.0.0.1")
    return Certs(d / "ca.pem", (d / "good.pem", d / "good.key"), (d / "bad.pem", d / "bad.key"))


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    """Servers a test started; stopped at the end, releasing held requests."""
    started: list[Any] = []
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def fake(servers: list[Any]) -> FakeCloud:
    server = FakeCloud().start()
    servers.append(server)
    return server


@pytest.fixture
def black_hole(servers: list[Any]) -> BlackHole:
    hole = BlackHole()
    servers.append(hole)
    return hole


@pytest.fixture
def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


SHORT = 0.3
"""A budget for tests that expect a timeout and nothing after it."""
FAST = BackoffPolicy(initial=0.05, maximum=0.2, factor=2.0, jitter=0.1)
"""Breaker retries quickly in tests."""


def cloud_config(url: str, **overrides: Any) -> CloudConfig:
    """Budgets short enough that failures come quickly, long enough that a loopback answer
    makes it on a loaded machine; tests assert outcomes, never durations."""
    values: dict[str, Any] = {
        "enabled": True, "base_url": url, "asr": True, "intent": True, "probe_budget_s": 1.5, "probe_ttl_s": 30.0,
        "connect_timeout_s": 1.5, "request_timeout_s": 1.5, "local_budget_s": 4.0, "failure_threshold": 2,
        "backoff": FAST,
    }
    values.update(overrides)
    return CloudConfig(**values)


@pytest.fixture
def catalog() -> IntentCatalog:
    return IntentCatalog.from_templates(TEMPLATES)


@pytest.fixture
def make_router(catalog: IntentCatalog) -> Iterator[Callable[..., CloudRouter]]:
    routers: list[CloudRouter] = []

    def make(url: str, **overrides: Any) -> CloudRouter:
        router = CloudRouter(cloud_config(url, **overrides), catalog)
        routers.append(router)
        return router

    yield make
    for r in routers:
        r.close(timeout=0.5)

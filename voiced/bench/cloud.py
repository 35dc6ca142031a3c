"""``voiced bench cloud``: what the reachability check adds, as JSON.

Everything runs on 127.0.0.1: a small OpenAI-compatible server (http, and https with a
throw-away CA when the ``openssl`` CLI is there), a closed port, and a black hole that
accepts and never answers. Figures, in milliseconds unless named ``_us``:

- ``probe_up_cold``: a fresh probe (new connection) to a server that answers;
- ``probe_up_cached_us``: a probe answered from the TTL cache (what most calls pay);
- ``probe_down_closed``: a closed port;
- ``probe_black_holed``: a server that accepts and never answers (≈ the probe budget);
- ``decision_us`` / ``submit_us``: what a daemon stage pays to decide and to hand over a
  request (the cloud is black-holed meanwhile: it must not matter);
- ``intent_round_trip``: submit → callback with an intent, probe cached, local server.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from voiced.bench.common import stats, time_calls

__all__ = ["bench_cloud"]

_CHAT = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": json.dumps(
    {"intent": "HassTurnOn", "slots": {"name": "kitchen light"}})}}]}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # it writes headers and body apart: no delayed-ACK stall in the figures

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(b'{"object": "list", "data": []}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(_CHAT)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that give up (the point of a deadline) are not news


def _serve(tls: tuple[Path, Path] | None = None) -> tuple[ThreadingHTTPServer, str]:
    server = _Server(("127.0.0.1", 0), _Handler)
    if tls is not None:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"


def _certs(workdir: Path) -> tuple[Path, tuple[Path, Path]] | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=workdir, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=bench CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    (workdir / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "srv.pem", "-days", "1", "-extfile", "ext.cnf")
    return workdir / "ca.pem", (workdir / "srv.pem", workdir / "srv.key")


def bench_cloud(repeats: int = 20, black_hole_repeats: int = 3, probe_budget_s: float = 2.5) -> dict[str, Any]:
    """Run every measurement; returns the JSON-ready figures."""
    from voiced.cloud import CloudConfig, CloudRouter, IntentCatalog

    def router(url: str, **kw: Any) -> CloudRouter:
        catalog = IntentCatalog.from_names(["HassTurnOn", "HassTurnOff"])
        return CloudRouter(CloudConfig(enabled=True, base_url=url, probe_budget_s=probe_budget_s, **kw), catalog)

    figures: dict[str, Any] = {"probe_budget_s": probe_budget_s}
    routers: list[CloudRouter] = []
    servers: list[ThreadingHTTPServer] = []
    hole = socket.socket()
    with tempfile.TemporaryDirectory(prefix="voiced-bench-cloud-") as tmp:
        try:
            server, url = _serve()
            servers.append(server)
            up = router(url)
            routers.append(up)
            up.probe()  # first use imports httpx: not part of any figure
            figures["probe_up_cold"] = stats(time_calls(lambda: up.probe(force=True), repeats), 1e3)
            figures["probe_up_cached_us"] = stats(time_calls(lambda: up.probe(force=False), repeats), 1e6)

            certs = _certs(Path(tmp))
            if certs is not None:
                tls_server, tls_url = _serve(certs[1])
                servers.append(tls_server)
                tls = router(tls_url, ca_file=certs[0])
                routers.append(tls)
                figures["probe_up_cold_https"] = stats(time_calls(lambda: tls.probe(force=True), repeats), 1e3)

            done = threading.Event()
            figures["intent_round_trip"] = stats(time_calls(
                lambda: (done.clear(), up.submit_intent("turn on the kitchen light", lambda r: done.set()),
                         done.wait(10)), repeats), 1e3)

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                closed = f"http://127.0.0.1:{s.getsockname()[1]}"
            down = router(closed)
            routers.append(down)
            figures["probe_down_closed"] = stats(time_calls(lambda: down.probe(force=True), repeats), 1e3)

            hole.bind(("127.0.0.1", 0))
            hole.listen(64)  # the kernel completes handshakes; nobody ever reads or answers
            black = router(f"http://127.0.0.1:{hole.getsockname()[1]}", failure_threshold=100)
            routers.append(black)
            figures["probe_black_holed"] = stats(time_calls(lambda: black.probe(force=True), black_hole_repeats), 1e3)
            black.submit_intent("warm-up", lambda r: None)  # the first request starts the cloud threads
            figures["decision_us"] = stats(time_calls(lambda: black.should_use_cloud_intent(None), repeats), 1e6)
            figures["submit_us"] = stats(time_calls(lambda: black.submit_intent("turn on the light", lambda r: None),
                                                min(repeats, 8)), 1e6)
        finally:
            for r in routers:
                r.close(timeout=0.2)
            for srv in servers:
                srv.shutdown()
                srv.server_close()
            hole.close()
    return figures

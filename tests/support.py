"""Helpers the test packages share: waiting for a condition, and a safe loopback port."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TIMEOUT = 20.0
"""How long a test waits for something that should happen (a bound, never a timing claim)."""


def wait_until(predicate: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition") -> None:
    """Poll ``predicate`` until it is true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def free_port() -> int:
    """A free loopback port outside the ephemeral range.

    Not from the ephemeral range: a client retrying a closed port of that range can be
    given that very port as its own local port and connect to itself (TCP simultaneous
    open), which then keeps a server from binding it again.
    """
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    candidates = [p for p in range(10000, 65000) if not low <= p <= high]
    for port in random.sample(candidates, 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port outside the ephemeral range")


def int8_kernels_saturate() -> bool:
    """x86 with AVX2 but no VNNI: ONNX Runtime's u8×s8 integer kernels add pairs of products in
    int16 (VPMADDUBSW), which saturates, so INT8 models lose accuracy there (ORT's documented caveat)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx2" in flags and "vnni" not in flags


def make_certificates(d: Path) -> None:
    """In ``d``: a CA (ca.crt, ca.key), a server certificate for 127.0.0.1 and a client certificate
    (server.crt/.key, client.crt/.key), made by the openssl tool."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=voiced test CA")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, extra in (("server", ["-extfile", "san.ext"]), ("client", [])):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", *extra)

"""The reachability probe against real servers: its time is bounded by deadlines, never by luck."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support import TIMEOUT, wait_until
from voiced.cloud import CloudErrorKind, Prober, ProbeStatus
from voiced.cloud.access import CloudAccess
from voiced.cloud.probe import MAX_PROBE_THREADS

from .conftest import (
    KEY,
    SHORT,
    BlackHole,
    Certs,
    FakeCloud,
    Mode,
    cloud_config,
)


def prober(url: str, **overrides: Any) -> Prober:
    config = cloud_config(url, **overrides)
    return Prober(config, CloudAccess(config))


def test_up_and_cached_for_the_ttl(fake: FakeCloud) -> None:
    p = prober(fake.url)
    result = p.check()
    assert result.status is ProbeStatus.UP and result.http_status == 200
    assert p.check() is result  # cached: no second request
    assert len(fake.seen) == 1 and fake.seen[0].path == "/v1/models"
    assert p.check(force=True) is not result
    assert len(fake.seen) == 2
    assert p.stats()["cached"] == 1


def test_a_stale_result_is_probed_again(fake: FakeCloud) -> None:
    p = prober(fake.url, probe_ttl_s=0.001)
    p.check()
    threading.Event().wait(0.01)
    assert p.cached() is None
    p.check()
    assert len(fake.seen) == 2


def test_closed_port_is_down(closed_url: str) -> None:
    result = prober(closed_url).check()
    assert result.status is ProbeStatus.DOWN
    assert result.error is not None and result.error.kind is CloudErrorKind.REFUSED


def test_black_hole_is_down_within_the_budget(black_hole: BlackHole) -> None:
    result = prober(black_hole.url, probe_budget_s=SHORT).check()
    assert result.status is ProbeStatus.DOWN
    assert result.error is not None and result.error.kind is CloudErrorKind.TIMEOUT
    assert black_hole.accepted.is_set() and black_hole.still_holding  # it accepted and never answered


def test_slow_server_is_down_before_it_answers(fake: FakeCloud) -> None:
    fake.mode = Mode.SLOW
    result = prober(fake.url, probe_budget_s=SHORT).check()
    assert result.status is ProbeStatus.DOWN
    assert result.error is not None and result.error.kind is CloudErrorKind.TIMEOUT
    assert fake.held.is_set() and not fake.answered_late.is_set()


def test_a_server_trickling_its_headers_leaves_no_probe_thread_behind(fake: FakeCloud) -> None:
    fake.mode = Mode.TRICKLE_HEADERS  # each byte within the read timeout: only the probe's deadline ends it
    p = prober(fake.url, probe_budget_s=SHORT)
    for _ in range(MAX_PROBE_THREADS):
        result = p.check(force=True)
        assert result.error is not None and result.error.kind is CloudErrorKind.TIMEOUT
    fake.mode = Mode.OK
    assert p.check(force=True).up  # the probe threads ended at their deadlines: none left to wait for
    assert p.stats()["hung"] == 0


def test_server_error_is_down(fake: FakeCloud) -> None:
    fake.mode = Mode.SERVER_ERROR
    result = prober(fake.url).check()
    assert result.status is ProbeStatus.DOWN and result.http_status == 500
    assert result.error is not None and result.error.kind is CloudErrorKind.SERVER_ERROR


def test_refused_key_is_down_and_the_key_is_sent(servers: list, tmp_path: Path) -> None:
    fake = FakeCloud(key=KEY).start()
    servers.append(fake)
    (tmp_path / "key").write_text(KEY + "\n")
    (tmp_path / "wrong").write_text("sk-wrong\n")
    assert prober(fake.url, api_key_file=tmp_path / "key").check().up
    assert fake.seen[-1].authorization == f"Bearer {KEY}"
    result = prober(fake.url, api_key_file=tmp_path / "wrong").check()
    assert result.error is not None and result.error.kind is CloudErrorKind.AUTH


def test_a_key_file_saved_with_a_byte_order_mark_sends_the_key_alone(servers: list, tmp_path: Path) -> None:
    fake = FakeCloud(key=KEY).start()
    servers.append(fake)
    (tmp_path / "key").write_bytes(b"\xef\xbb\xbf" + KEY.encode() + b"\r\n")  # as Notepad may save it
    assert prober(fake.url, api_key_file=tmp_path / "key").check().up
    assert fake.seen[-1].authorization == f"Bearer {KEY}"


def test_server_without_the_probe_path_is_still_reachable(fake: FakeCloud) -> None:
    assert prober(fake.url, probe_path="/nothing-here").check().http_status == 404
    assert prober(fake.url, probe_path="/nothing-here").check().up


def test_untrusted_certificate_is_down(servers: list, certs: Certs) -> None:
    fake = FakeCloud(tls=certs.bad).start()
    servers.append(fake)
    result = prober(fake.url).check()  # the system's CAs
    assert result.status is ProbeStatus.DOWN
    assert result.error is not None and result.error.kind is CloudErrorKind.TLS
    result = prober(fake.url, ca_file=certs.ca).check()  # our CA did not sign it either
    assert result.error is not None and result.error.kind is CloudErrorKind.TLS
    assert fake.seen == []  # not one request went over the untrusted connection


def test_private_ca_is_trusted_with_ca_file(servers: list, certs: Certs) -> None:
    fake = FakeCloud(tls=certs.good).start()
    servers.append(fake)
    assert prober(fake.url, ca_file=certs.ca).check().up
    result = prober(fake.url).check()  # without it, verification stays on and fails
    assert result.error is not None and result.error.kind is CloudErrorKind.TLS


def test_hung_dns_is_bounded_and_does_not_pile_up_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver that never answers (getaddrinfo blocks; no real DNS is asked)."""
    real = socket.getaddrinfo
    release = threading.Event()
    entered = threading.Event()
    calls = []

    def hanging(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hung-resolver.test":
            calls.append(host)
            entered.set()
            release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "released")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    p = prober("http://hung-resolver.test:1", probe_budget_s=SHORT)
    try:
        first = p.check()
        assert first.status is ProbeStatus.DOWN and first.error is not None
        assert first.error.kind is CloudErrorKind.TIMEOUT
        assert entered.is_set() and not release.is_set()  # returned while the resolver still hangs
        for _ in range(4):
            assert p.check().status is ProbeStatus.DOWN
        assert len(calls) == MAX_PROBE_THREADS  # threads stuck in the resolver do not pile up
        assert p.stats()["hung"] == 5 - MAX_PROBE_THREADS
    finally:
        release.set()


def test_no_network_before_the_first_check(closed_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dns(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("DNS at construction")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    p = prober("https://never-resolved.test")
    assert p.cached() is None and p.last() is None


def test_a_caller_with_a_shorter_budget_does_not_decide_for_the_probe_it_joined(fake: FakeCloud) -> None:
    fake.mode = Mode.SLOW
    p = prober(fake.url, probe_budget_s=10.0)
    first: list = []
    t = threading.Thread(target=lambda: first.append(p.check()))
    t.start()
    wait_until(fake.held.is_set, what="the probe to be held")
    assert p.check(budget_s=0.05).status is ProbeStatus.DOWN  # this caller could not wait longer
    fake.release.set()
    t.join(TIMEOUT)
    assert first[0].up and p.last() is first[0]
    assert p.stats()["probes"] == 1 and len(fake.seen) == 1  # it joined, it did not probe again

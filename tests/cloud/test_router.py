"""Routing against real servers: local first, never blocking, breaker opens and recovers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.support import free_port, wait_until
from voiced.cloud import (
    BreakerState,
    CloudConfig,
    CloudErrorKind,
    CloudOutcome,
    CloudResult,
    CloudRouter,
    CloudState,
)
from voiced.intents import Intent, IntentRecognizer, IntentSource
from voiced.runtime.backoff import BackoffPolicy

from .conftest import (
    DEEP,
    KEY,
    SHORT,
    TEMPLATES,
    BlackHole,
    Certs,
    FakeCloud,
    Mode,
)

TEXT = "could you put the kitchen light on"


class Results:
    """Collects callback results and the threads they ran on."""

    def __init__(self) -> None:
        self.items: list[tuple[CloudResult[Any], str]] = []
        self.event = threading.Event()

    def __call__(self, result: CloudResult[Any]) -> None:
        self.items.append((result, threading.current_thread().name))
        self.event.set()

    def one(self) -> tuple[CloudResult[Any], str]:
        wait_until(lambda: self.items, what="a callback")
        return self.items[0]


def local(confidence: float) -> Intent:
    return Intent("HassTurnOn", TEXT, (), confidence, IntentSource.LLM)


# -- policy ---------------------------------------------------------------------------------------


def test_policy_is_local_first(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    router = make_router(fake.url, local_confidence_threshold=0.6)
    assert router.should_use_cloud_asr(local_available=False)
    assert router.should_use_cloud_asr(local_available=True, local_confidence=0.3)
    assert not router.should_use_cloud_asr(local_available=True, local_confidence=0.9)
    assert not router.should_use_cloud_asr(local_available=True, local_confidence=None)
    assert router.should_use_cloud_intent(None)
    assert router.should_use_cloud_intent(local(0.5))
    assert not router.should_use_cloud_intent(local(0.9))
    assert not router.should_use_cloud_intent(Intent("HassTurnOn", TEXT, (), 1.0))  # a template matched
    assert fake.seen == []  # deciding never touches the network


def test_policy_respects_the_switches(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    assert not make_router(fake.url, asr=False).should_use_cloud_asr(local_available=False)
    assert not make_router(fake.url, intent=False).should_use_cloud_intent(None)
    off = CloudRouter(CloudConfig())
    assert not off.should_use_cloud_asr(False) and not off.should_use_cloud_intent(None)
    assert off.status().state is CloudState.DISABLED
    assert not CloudRouter(CloudConfig(enabled=True, base_url=fake.url)).should_use_cloud_intent(None)  # no intents


# -- requests -------------------------------------------------------------------------------------


def test_intent_comes_back_on_a_cloud_thread(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    router = make_router(fake.url)
    results = Results()
    ticket = router.submit_intent(TEXT, results)
    result, thread = results.one()
    assert result.outcome is CloudOutcome.OK and thread.startswith("cloud-worker-")
    assert isinstance(result.value, Intent) and result.value.source is IntentSource.CLOUD
    assert result.value.slot_values == {"name": "kitchen light"}
    assert ticket.wait() is result
    assert router.status().state is CloudState.UP
    stats = router.stats()
    assert stats["counters"] == {"cloud_intent_calls": 1}
    assert stats["probe"]["up"] == 1 and stats["breaker"]["state"] == "closed"


def test_asr_comes_back(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    router = make_router(fake.url)
    samples = np.full(4000, 0.1, np.float32)
    results = Results()
    router.submit_asr(samples, results, language="en")
    samples[:] = 0.9  # the router copied the audio when it was submitted
    result, _ = results.one()
    assert result.ok and result.value == "turn on the kitchen light"
    assert fake.posts()[0].wav == (16_000, 1, 4000)
    assert [s.method for s in fake.seen] == ["GET", "POST"]  # probed first


def test_intent_filter_narrows_what_the_cloud_may_answer(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    router = make_router(fake.url)
    result = router.submit_intent(TEXT, Results(), intent_filter=["HassTurnOff"]).wait()
    assert result is not None and result.ok and result.value is None  # HassTurnOn was not allowed
    prompt = fake.posts()[0].body["messages"][0]["content"]
    assert "HassTurnOff" in prompt and "HassLightSet" not in prompt


def test_submit_never_waits_for_a_slow_cloud(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    fake.mode = Mode.SLOW
    router = make_router(fake.url, probe_budget_s=SHORT)
    results = Results()
    router.submit_intent(TEXT, results)
    assert not fake.answered_late.is_set()  # submit returned while the server still holds
    result, _ = results.one()
    assert result.outcome is CloudOutcome.UNAVAILABLE  # the probe's deadline passed
    assert result.error is not None and result.error.kind is CloudErrorKind.TIMEOUT
    assert not fake.answered_late.is_set()


def test_answer_comes_by_the_budget_when_the_call_hangs(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    fake.mode = Mode.SLOW_CALLS  # probe answers, the completion does not
    router = make_router(fake.url, workers=1, local_budget_s=2.0, request_timeout_s=30.0)
    results = Results()
    router.submit_intent(TEXT, results)
    result, _ = results.one()
    assert result.outcome in (CloudOutcome.TIMED_OUT, CloudOutcome.FAILED)  # the deadline or the capped read timeout
    assert result.error is not None and result.error.kind is CloudErrorKind.TIMEOUT
    assert not fake.answered_late.is_set()
    fake.mode = Mode.OK
    fake.release.set()
    after = Results()
    router.submit_intent(TEXT, after)  # one worker: the first request is finished when this one is
    assert after.one()[0].outcome is CloudOutcome.OK
    assert len(results.items) == 1  # the late answer was dropped, not delivered twice


def test_a_trickled_answer_ends_at_the_call_deadline_and_frees_the_worker(
        fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    fake.mode = Mode.TRICKLE  # the probe answers; the completion comes a byte at a time, forever
    router = make_router(fake.url, workers=1, request_timeout_s=1.0, local_budget_s=4.0, failure_threshold=5)
    result = router.submit_intent(TEXT, Results()).wait()
    assert result is not None and result.outcome is CloudOutcome.FAILED  # the call's deadline, not local_budget_s
    assert result.error is not None and result.error.kind is CloudErrorKind.TIMEOUT
    stats = router.stats()
    assert stats["counters"]["cloud_intent_error_timeout"] == 1
    assert stats["breaker"]["consecutive_failures"] == 1  # a timeout counts toward the breaker
    fake.mode = Mode.OK
    after = router.submit_intent(TEXT, Results()).wait()
    assert after is not None and after.outcome is CloudOutcome.OK, after  # the one worker is free again


def test_busy_when_the_queue_is_full(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    fake.mode = Mode.SLOW
    router = make_router(fake.url, workers=1, queue_size=1, probe_budget_s=5.0, local_budget_s=10.0)
    first, second, third = Results(), Results(), Results()
    router.submit_intent(TEXT, first)
    wait_until(fake.held.is_set, what="the worker to be busy")
    router.submit_intent(TEXT, second)
    router.submit_intent(TEXT, third)
    result, thread = third.one()
    assert result.outcome is CloudOutcome.BUSY and thread == "cloud-deadline"  # never the caller's thread
    assert router.stats()["counters"]["cloud_intent_busy"] == 1
    router.close(timeout=0.1)
    assert first.one()[0].outcome is CloudOutcome.UNAVAILABLE  # close answers what is pending
    assert second.one()[0].outcome is CloudOutcome.UNAVAILABLE
    late = Results()
    router.submit_intent(TEXT, late)
    assert late.one()[0].outcome is CloudOutcome.UNAVAILABLE


def test_a_failing_callback_does_not_stop_the_workers(fake: FakeCloud, make_router: Callable[..., CloudRouter],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    router = make_router(fake.url, workers=1)

    def broken(result: CloudResult[Any]) -> None:
        raise RuntimeError("caller bug")

    router.submit_intent(TEXT, broken)
    results = Results()
    router.submit_intent(TEXT, results)
    assert results.one()[0].ok
    assert any("callback failed" in r.getMessage() for r in caplog.records)


# -- breaker ---------------------------------------------------------------------------------------


def _scenario(name: str, servers: list, certs: Certs | None) -> tuple[str, Callable[[], None], dict]:
    """(url, fix, config overrides): a failing cloud and how it comes back on the same address."""
    if name == "closed":
        port = free_port()
        return f"http://127.0.0.1:{port}", lambda: servers.append(FakeCloud(port).start()), {}
    if name == "black_hole":
        hole = BlackHole()
        servers.append(hole)

        def reopen() -> None:
            hole.stop()
            servers.append(FakeCloud(hole.port).start())
        return hole.url, reopen, {}
    if name == "bad_cert":
        assert certs is not None
        bad = FakeCloud(tls=certs.bad).start()
        servers.append(bad)

        def good() -> None:
            bad.stop()
            servers.append(FakeCloud(bad.port, tls=certs.good).start())
        return bad.url, good, {"ca_file": certs.ca}
    mode = {"slow": Mode.SLOW, "5xx": Mode.SERVER_ERROR, "malformed": Mode.MALFORMED, "trickle": Mode.TRICKLE,
            "deep_json": Mode.DEEP_JSON, "deep_content": Mode.OK}[name]
    fake = FakeCloud().start()
    servers.append(fake)
    fake.mode = mode
    answer = fake.chat_content
    if name == "deep_content":
        fake.chat_content = DEEP

    def heal() -> None:
        fake.mode = Mode.OK
        fake.chat_content = answer
        fake.release.set()
    return fake.url, heal, {}


@pytest.mark.parametrize("name", ["closed", "black_hole", "slow", "5xx", "malformed", "trickle", "deep_json",
                                  "deep_content", "bad_cert"])
def test_breaker_opens_after_failures_and_recovers(name: str, servers: list, request: pytest.FixtureRequest,
                                                   make_router: Callable[..., CloudRouter],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="voiced.cloud")
    certs = request.getfixturevalue("certs") if name == "bad_cert" else None
    url, fix, overrides = _scenario(name, servers, certs)
    router = make_router(url, failure_threshold=2, **overrides)
    for _ in range(2):
        result = router.submit_intent(TEXT, Results()).wait()
        assert result is not None and not result.ok  # answered, with what went wrong
    assert router.breaker_state is BreakerState.OPEN
    assert router.status().state is CloudState.OPEN
    assert router.stats()["breaker"]["opened"] == 1

    fix()
    wait_until(lambda: router.should_use_cloud_intent(None), what="the breaker's delay")
    result = router.submit_intent(TEXT, Results()).wait()
    assert result is not None and result.ok, result
    assert router.breaker_state is BreakerState.CLOSED
    messages = [r.getMessage() for r in caplog.records]
    assert any("half-open" in m for m in messages) and any("circuit closed" in m for m in messages)
    assert not any("unexpectedly" in m for m in messages)  # every failure was a CloudError


def test_nothing_is_sent_while_open(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    fake.mode = Mode.SERVER_ERROR
    router = make_router(fake.url, failure_threshold=1, backoff=BackoffPolicy(initial=600.0, maximum=600.0))
    router.submit_intent(TEXT, Results()).wait()
    seen = len(fake.seen)
    fake.mode = Mode.OK
    assert not router.should_use_cloud_intent(None) and not router.should_use_cloud_asr(False)
    result = router.submit_intent(TEXT, Results()).wait()
    assert result is not None and result.outcome is CloudOutcome.UNAVAILABLE
    assert result.error is not None and result.error.kind is CloudErrorKind.CIRCUIT_OPEN
    assert len(fake.seen) == seen


def test_a_call_that_cannot_connect_forces_a_new_probe(servers: list, make_router: Callable[..., CloudRouter]) -> None:
    fake = FakeCloud().start()
    servers.append(fake)
    router = make_router(fake.url, failure_threshold=5)
    assert router.submit_intent(TEXT, Results()).wait().ok  # type: ignore[union-attr]
    fake.stop()  # gone while the probe is still cached as up
    result = router.submit_intent(TEXT, Results()).wait()
    assert result is not None and result.outcome is CloudOutcome.FAILED
    assert result.error is not None and result.error.kind is CloudErrorKind.REFUSED
    assert router.status().state is CloudState.DOWN


# -- key file --------------------------------------------------------------------------------------


def test_missing_key_file_disables_the_cloud_with_a_warning(servers: list, tmp_path: Path,
                                                            make_router: Callable[..., CloudRouter],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeCloud(key=KEY).start()
    servers.append(fake)
    key_file = tmp_path / "cloud.key"
    router = make_router(fake.url, api_key_file=key_file, probe_ttl_s=0.05)  # constructing never raises
    assert not router.should_use_cloud_intent(None)
    assert router.status().state is CloudState.UNUSABLE
    result = router.submit_intent(TEXT, Results()).wait()
    assert result is not None and result.outcome is CloudOutcome.UNAVAILABLE
    assert result.error is not None and result.error.kind is CloudErrorKind.DISABLED
    assert fake.seen == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "api_key_file" in r.getMessage()]
    assert len(warnings) == 1  # once, not per utterance

    key_file.write_text(KEY + "\n")  # provisioned later: picked up without a restart
    wait_until(lambda: router.should_use_cloud_intent(None), what="the key to be read again")
    assert router.submit_intent(TEXT, Results()).wait().ok  # type: ignore[union-attr]
    assert fake.seen[-1].authorization == f"Bearer {KEY}"
    assert KEY not in caplog.text


def test_missing_ca_file_disables_the_cloud_without_raising(servers: list, certs: Certs, tmp_path: Path,
                                                            make_router: Callable[..., CloudRouter],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeCloud(tls=certs.good).start()
    servers.append(fake)
    router = make_router(fake.url, ca_file=tmp_path / "absent-ca.pem")
    assert router.should_use_cloud_intent(None)  # the decision does not build TLS; the worker finds out
    for _ in range(2):
        result = router.submit_intent(TEXT, Results()).wait()
        assert result is not None and result.outcome is CloudOutcome.UNAVAILABLE
        assert result.error is not None and result.error.kind is CloudErrorKind.DISABLED
    assert not router.should_use_cloud_intent(None)
    assert router.status().state is CloudState.UNUSABLE
    assert router.breaker_state is BreakerState.CLOSED  # a config problem is not an outage
    assert fake.seen == []
    assert sum("ca_file" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING) == 1


def test_starting_needs_no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Construction, decisions, status and stats never resolve a name nor connect."""
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("network used")

    monkeypatch.setattr("socket.getaddrinfo", no_network)
    monkeypatch.setattr("socket.create_connection", no_network)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TEMPLATES[0]))
    recognizer = IntentRecognizer.load([tmp_path / "t.yaml"])
    config = CloudConfig(enabled=True, base_url="https://cloud.invalid", asr=True, api_key_file=tmp_path / "none")
    router = CloudRouter.from_recognizer(config, recognizer)
    assert not router.should_use_cloud_intent(None) and not router.should_use_cloud_asr(False)
    assert router.status().state is CloudState.UNUSABLE
    assert router.stats()["probe"]["probes"] == 0
    router.close()


def test_from_recognizer_end_to_end(fake: FakeCloud, tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(TEMPLATES[0]))
    recognizer = IntentRecognizer.load([tmp_path / "t.yaml"])
    fake.chat_content = '{"intent": "HassLightSet", "slots": {"area": "kitchen", "brightness": 30}}'
    router = CloudRouter.from_recognizer(CloudConfig(enabled=True, base_url=fake.url), recognizer)
    try:
        assert recognizer.recognize("make the kitchen a bit dimmer") is None
        assert router.should_use_cloud_intent(None)
        result = router.submit_intent("make the kitchen a bit dimmer", Results()).wait()
        assert result is not None and result.ok and result.value is not None
        assert result.value.slot_values == {"area": "kitchen", "brightness": 30, "domain": "light"}
    finally:
        router.close()


def test_prepare_does_the_local_work_only(fake: FakeCloud, make_router: Callable[..., CloudRouter]) -> None:
    router = make_router(fake.url)
    router.prepare()
    assert fake.seen == [] and router.status().state is CloudState.UNKNOWN
    assert {"cloud-worker-0", "cloud-worker-1", "cloud-deadline"} <= {t.name for t in threading.enumerate()}
    CloudRouter(CloudConfig()).prepare()  # disabled: nothing at all

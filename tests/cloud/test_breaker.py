"""The circuit breaker on a hand-driven clock."""

from __future__ import annotations

from voiced.cloud import BreakerState, CircuitBreaker
from voiced.runtime.backoff import BackoffPolicy

POLICY = BackoffPolicy(initial=10.0, maximum=100.0, factor=2.0, jitter=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_threshold_then_half_opens_and_closes() -> None:
    clock = Clock()
    b = CircuitBreaker(3, POLICY, trial_timeout_s=5.0, clock=clock)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
    assert b.state is BreakerState.CLOSED
    assert b.allow()
    b.record_failure()
    assert b.state is BreakerState.OPEN and b.opened == 1
    assert not b.allow() and not b.would_allow()
    assert b.retry_in() == 10.0

    clock.now += 10.0
    assert b.would_allow()
    assert b.allow()  # the trial
    assert b.state is BreakerState.HALF_OPEN
    assert not b.allow()  # one trial at a time
    b.record_success()
    assert b.state is BreakerState.CLOSED
    assert b.allow()


def test_failed_trial_reopens_with_a_longer_delay_and_success_resets_it() -> None:
    clock = Clock()
    b = CircuitBreaker(1, POLICY, trial_timeout_s=5.0, clock=clock)
    b.record_failure()
    assert b.retry_in() == 10.0
    clock.now += 10.0
    assert b.allow()
    b.record_failure()
    assert b.state is BreakerState.OPEN and b.retry_in() == 20.0
    clock.now += 20.0
    assert b.allow()
    b.record_success()
    b.record_failure()
    assert b.retry_in() == 10.0  # the backoff starts over after a success


def test_a_trial_that_never_reports_back_frees_the_way() -> None:
    clock = Clock()
    b = CircuitBreaker(1, POLICY, trial_timeout_s=5.0, clock=clock)
    b.record_failure()
    clock.now += 10.0
    assert b.allow()
    assert not b.allow()
    clock.now += 5.0  # the trial's thread hung
    assert b.allow()


def test_success_in_between_resets_the_count() -> None:
    b = CircuitBreaker(2, POLICY, trial_timeout_s=5.0, clock=Clock())
    b.record_failure()
    b.record_success()
    b.record_failure()
    assert b.state is BreakerState.CLOSED

"""Failures the fuzzer found in files its brief may not change: each pinned as a strict xfail
with its reproducer, so the fix (by the owner of the file) turns it into a failing XPASS here
and the marker is removed then."""

from __future__ import annotations

import pytest

from voiced.runtime.backoff import Backoff, BackoffPolicy


@pytest.mark.xfail(strict=True, raises=OverflowError,
                   reason="voiced/runtime/backoff.py: initial * factor**failures overflows a float")
def test_backoff_keeps_answering_the_maximum_after_1024_failures() -> None:
    # with the default policy (maximum 30 s) the 1025th consecutive failure, about 8.5 hours of an
    # unreachable broker, raises OverflowError inside paho's on_connect_fail callback
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(1100)]
    assert max(delays) <= 30 * 1.1


@pytest.mark.xfail(strict=True, raises=OverflowError,
                   reason="voiced/runtime/backoff.py: a large factor (config mqtt.backoff.factor = 1e308) overflows")
def test_backoff_with_a_huge_factor_answers_the_maximum() -> None:
    backoff = Backoff(BackoffPolicy(initial=1.0, maximum=30.0, factor=1e308, jitter=0.0))
    assert [backoff.next_delay() for _ in range(3)] == [1.0, 30.0, 30.0]

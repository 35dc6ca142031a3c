"""The shared reconnect backoff: delays grow to the maximum and stay there, however long the outage."""

from __future__ import annotations

import pytest

from voiced.runtime.backoff import Backoff, BackoffPolicy


def test_delays_grow_by_the_factor_up_to_the_maximum() -> None:
    backoff = Backoff(BackoffPolicy(initial=0.5, maximum=30.0, factor=2.0, jitter=0.0))
    assert [backoff.next_delay() for _ in range(9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_backoff_keeps_answering_the_maximum_after_1024_failures() -> None:
    # Found by fuzzing: initial * factor**failures overflowed a float at the 1025th consecutive
    # failure (about 8.5 hours of an unreachable broker at the defaults), raising OverflowError
    # inside paho's on_connect_fail callback.
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(5000)]
    assert max(delays) <= 30 * 1.1 and min(delays[20:]) >= 30


@pytest.mark.parametrize("factor", [1e308, 1e10, 1.0])
def test_any_valid_factor_answers_within_the_bounds(factor: float) -> None:
    # Found by fuzzing the config (mqtt.backoff.factor = 1e308): the second delay overflowed.
    backoff = Backoff(BackoffPolicy(initial=1.0, maximum=30.0, factor=factor, jitter=0.0))
    delays = [backoff.next_delay() for _ in range(3)]
    assert delays == ([1.0, 1.0, 1.0] if factor == 1.0 else [1.0, 30.0, 30.0])

"""The byte rate background work keeps to (plateau_core.pace)."""

from __future__ import annotations

import pytest

from plateau_core.errors import InvalidInputError
from plateau_core.pace import Pace


class Clock:
    """Time that moves only when a wait sleeps it away."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False


def test_each_piece_starts_its_bytes_over_the_rate_after_the_one_before() -> None:
    clock = Clock()
    pace = Pace(1000, clock=clock)
    assert pace.take(500, clock.sleep)  # the first starts at once
    assert pace.take(2000, clock.sleep)  # 500 bytes at 1000/s: half a second later
    clock.now += 0.5  # time spent merging counts towards the next wait
    assert pace.take(100, clock.sleep)  # 2000 bytes: 2 s after the second, 1.5 s from here
    assert clock.waits == [pytest.approx(0.5), pytest.approx(1.5)]
    assert pace.waited_s == pytest.approx(2.0)


def test_an_idle_pace_saves_no_credit_for_a_burst() -> None:
    clock = Clock()
    pace = Pace(1000, clock=clock)
    pace.take(1000, clock.sleep)
    clock.now += 60  # a quiet minute
    pace.take(1000, clock.sleep)
    pace.take(1000, clock.sleep)
    assert clock.waits == [pytest.approx(1.0)]  # the third still waits the second's second


def test_a_stop_during_the_wait_counts_nothing() -> None:
    clock = Clock()
    pace = Pace(1000, clock=clock)
    pace.take(1000, clock.sleep)
    assert not pace.take(1000, lambda seconds: True)
    assert pace.waited_s == 0
    assert pace.take(1000, clock.sleep)  # the same second is still owed
    assert clock.waits == [pytest.approx(1.0)]


def test_no_rate_never_waits_but_still_hears_a_stop() -> None:
    clock = Clock()
    pace = Pace(None, clock=clock)
    assert all(pace.take(10**12, clock.sleep) for _ in range(3))
    assert clock.waits == [0.0, 0.0, 0.0]
    assert not pace.take(1, lambda seconds: True)


@pytest.mark.parametrize("rate", [0, -5])
def test_a_rate_must_be_positive(rate: int) -> None:
    with pytest.raises(InvalidInputError, match="positive rate"):
        Pace(rate)

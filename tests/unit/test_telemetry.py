"""Worker counters: the seal-latency histogram, and a restarted worker carrying on."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from bridge.ops.telemetry import SEAL_BUCKETS, Histogram, WorkerTelemetry, parse_dump


@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=50))
def test_histogram_buckets_are_cumulative_and_count_every_observation(
    observed: list[float],
) -> None:
    histogram = Histogram()
    for value in observed:
        histogram.observe(value)
    cumulative = histogram.cumulative()
    assert [bound for bound, _ in cumulative] == [*map(str, SEAL_BUCKETS), "+Inf"]
    for (bound, count), limit in zip(cumulative, [*SEAL_BUCKETS, float("inf")], strict=True):
        assert count == sum(1 for v in observed if v <= limit), bound
    assert histogram.count == len(observed)
    assert abs(histogram.total - sum(observed)) < 1e-6


def test_a_restarted_worker_continues_from_its_predecessors_counts() -> None:
    before = WorkerTelemetry()
    before.ingested("events", 0, 100, 4000)
    before.sealed("events", 0, 100, 1200, 0.02)
    before.add("errors", ("consumer_error",))
    # Through JSON, as the status file carries it.
    dumped = json.loads(json.dumps(before.dump()))
    after = WorkerTelemetry()
    after.load(dumped)
    after.ingested("events", 0, 50, 2000)
    assert after.counter("records_ingested", ("events", "0")) == 150
    assert after.counter("bytes_ingested", ("events", "0")) == 6000
    assert after.counter("seals", ("events", "0")) == 1
    assert after.counter("errors", ("consumer_error",)) == 1
    _, histograms = parse_dump(after.dump())
    assert [(topic, h.count) for topic, h in histograms] == [("events", 1)]


def test_entries_of_unknown_shape_are_left_out() -> None:
    counters, histograms = parse_dump(
        {
            "counters": [
                ["records_ingested", ["t", "0"], 5],
                ["no_such_counter", ["x"], 1],
                ["records_ingested", ["missing-partition"], 1],
                "garbage",
            ],
            "seal_seconds": {"t": [[1, 2], 0.1], "u": "garbage"},
        }
    )
    assert counters == [(("records_ingested", ("t", "0")), 5.0)]
    assert histograms == []
    assert parse_dump({"counters": "garbage", "seal_seconds": []}) == ([], [])

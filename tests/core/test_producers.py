"""Idempotent producers in the engine: the sequence rules, and the manifest recording each
producer's batches in the transaction of the segment that holds them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text

from plateau_core import Store, WriterPolicy
from plateau_core.producers import (
    REMEMBERED_BATCHES,
    SEQUENCE_MAX,
    ProducerBatch,
    ProducerState,
    Verdict,
    check,
    next_sequence,
    resuming,
)
from tests.support import batch


def test_a_producer_with_no_state_starts_at_any_sequence() -> None:
    """Kafka's rule: a producer whose state is gone (expired) goes on where it was."""
    assert check(None, 0, 0, 9).verdict is Verdict.NEW
    assert check(None, 3, 10, 19).verdict is Verdict.NEW


def test_a_producer_whose_batch_was_taken_back_resumes_with_that_batch() -> None:
    state = resuming(ProducerBatch(7, 2, 10, 14, 300))
    assert check(state, 2, 10, 14).verdict is Verdict.NEW
    later = check(state, 2, 15, 19)
    assert later.verdict is Verdict.OUT_OF_ORDER and "expected 10" in later.detail
    assert check(state, 1, 10, 14).verdict is Verdict.FENCED
    landed = state.with_batch(ProducerBatch(7, 2, 10, 14, 300))
    assert check(landed, 2, 15, 19).verdict is Verdict.NEW


def test_the_next_batch_follows_the_last_and_a_retry_gets_its_offsets() -> None:
    state = ProducerState(7, 0, (ProducerBatch(7, 0, 0, 9, 100), ProducerBatch(7, 0, 10, 14, 200)))
    assert check(state, 0, 15, 20).verdict is Verdict.NEW
    again = check(state, 0, 0, 9)
    assert (again.verdict, again.base_offset) == (Verdict.DUPLICATE, 100)
    assert check(state, 0, 10, 14).base_offset == 200
    gap = check(state, 0, 16, 20)
    assert gap.verdict is Verdict.OUT_OF_ORDER and "expected 15" in gap.detail


def test_epochs_fence_old_producers_and_restart_sequences() -> None:
    state = ProducerState(7, 3, (ProducerBatch(7, 3, 0, 4, 0),))
    assert check(state, 2, 5, 9).verdict is Verdict.FENCED
    assert check(state, 4, 0, 3).verdict is Verdict.NEW
    assert check(state, 4, 5, 9).verdict is Verdict.OUT_OF_ORDER
    bumped = state.with_batch(ProducerBatch(7, 4, 0, 3, 50))
    assert bumped.epoch == 4 and bumped.batches == (ProducerBatch(7, 4, 0, 3, 50),)


def test_sequences_wrap_after_the_largest() -> None:
    assert next_sequence(SEQUENCE_MAX) == 0
    state = ProducerState(1, 0, (ProducerBatch(1, 0, SEQUENCE_MAX - 4, SEQUENCE_MAX, 9),))
    assert check(state, 0, 0, 3).verdict is Verdict.NEW


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=40))
def test_only_the_last_batches_are_remembered(sizes: list[int]) -> None:
    state: ProducerState | None = None
    sequence = offset = 0
    sent = []
    for size in sizes:
        landed = ProducerBatch(1, 0, sequence, sequence + size - 1, offset)
        sent.append(landed)
        state = ProducerState(1, 0, (landed,)) if state is None else state.with_batch(landed)
        sequence += size
        offset += size
    assert state is not None
    assert state.batches == tuple(sent[-REMEMBERED_BATCHES:])
    for old in sent[-REMEMBERED_BATCHES:]:
        assert check(state, 0, old.first_sequence, old.last_sequence).base_offset == old.base_offset


def _append(store: Store, offsets: range, producer: ProducerBatch, *, seal: bool) -> None:
    writer = store.writer(WriterPolicy(fsync=False))
    writer.acquire("t", 0)
    writer.append("t", 0, batch(list(offsets)), producer=producer)
    if seal:
        writer.close()
    else:
        writer.release("t", 0, seal=False)  # a crash: the buffer is gone
        writer.close()


def test_sealed_batches_are_recorded_with_their_segment(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        _append(store, range(0, 10), ProducerBatch(5, 0, 0, 9, 0), seal=True)
        states = store.manifest.producer_states("t", 0)
        assert states == {5: ProducerState(5, 0, (ProducerBatch(5, 0, 0, 9, 0),))}
        _append(store, range(10, 15), ProducerBatch(5, 0, 10, 14, 10), seal=True)
        assert store.manifest.producer_states("t", 0)[5].last_sequence == 14
        assert store.manifest.producer_states("t", 1) == {}


def test_producers_silent_since_the_cutoff_are_forgotten(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        _append(store, range(0, 10), ProducerBatch(5, 0, 0, 9, 0), seal=True)
        before = int(time.time() * 1000)
        time.sleep(0.01)
        _append(store, range(10, 15), ProducerBatch(6, 0, 0, 4, 10), seal=True)
        assert store.manifest.expire_producers(before) == 1
        assert set(store.manifest.producer_states("t", 0)) == {6}
        assert store.manifest.expire_producers(before) == 0


def test_a_batch_lost_before_its_seal_leaves_no_trace(tmp_path: Path) -> None:
    """The producer was never answered for it, so it sends it again: that must be NEW."""
    with Store.open(tmp_path) as store:
        _append(store, range(0, 10), ProducerBatch(5, 0, 0, 9, 0), seal=True)
        _append(store, range(10, 20), ProducerBatch(5, 0, 10, 19, 10), seal=False)
    with Store.open(tmp_path) as store:
        state = store.manifest.producer_states("t", 0)[5]
        assert check(state, 0, 10, 19).verdict is Verdict.NEW
        assert check(state, 0, 0, 9).verdict is Verdict.DUPLICATE
        assert store.manifest.watermark("t", 0) == 10


def test_a_failed_commit_records_neither_segment_nor_producer(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.manifest.engine.dispose()
        with store.manifest.engine.begin() as conn:
            # Any write to the producers table now fails, inside the segment's transaction.
            conn.execute(
                text(
                    "CREATE TRIGGER no_producers BEFORE INSERT ON producers "
                    "BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            )
        writer = store.writer(WriterPolicy(fsync=False, retry_backoff_s=60))
        writer.acquire("t", 0)
        writer.append("t", 0, batch([0, 1, 2]), producer=ProducerBatch(9, 0, 0, 2, 0))
        with pytest.raises(Exception, match="not sealed"):
            writer.flush(timeout_s=1)
        assert store.manifest.segments("t") == []
        assert store.manifest.watermark("t", 0) is None
        writer.release("t", 0, seal=False)
        writer.close()


def test_producer_ids_are_never_handed_out_twice(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    found: list[int] = []
    lock = threading.Lock()

    def take(count: int) -> None:
        with Store.open(tmp_path) as store:
            for _ in range(count):
                pid = store.manifest.next_producer_id()
                with lock:
                    found.append(pid)

    threads = [threading.Thread(target=take, args=(25,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(found) == list(range(100))
    with Store.open(tmp_path) as store:
        assert store.manifest.next_producer_id() == 100


def test_a_produced_topic_keeps_its_largest_partition_count(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        assert store.manifest.ensure_produced_topic("a", 4, "config") == 4
        assert store.manifest.ensure_produced_topic("a", 2, "config") == 4
        assert store.manifest.ensure_produced_topic("a", 6, "create_topics") == 6
        assert store.manifest.ensure_produced_topic("b", 1, "auto_create") == 1
        assert store.manifest.produced_topics() == {"a": 6, "b": 1}

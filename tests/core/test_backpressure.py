"""Backpressure: appends are refused before anything changes, and resume is signalled."""

from __future__ import annotations

import threading
import time

import pytest

from plateau_core import BackpressureError, NoListener, RollPolicy, Store, WriterPolicy
from tests.support import GatedDisk, append_patiently, batch


class CapacityProbe(NoListener):
    def __init__(self) -> None:
        self.capacity = threading.Event()

    def on_capacity(self) -> None:
        self.capacity.set()


def test_busy_partition_refuses_until_its_seal_clears(store: Store) -> None:
    disk = GatedDisk()
    probe = CapacityProbe()
    writer = store.writer(WriterPolicy(fsync=False), probe)
    writer._write_segment = disk
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_rows=4, max_age_s=3600))
        writer.acquire("t", 1, roll=RollPolicy(max_rows=4, max_age_s=3600))
        writer.append("t", 0, batch([0, 1, 2, 3]))  # full: its seal starts and blocks
        assert disk.entered.wait(5)
        writer.append("t", 0, batch([4, 5, 6, 7]))  # buffered behind the seal: now full
        before = writer.stats()
        with pytest.raises(BackpressureError) as refused:
            writer.append("t", 0, batch([8, 9]))
        assert refused.value.reason == "partition_busy"
        assert (refused.value.topic, refused.value.partition) == ("t", 0)
        assert "still being written" in str(refused.value)
        assert writer.stats() == before  # refused before changing anything
        assert not writer.accepting("t", 0)
        # Other partitions are not held back by one slow partition.
        assert writer.accepting("t", 1)
        writer.append("t", 1, batch([0]))

        probe.capacity.clear()
        disk.gate.set()
        assert probe.capacity.wait(5)
        append_patiently(writer, "t", 0, batch([8, 9]))
        writer.flush()
    finally:
        disk.gate.set()
        writer.close()
    assert store.read("t", partitions=[0]).to_table().column("offset").to_pylist() == list(
        range(10)
    )


def test_memory_budget_bounds_buffered_bytes(store: Store) -> None:
    one = batch(range(100), value_size=200)
    budget = one.nbytes * 3
    disk = GatedDisk()
    writer = store.writer(WriterPolicy(memory_budget_bytes=budget, fsync=False))
    writer._write_segment = disk
    try:
        for p in range(4):
            writer.acquire("t", p, roll=RollPolicy(max_age_s=3600))
        refused: list[BackpressureError] = []
        for p in range(4):
            try:
                writer.append("t", p, batch(range(100), value_size=200))
            except BackpressureError as exc:
                refused.append(exc)
        assert [e.reason for e in refused] == ["memory_budget"]
        assert refused[0].partition == 3
        stats = writer.stats()
        assert stats.buffered_bytes + stats.in_flight_bytes <= budget
        # Under pressure the writer seals idle buffers instead of waiting for a roll.
        assert disk.entered.wait(5)
        assert not writer.accepting("t", 3)
        disk.gate.set()
        append_patiently(writer, "t", 3, batch(range(100), value_size=200))
        writer.flush()
    finally:
        disk.gate.set()
        writer.close()
    assert sum(s.records for s in store.spans("t")) == 400


def test_sustained_load_stays_within_budget(store: Store) -> None:
    sample = batch(range(500), value_size=128)
    budget = sample.nbytes * 6
    writer = store.writer(WriterPolicy(memory_budget_bytes=budget, fsync=False, writer_threads=1))
    peak = 0
    refusals = 0
    try:
        for p in range(4):
            writer.acquire("t", p, roll=RollPolicy(max_rows=1500, max_age_s=3600))
        for i in range(40):
            for p in range(4):
                data = batch(range(i * 500, (i + 1) * 500), value_size=128)
                refusals += append_patiently(writer, "t", p, data)
                stats = writer.stats()
                peak = max(peak, stats.buffered_bytes + stats.in_flight_bytes)
        writer.flush()
    finally:
        writer.close()
    assert peak <= budget
    spans = store.spans("t")
    assert [s.records for s in spans] == [20_000] * 4
    assert [s.next_offset for s in spans] == [20_000] * 4


def test_disk_floor_refuses_appends(store: Store) -> None:
    writer = store.writer(WriterPolicy(min_free_disk_bytes=2**62, fsync=False))
    try:
        writer.acquire("t", 0)
        with pytest.raises(BackpressureError) as refused:
            writer.append("t", 0, batch([0]))
        assert refused.value.reason == "disk_full"
        assert not writer.accepting("t", 0)
        assert writer.stats().buffered_rows == 0
    finally:
        writer.close()


def test_accepting_tells_the_truth_about_the_memory_budget(store: Store) -> None:
    one = batch(range(1000), value_size=128)
    disk = GatedDisk()
    writer = store.writer(WriterPolicy(memory_budget_bytes=int(one.nbytes * 1.5), fsync=False))
    writer._write_segment = disk
    try:
        writer.acquire("t", 0, roll=RollPolicy(max_rows=1000, max_age_s=3600))
        writer.append("t", 0, one)  # full: its seal starts and blocks, holding the memory
        assert disk.entered.wait(5)
        with pytest.raises(BackpressureError) as refused:
            writer.append("t", 0, batch(range(1000, 2000), value_size=128))
        assert refused.value.reason == "memory_budget"
        # Resuming now would only be refused again: accepting() must say no.
        assert not writer.accepting("t", 0)
        disk.gate.set()
        deadline = time.monotonic() + 5
        while not writer.accepting("t", 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writer.accepting("t", 0)
        writer.append("t", 0, batch(range(1000, 2000), value_size=128))
    finally:
        disk.gate.set()
        writer.close()

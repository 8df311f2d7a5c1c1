"""kill -9 in the middle of plateau's own work on its store, repeated at random points:
`plateau rebuild-manifest`, and what `plateau serve` does beside ingesting (consolidation,
retention's deletions, roll-up seals, the Kafka API's journal replay at start). After each
scenario nothing is lost or duplicated in what a reader sees, `plateau verify` passes, and
the next run finishes what the killed one started."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, Message, Producer

from bridge.local_kafka import free_port
from plateau_core import RollPolicy, Store, WriterPolicy
from plateau_core.consolidate import plan_runs
from plateau_core.manifest import SegmentRecord, SegmentState, now_ms
from plateau_core.names import TEMP_MARKER, segment_span, segment_start
from plateau_core.policies import ConsolidatePolicy
from tests.bridge_support import REPO, plateau_command
from tests.reliability.support import Audit, Recorder, scale
from tests.reliability.test_produce_crashes import wait_listening
from tests.support import append_patiently, batch


def _rng(default: int) -> random.Random:
    return random.Random(int(os.environ.get("PLATEAU_CRASH_SEED", str(default))))


def _kafka_api_config(
    path: Path, port: int, topics: list[dict[str, object]], **storage: object
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "storage": {"data_dir": str(path.parent / "data"), **storage},
                "kafka_api": {"listen": f"127.0.0.1:{port}"},
                "metrics": {"listen": "127.0.0.1:0"},
                "topics": topics,
            }
        )
    )
    return path


def _verify(config: Path) -> None:
    result = plateau_command("verify", "--config", str(config), log_level="ERROR")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "--log-level", "WARNING", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- rebuild-manifest --------------------------------------------------------------------------


def test_kill_9_during_rebuild_manifest(tmp_path: Path, reliability: Recorder) -> None:
    """rebuild-manifest records the segment files one by one. Killed part-way, the store
    must not open on the half-built manifest: serve would take every file not recorded yet
    for an orphan and delete it. The next rebuild-manifest finishes the job."""
    rng = _rng(11)
    data_dir = tmp_path / "data"
    partitions, segments, rows = 3, scale(80, 200), 50
    store = Store.open(data_dir)
    writer = store.writer(WriterPolicy(fsync=False))
    try:
        for partition in range(partitions):
            writer.acquire("events", partition, roll=RollPolicy(max_rows=rows, max_age_s=3600))
            for i in range(segments):
                append_patiently(
                    writer, "events", partition, batch(range(i * rows, (i + 1) * rows))
                )
        writer.flush()
    finally:
        writer.close()
        store.close()
    ends = {p: segments * rows for p in range(partitions)}
    config = _kafka_api_config(
        tmp_path / "plateau.yaml", free_port(), [{"name": "events", "partitions": partitions}]
    )
    kills = scale(3, 8)
    refused = 0
    for _ in range(kills):
        aside = len(list(data_dir.glob("manifest.db.broken-*")))
        process = _command("rebuild-manifest", "--config", str(config), "--yes")
        deadline = time.monotonic() + 60
        # Killed once the old manifest is moved aside: somewhere in the recording.
        while len(list(data_dir.glob("manifest.db.broken-*"))) == aside:
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "rebuild-manifest did not start within 60 s"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.3 * segments * partitions / 100))
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        # What an operator (or a supervisor) does next: start plateau serve.
        serve = _command("serve", "--config", str(config))
        try:
            status = serve.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            serve.send_signal(signal.SIGTERM)
            stderr = serve.communicate(timeout=60)[1]
        if status is not None:
            assert "rebuild-manifest" in stderr, stderr[-3000:]
            refused += 1
        time.sleep(1.0)  # a manifest moved aside is named by the second
    started = time.monotonic()
    result = plateau_command("rebuild-manifest", "--config", str(config), "--yes")
    assert result.returncode == 0, result.stderr[-3000:]
    recover_s = time.monotonic() - started
    with Store.open(data_dir):
        pass  # opens: the rebuild is finished
    _verify(config)
    reliability.check(
        "kill -9 during rebuild-manifest",
        f"plateau rebuild-manifest killed with SIGKILL {kills} times while it recorded "
        f"{partitions * segments} segment files, plateau serve started after each kill; then "
        "rebuild-manifest run to its end",
        data_dir,
        "events",
        {p: range(end) for p, end in ends.items()},
        recover_s=recover_s,
        kills=kills,
        serve_refused_after_kill=refused,
    )


# --- serve's background work, under an idempotent producer -----------------------------------


class Producing:
    """An idempotent acks=all producer writing JSON records to plateau's Kafka API from a
    thread, each keyed by its number; remembers where each acknowledgement placed it."""

    def __init__(self, port: int, topic: str, pad: int = 200) -> None:
        self.topic = topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: list[KafkaError] = []
        self.sent = 0
        self._pad = "x" * pad
        self._stop = threading.Event()
        self._port = port
        self._thread = threading.Thread(target=self._run, name="producer")
        self._thread.start()

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(err)
            return
        key = msg.key()
        assert key is not None
        self.acked[key] = (msg.partition(), msg.offset())

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{self._port}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "reconnect.backoff.max.ms": 200,
            }
        )
        i = 0
        while not self._stop.is_set() and i < 1_000_000:  # bounded: a failing test ends
            try:
                value = b'{"i": %d, "host": "h%d", "pad": "%s"}' % (i, i % 5, self._pad.encode())
                producer.produce(self.topic, key=b"k%d" % i, value=value, on_delivery=self._report)
                i += 1
                self.sent = i
            except BufferError:
                producer.poll(0.05)
                continue
            if i % 100 == 0:
                producer.poll(0)
                time.sleep(0.01)  # about 10,000 records a second at most
        assert producer.flush(120) == 0, "records still unacknowledged after 120 s"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "the producer did not finish"
        assert self.failed == [], self.failed[:5]


def stored_places(store: Store, topic: str) -> dict[bytes, list[tuple[int, int]]]:
    """Each key's (partition, offset) places in what a reader of `topic` sees."""
    places: dict[bytes, list[tuple[int, int]]] = {}
    for span in store.spans(topic):
        read = store.read(topic, partitions=[span.partition], columns=["offset", "key"])
        for row in read.to_table().to_pylist():
            places.setdefault(row["key"], []).append((span.partition, row["offset"]))
    return places


def produced_audit(
    acked: dict[bytes, tuple[int, int]],
    places: dict[bytes, list[tuple[int, int]]],
    sent: int,
    retired: set[bytes] | None = None,
) -> Audit:
    """Every acknowledged key stored once where its acknowledgement said (but those in
    `retired`, which must not be stored at all)."""
    gone = retired or set()
    expected = {key: place for key, place in acked.items() if key not in gone}
    lost = [key for key in expected if key not in places]
    moved = [key for key, place in expected.items() if key in places and places[key][0] != place]
    back = [key for key in gone if key in places]
    return Audit(
        produced=sent,
        expected=len(expected),
        landed=sum(1 for key in expected if key in places),
        lost=len(lost),
        duplicated=sum(len(found) - 1 for found in places.values() if len(found) > 1),
        unexpected=len(moved) + len(back),
        missing_sample=[acked[key] for key in lost[:10]],
    )


def _partition_files(data_dir: Path, topic: str) -> list[Path]:
    return [p for p in (data_dir / "topics" / topic).glob("*/*") if p.is_file()]


def _wait_for(found: Callable[[], bool], process: subprocess.Popen[str], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        if found():
            return True
        time.sleep(0.002)
    return False


def _serve(config: Path, port: int) -> subprocess.Popen[str]:
    process = _command("serve", "--config", str(config))
    wait_listening(port)
    return process


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        stderr = process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired as exc:
        # Where every thread of serve is, for the failure to show: its stacks on SIGUSR1.
        process.send_signal(signal.SIGUSR1)
        time.sleep(2)
        process.kill()
        stderr = process.communicate()[1]
        raise AssertionError(f"serve did not stop in 60 s; its log:\n{stderr[-20000:]}") from exc
    # A stop that timed out is followed by every thread's stack: room for them.
    assert process.returncode == 0, stderr[-20000:]
    return stderr


ROLLUP = "events.rollup.1s"


def _background_topic(work: str) -> dict[str, object]:
    topic: dict[str, object] = {
        "name": "events",
        "partitions": 3,
        "format": "json",
        "roll": {"max_age": "100ms"},
    }
    if work == "consolidation":
        topic["consolidate"] = {"target_bytes": "256KiB", "min_age": "0s"}
    elif work == "retention":
        topic["retention"] = {"max_segments": 12}
    else:
        topic["rollups"] = [{"granularity": "1s", "dimensions": ["host"], "metrics": ["count"]}]
    return topic


def _consolidation_temp(data_dir: Path) -> bool:
    """A consolidated segment is being written (its temp file names a span)."""
    for path in _partition_files(data_dir, "events"):
        final = path.name.lstrip(".").split(TEMP_MARKER)[0]
        if TEMP_MARKER in path.name and (span := segment_span(final)) and span[1] is not None:
            return True
    return False


def _deleting(data_dir: Path) -> list[SegmentRecord]:
    with Store.open(data_dir) as store:
        return store.manifest.segments(states=(SegmentState.DELETING,))


def _work_left(data_dir: Path, work: str) -> str | None:
    """What the next run still has to do of the killed runs' work (None: nothing), said so
    that a run that does not finish it names what is left."""
    with Store.open(data_dir) as store:
        rows = store.manifest.segments("events", states=tuple(SegmentState))
        deleting = store.manifest.segments(states=(SegmentState.DELETING,))
        if work == "consolidation":
            policy = ConsolidatePolicy(target_bytes=256 * 1024, min_age_s=0.0)
            runs = [
                run
                for p in range(3)
                for run in plan_runs([r for r in rows if r.partition == p], policy, now_ms())
            ]
            if runs or deleting:
                return f"{len(runs)} runs to merge, {len(deleting)} segments deleting"
            return None
        if work == "retention":
            kept = {
                p: sum(1 for r in rows if r.partition == p and r.state != SegmentState.DELETING)
                for p in range(3)
            }
            over = {p: n for p, n in kept.items() if n > 12}
            if deleting or over:
                return f"{len(deleting)} segments deleting, segments over 12 kept: {over}"
            return None
        raw = {(r.partition, r.start_offset): r.state.name for r in rows}
        rolled = {
            (r.partition, r.start_offset): r.state.name for r in store.manifest.segments(ROLLUP)
        }
        if raw.keys() == rolled.keys():
            return None
        unrolled = sorted((k, v) for k, v in raw.items() if k not in rolled)
        orphans = sorted((k, v) for k, v in rolled.items() if k not in raw)
        return (
            f"raw segments without a roll-up: {len(unrolled)} {unrolled[:5]}; roll-ups "
            f"without a raw segment: {len(orphans)} {orphans[:5]}; "
            f"{len(deleting)} segments deleting"
        )


def _kill_point(data_dir: Path, work: str) -> dict[str, int]:
    """What the kill interrupted, as far as the store shows it."""
    files = _partition_files(data_dir, "events")
    if work == "rollups":
        files += _partition_files(data_dir, ROLLUP)
    with Store.open(data_dir) as store:
        rows = store.manifest.segments(states=tuple(SegmentState))
    known = {store.data_dir / r.path for r in rows}
    unrecorded = [p for p in files if segment_start(p.name) is not None and p not in known]
    return {
        "temp_files": sum(1 for p in files if TEMP_MARKER in p.name),
        "unrecorded_files": len(unrecorded),
        "deleting_rows_without_file": sum(
            1
            for r in rows
            if r.state == SegmentState.DELETING and not (store.data_dir / r.path).exists()
        ),
    }


@pytest.mark.parametrize("work", ["consolidation", "retention", "rollups"])
def test_kill_9_during_background_work(tmp_path: Path, reliability: Recorder, work: str) -> None:
    """serve killed while it consolidates, retires and deletes, or seals roll-ups, under a
    producer; then run until the interrupted work is done."""
    rng = _rng({"consolidation": 13, "retention": 17, "rollups": 19}[work])
    port = free_port()
    data_dir = tmp_path / "data"
    config = _kafka_api_config(
        tmp_path / "plateau.yaml",
        port,
        [_background_topic(work)],
        consolidate_interval="200ms",
        retention_interval="200ms",
        deletion_grace="300ms",
    )
    kills = scale(4, 12)
    points: list[dict[str, int]] = []
    rollup_dir = data_dir / "topics" / ROLLUP
    process = _serve(config, port)
    producing = Producing(port, "events")
    try:
        for round_ in range(kills):
            if round_ % 2 == 0 and work == "consolidation":
                _wait_for(lambda: _consolidation_temp(data_dir), process, timeout_s=5)
            elif round_ % 2 == 0 and work == "retention":
                _wait_for(lambda: bool(_deleting(data_dir)), process, timeout_s=5)
                time.sleep(rng.uniform(0.25, 0.35))  # about when the grace ends
            elif round_ % 2 == 0:
                _wait_for(
                    lambda: any(TEMP_MARKER in p.name for p in rollup_dir.glob("*/*")),
                    process,
                    timeout_s=5,
                )
            else:
                time.sleep(rng.uniform(0.5, 2.0))
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            points.append(_kill_point(data_dir, work))
            process = _serve(config, port)
            time.sleep(rng.uniform(0.5, 1.5))
    finally:
        producing.stop()
        _stop(process)
    started = time.monotonic()
    process = _serve(config, port)
    try:
        deadline = time.monotonic() + 90
        while (left := _work_left(data_dir, work)) is not None:
            assert time.monotonic() < deadline, f"the {work} left by the kills: {left}"
            time.sleep(0.2)
        recover_s = time.monotonic() - started
    finally:
        _stop(process)
    _verify(config)
    with Store.open(data_dir) as store:
        places = stored_places(store, "events")
        retired: set[bytes] = set()
        if work == "retention":
            starts = {s.partition: s.start_offset for s in store.spans("events")}
            retired = {
                key for key, (p, offset) in producing.acked.items() if offset < starts.get(p, 0)
            }
        rows = store.manifest.segments("events")
        rolled = _rolled_counts(store) if work == "rollups" else {}
    result = produced_audit(producing.acked, places, producing.sent, retired)
    totals = {key: sum(p[key] for p in points) for key in points[0]}
    scenario = {
        "consolidation": "kill -9 during consolidation",
        "retention": "kill -9 during retention's deletions",
        "rollups": "kill -9 during roll-up seals",
    }[work]
    action = {
        "consolidation": "segments sealed every 100 ms merged into 256 KiB ones every 200 ms",
        "retention": "12 segments kept per partition, retired ones deleted after a 300 ms grace",
        "rollups": "a 1 s roll-up (count by host) sealed with every raw segment",
    }[work]
    reliability.record(
        scenario,
        f"serve killed with SIGKILL {kills} times while an idempotent acks=all producer writes "
        f"to its Kafka API (3 partitions); {action}; half the kills timed to that work",
        result,
        recover_s=recover_s,
        kills=kills,
        segments=len(rows),
        retired_records=len(retired),
        **{f"kills_with_{key}": sum(1 for p in points if p[key]) for key in totals},
    )
    assert result.exact, result
    if work == "rollups":
        raw = {p: sum(1 for key, found in places.items() if found[0][0] == p) for p in range(3)}
        assert rolled == raw, f"roll-up counts {rolled}, raw records {raw}"
    if work == "retention":
        assert retired, "retention retired nothing: the scenario tested nothing"


def _rolled_counts(store: Store) -> dict[int, int]:
    """Records each partition's roll-up counts, which must equal its raw records."""
    counts: dict[int, int] = {}
    for partition in range(3):
        table = store.read(ROLLUP, partitions=[partition], columns=["count"]).to_table()
        counts[partition] = sum(table.column("count").to_pylist())
    return counts


def test_kill_9_during_journal_replay(tmp_path: Path, reliability: Recorder) -> None:
    """serve killed while it replays a large journal at start (each replay sealing part of
    it before the kill), again and again; the start that is let finish stores every
    acknowledged record once."""
    rng = _rng(23)
    port = free_port()
    data_dir = tmp_path / "data"
    topic = {"name": "events", "partitions": 3, "format": "json", "roll": {"max_age": "1h"}}
    config = _kafka_api_config(tmp_path / "plateau.yaml", port, [topic])
    process = _serve(config, port)
    producing = Producing(port, "events")
    try:
        deadline = time.monotonic() + 120
        while len(producing.acked) < scale(60_000, 200_000):
            assert time.monotonic() < deadline, "too little was acknowledged within 120 s"
            assert process.poll() is None, process.communicate()[1][-3000:]
            time.sleep(0.05)
    finally:
        producing.stop()
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    journal = sum(p.stat().st_size for p in (data_dir / "journal").iterdir())
    # Replays seal as they go: a kill lands between seals of the journal's records.
    topic["roll"] = {"max_age": "1h", "max_rows": 300}
    _kafka_api_config(config, port, [topic])
    kills = scale(3, 8)
    sealed_by_kill: list[int] = []
    for _ in range(kills):
        before = _sealed_rows(data_dir)
        process = _command("serve", "--config", str(config))
        _wait_for(partial(_replaying, data_dir, before, port), process, timeout_s=60)
        time.sleep(rng.uniform(0.0, 0.2))
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        sealed_by_kill.append(_sealed_rows(data_dir) - before)
    started = time.monotonic()
    process = _serve(config, port)
    recover_s = time.monotonic() - started
    _stop(process)
    _verify(config)
    with Store.open(data_dir) as store:
        result = produced_audit(producing.acked, stored_places(store, "events"), producing.sent)
    reliability.record(
        "kill -9 during journal replay",
        f"serve killed with SIGKILL {kills} times while replaying a {journal / 2**20:.0f} MiB "
        "journal of acknowledged, unsealed records at start (sealing every 300 records)",
        result,
        recover_s=recover_s,
        kills=kills,
        journal_bytes=journal,
        records_sealed_by_each_killed_replay=sealed_by_kill,
    )
    assert result.exact, result
    assert not list((data_dir / "journal").glob("*.journal")), "journal files left behind"


def _replaying(data_dir: Path, before: int, port: int) -> bool:
    """The replay sealed some of the journal, or it is over (serve listens)."""
    if _sealed_rows(data_dir) > before:
        return True
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _sealed_rows(data_dir: Path) -> int:
    if not (data_dir / "manifest.db").exists():
        return 0
    with Store.open(data_dir) as store:
        return sum(s.record_count for s in store.manifest.segments("events"))

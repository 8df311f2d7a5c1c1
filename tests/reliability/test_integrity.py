"""Damaged storage under the real `plateau serve`: corrupted, truncated and deleted segment
files are found, quarantined and never served; a lost or corrupted manifest is refused and
rebuilt from the segment files, and ingestion resumes exactly once."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.demo.producer import Record, produce
from plateau_core import SegmentState, Store
from plateau_core.manifest import SegmentRecord
from tests.bridge_support import (
    end_offsets,
    plateau_command,
    serve_process,
    serve_until_landed,
    wait_landed,
    write_config_file,
)
from tests.reliability.support import Recorder, every_offset, scale

PARTITIONS = 3


def _produce(kafka: str, topic: str, first: int, count: int) -> int:
    records = (
        Record(value=f"r{i}".encode(), partition=i % PARTITIONS)
        for i in range(first, first + count)
    )
    return produce(kafka, topic, records)


def _land(config: Path, data_dir: Path, kafka: str, topic: str, total: int) -> int:
    """Produce `total` records in rounds while serve runs, so each partition gets several
    segments; stop serve once all landed. Returns how many were produced."""
    process = serve_process(config)
    produced = 0
    rounds = 4
    try:
        for r in range(rounds):
            produced += _produce(kafka, topic, r * total // rounds, total // rounds)
            wait_landed(data_dir, topic, end_offsets(kafka, topic), timeout_s=120)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr[-3000:]
    return produced


def _events(stderr: str, name: str) -> list[dict[str, Any]]:
    found = []
    for line in stderr.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == name:
            found.append(event)
    return found


def _flip_bytes(path: Path, row: SegmentRecord) -> None:
    assert row.checksums is not None
    position, length, _ = row.checksums.batches[0]
    raw = bytearray(path.read_bytes())
    for i in range(position + length // 3, position + length // 3 + 16):
        raw[i] ^= 0x5A
    path.write_bytes(bytes(raw))


def test_corrupt_truncated_and_deleted_segments_are_quarantined_never_served(
    kafka: str, topic_factory: Callable[..., str], tmp_path: Path, reliability: Recorder
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    config = tmp_path / "plateau.yaml"
    data_dir = tmp_path / "data"
    write_config_file(config, kafka, topic, f"g-{topic}")
    first = scale(30_000, 300_000)
    produced = _land(config, data_dir, kafka, topic, first)

    with Store.open(data_dir) as store:
        by_partition = {
            p: store.manifest.segments(topic, partitions=[p]) for p in range(PARTITIONS)
        }
    assert all(len(rows) >= 2 for rows in by_partition.values()), by_partition
    flipped, truncated, deleted = by_partition[0][1], by_partition[1][0], by_partition[2][-1]
    _flip_bytes(data_dir / flipped.path, flipped)
    path = data_dir / truncated.path
    path.write_bytes(path.read_bytes()[: truncated.size_bytes * 2 // 3])
    (data_dir / deleted.path).unlink()
    victims = {flipped.path, truncated.path, deleted.path}

    verified = plateau_command("verify", "--config", str(config))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    for victim in victims:
        assert victim in verified.stdout, verified.stdout
    as_json = plateau_command("verify", "--config", str(config), "--json")
    assert as_json.returncode == 1
    assert {p["path"] for p in json.loads(as_json.stdout)["problems"]} == victims

    # More records while serve is down: the restart has to land them around the damage.
    produced += _produce(kafka, topic, first, first // 3)
    ends = end_offsets(kafka, topic)
    recover_s, stderr = serve_until_landed(config, data_dir, topic, ends)
    logged = {e["path"]: e for e in _events(stderr, "segment_quarantined")}
    assert set(logged) == victims, stderr[-3000:]
    for row in (flipped, truncated, deleted):
        event = logged[row.path]
        assert (event["topic"], event["partition"]) == (topic, row.partition)
        assert (event["start_offset"], event["end_offset"]) == (row.start_offset, row.end_offset)
    assert "checksum mismatch" in logged[flipped.path]["problem"]
    assert "size is" in logged[truncated.path]["problem"]
    assert "missing" in logged[deleted.path]["problem"]

    with Store.open(data_dir) as store:
        quarantined = store.manifest.segments(topic, states=(SegmentState.QUARANTINED,))
    assert {q.path for q in quarantined} == victims
    excluded = {
        (row.partition, o) for row in quarantined for o in range(row.start_offset, row.end_offset)
    }
    expected = {
        p: [o for o in offsets if (p, o) not in excluded]
        for p, offsets in every_offset(ends).items()
    }
    after = plateau_command("verify", "--config", str(config))
    assert after.returncode == 1  # the quarantined segments stay listed until dealt with
    assert after.stdout.count("QUARANTINED") == 3
    reliability.check(
        "Corrupt segment files",
        "serve stopped; one segment's bytes flipped, one truncated, one deleted; "
        "`plateau verify` run, more produced, serve restarted",
        data_dir,
        topic,
        expected,
        produced=produced,
        recover_s=recover_s,
        outcome="damaged segments quarantined, the rest exactly once",
        excluded=len(excluded),
        quarantined=len(quarantined),
    )


@pytest.mark.parametrize("loss", ["deleted", "corrupted"])
def test_lost_manifest_is_refused_then_rebuilt_and_ingestion_resumes(
    kafka: str,
    topic_factory: Callable[..., str],
    tmp_path: Path,
    reliability: Recorder,
    loss: str,
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    config = tmp_path / "plateau.yaml"
    data_dir = tmp_path / "data"
    write_config_file(config, kafka, topic, f"g-{topic}")
    first = scale(30_000, 300_000)
    produced = _land(config, data_dir, kafka, topic, first)
    segments = sorted(p.name for p in data_dir.glob("topics/*/*/*.arrow"))
    assert segments

    manifest = data_dir / "manifest.db"
    if loss == "deleted":
        for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
            (data_dir / name).unlink(missing_ok=True)
    else:
        raw = bytearray(manifest.read_bytes())
        raw[:100] = b"\xa5" * 100
        manifest.write_bytes(bytes(raw))

    refused = serve_process(config)
    _, stderr = refused.communicate(timeout=60)
    assert refused.returncode == 2, stderr[-3000:]
    assert "plateau rebuild-manifest" in stderr
    assert str(data_dir) in stderr
    assert sorted(p.name for p in data_dir.glob("topics/*/*/*.arrow")) == segments

    without_yes = plateau_command("rebuild-manifest", "--config", str(config))
    assert without_yes.returncode == 2
    rebuilt = plateau_command("rebuild-manifest", "--config", str(config), "--yes")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert f"{len(segments)} segments recorded" in rebuilt.stdout
    clean = plateau_command("verify", "--config", str(config))
    assert clean.returncode == 0, clean.stdout

    produced += _produce(kafka, topic, first, first // 3)
    ends = end_offsets(kafka, topic)
    recover_s, stderr = serve_until_landed(config, data_dir, topic, ends)
    reliability.check(
        f"Manifest {loss}",
        f"serve stopped; manifest.db {loss}; serve refused to start; "
        "`plateau rebuild-manifest --yes`; more produced; serve restarted",
        data_dir,
        topic,
        every_offset(ends),
        produced=produced,
        recover_s=recover_s,
        segments_rebuilt=len(segments),
    )

"""Promoted column statistics: recorded with the segment, restored by a rebuild, used by
`Store.read(..., where=...)` to leave segments unopened."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import text

from plateau_core import InvalidInputError, Store
from plateau_core.column_stats import ColumnStats, table_columns
from plateau_core.manifest.migrations import LATEST
from plateau_core.manifest.records import PartitionCommit, SegmentFile
from plateau_core.names import relative_segment_path
from plateau_core.policies import IndexPolicy
from plateau_core.rebuild import rebuild_manifest
from plateau_core.segment_file import write_segment

TS = pa.timestamp("ms", tz="UTC")
BASE_MS = 1_700_000_000_000


def _batch(start: int, services: list[str | None], statuses: list[int]) -> pa.RecordBatch:
    n = len(services)
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(range(start, start + n), pa.int64()),
            "timestamp": pa.array([BASE_MS + start + i for i in range(n)], TS),
            "key": pa.array([f"k{start + i}".encode() for i in range(n)], pa.binary()),
            "service": pa.array(services, pa.string()),
            "status": pa.array(statuses, pa.int32()),
            "latency": pa.array([0.5 * i for i in range(n)], pa.float64()),
            "ok": pa.array([s < 500 for s in statuses], pa.bool_()),
            "value": pa.array([b"raw"] * n, pa.binary()),
        }
    )


def _seal(store: Store, batches: list[pa.RecordBatch], topic: str = "logs") -> None:
    for batch in batches:
        table = pa.Table.from_batches([batch])
        directory = store.data_dir / "topics" / topic / "0"
        _path, stats = write_segment(directory, table, fsync=False)
        relative = relative_segment_path(topic, 0, stats.start_offset)
        store.manifest.commit_segment(topic, 0, stats, relative, table.schema)


def _by_segment(store: Store, columns: list[str]) -> dict[int, dict[str, ColumnStats]]:
    stats = store.manifest.column_stats("logs", columns)
    starts = {s.id: s.start_offset for s in store.manifest.segments("logs")}
    return {starts[i]: cols for i, cols in stats.items()}  # keyed by start offset


def test_seal_records_min_max_and_nulls_of_decoded_columns_and_key(store: Store) -> None:
    _seal(store, [_batch(0, ["web", None, "api"], [200, 503, 404])])
    [(start, columns)] = _by_segment(store, ["service", "status", "latency", "ok", "key"]).items()
    assert start == 0
    assert columns["service"] == ColumnStats("service", "string", 1, "api", "web")
    assert columns["status"] == ColumnStats("status", "int", 0, "200", "503")
    assert columns["latency"] == ColumnStats("latency", "float", 0, "0.0", "1.0")
    assert columns["ok"] == ColumnStats("ok", "bool", 0, "false", "true")
    assert columns["key"] == ColumnStats("key", "binary", 0, b"k0".hex(), b"k2".hex())
    # The segment row's own spans and the payload are not promoted.
    assert set(store.manifest.column_stats("logs", ["offset", "timestamp", "value"])) == set()


def test_long_strings_keep_a_prefix_as_minimum_and_no_maximum() -> None:
    long = "x" * 100
    table = pa.Table.from_batches([_batch(0, [long, long + "y"], [1, 2])])
    [service] = [c for c in table_columns(table) if c.column == "service"]
    assert service.min_value == "x" * 64
    assert service.max_value is None


def test_all_null_column_has_no_bounds_and_rules_every_value_out(store: Store) -> None:
    _seal(store, [_batch(0, [None, None], [1, 2]), _batch(2, ["a", "b"], [1, 2])])
    result = store.read("logs", where={"service": "a"})
    assert result.to_table().column("offset").to_pylist() == [2]
    assert result.pruned == 1
    assert result.opened == ["topics/logs/0/00000000000000000002.arrow"]


def test_replayed_commit_leaves_statistics_unchanged(store: Store) -> None:
    batch = _batch(0, ["a", "b"], [1, 2])
    table = pa.Table.from_batches([batch])
    _path, stats = write_segment(store.data_dir / "topics" / "logs" / "0", table, fsync=False)
    relative = relative_segment_path("logs", 0, 0)
    assert store.manifest.commit_segment("logs", 0, stats, relative, table.schema)
    before = store.manifest.column_stats("logs", ["service", "status", "key"])
    assert not store.manifest.commit_segment("logs", 0, stats, relative, table.schema)
    assert not store.manifest.commit_seal(
        [PartitionCommit("logs", 0, (SegmentFile(stats, relative, table.schema),))]
    )[0]
    assert store.manifest.column_stats("logs", ["service", "status", "key"]) == before
    with store.manifest.engine.connect() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM segment_columns")).scalar_one() == 5
        )  # key, service, status, latency, ok


def test_rebuild_restores_the_statistics_from_the_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        _seal(store, [_batch(0, ["a", "b"], [200, 500]), _batch(2, ["c", None], [404, 201])])
        before = _by_segment(store, ["service", "status", "latency", "ok", "key"])
    for name in ("manifest.db", "manifest.db-wal", "manifest.db-shm"):
        (data / name).unlink(missing_ok=True)
    rebuild_manifest(data)
    with Store.open(data) as store:
        assert _by_segment(store, ["service", "status", "latency", "ok", "key"]) == before
        assert len(before) == 2


def test_removed_segments_take_their_statistics_along(store: Store) -> None:
    _seal(store, [_batch(0, ["a"], [1]), _batch(1, ["b"], [2])])
    first = store.manifest.segments("logs")[0]
    store.manifest.mark_deleting([first.id])
    assert store.manifest.remove([first.id]) == 1
    assert set(_by_segment(store, ["service"])) == {1}
    with store.manifest.engine.connect() as conn:
        ids = conn.execute(text("SELECT DISTINCT segment_id FROM segment_columns")).scalars()
        assert first.id not in list(ids)


def test_where_prunes_by_bounds_and_returns_exactly_the_matches(store: Store) -> None:
    _seal(
        store,
        [
            _batch(0, ["api", "api"], [200, 201]),
            _batch(2, ["db", "db"], [500, 503]),
            _batch(4, ["web", "api"], [200, 404]),
        ],
    )
    result = store.read("logs", where={"status": [500, 404]}, columns=["offset", "service"])
    assert result.to_table().to_pydict() == {"offset": [2, 5], "service": ["db", "api"]}
    assert result.pruned == 1  # [200, 201] holds neither
    by_service = store.read("logs", where={"service": "db", "status": 503})
    assert by_service.to_table().column("offset").to_pylist() == [3]
    assert by_service.opened == ["topics/logs/0/00000000000000000002.arrow"]
    keyed = store.read("logs", where={"key": [b"k4", "k1"]})  # str compares as UTF-8 bytes
    assert keyed.to_table().column("offset").to_pylist() == [1, 4]
    assert store.read("logs", where={"missing": "x"}).to_table().num_rows == 0


def test_a_fraction_rules_out_segments_holding_the_column_as_integers(store: Store) -> None:
    # The column widened: int32 in the first segment, double in the second (a json field
    # that was whole at first). No integer equals 0.5; 201.0 is the integer 201.
    _seal(store, [_batch(0, ["api", "api"], [200, 201])])
    widened = _batch(2, ["db", "db"], [0, 0]).set_column(
        4, "status", pa.array([0.5, 503.0], pa.float64())
    )
    _seal(store, [widened])
    fraction = store.read("logs", where={"status": 0.5}, columns=["offset"])
    assert fraction.to_table().column("offset").to_pylist() == [2]
    assert fraction.opened == ["topics/logs/0/00000000000000000002.arrow"]
    whole = store.read("logs", where={"status": [201.0, 503]}, columns=["offset"])
    assert whole.to_table().column("offset").to_pylist() == [1, 3]
    assert store.read("logs", where={"status": [float("nan"), 0.25]}).to_table().num_rows == 0


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"offset": 1}, "start_offset/end_offset"),
        ({"service": []}, "empty list"),
        ({"service": {"a": 1}}, "a value or a list"),
        ({"service": [object()]}, "strings, bytes or numbers"),
        ({"status": "not a number"}, "'status'"),
        ({"service": ["api", "\udcff"]}, "'service': '\\\\udcff' is not valid Unicode"),
    ],
)
def test_bad_where_names_the_column(store: Store, where: dict[str, object], message: str) -> None:
    _seal(store, [_batch(0, ["a"], [1])])
    with pytest.raises(InvalidInputError, match=message):
        store.read("logs", where=where).to_table()


def test_segments_recorded_before_the_migration_are_read_unpruned(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Store.open(data) as store:
        _seal(store, [_batch(0, ["a"], [1])])
        with store.manifest.engine.begin() as conn:
            # Back to a manifest of schema version 4.
            conn.execute(text("DROP TABLE segment_columns"))
            conn.execute(text("DELETE FROM schema_version WHERE version >= 5"))
    with Store.open(data) as store:
        assert store.manifest.schema_version == LATEST
        _seal(store, [_batch(1, ["b"], [2])])
        old = store.read("logs", where={"service": ["a", "b"]})
        assert old.to_table().column("offset").to_pylist() == [0, 1]
        assert old.pruned == 0
        assert store.read("logs", where={"service": "a"}).pruned == 1  # the new segment only


def test_a_segment_whose_keys_are_all_of_the_null_type_matches_nothing(store: Store) -> None:
    nulls = _batch(0, ["a", "b"], [1, 2]).set_column(2, "key", pa.nulls(2))
    _seal(store, [nulls, _batch(2, ["c"], [3])])
    result = store.read("logs", where={"key": [b"k0", b"k2"]})
    assert result.to_table().column("offset").to_pylist() == [2]


def test_nul_characters_in_values_and_column_names_seal_and_are_found(store: Store) -> None:
    """JSON lets a string or a field name hold U+0000, which PostgreSQL text cannot: the
    seal failed on it and was retried forever. What precedes it is still a lower bound."""
    nul = _batch(0, ["a\x00z", "web"], [200, 200]).append_column("x\x00y", pa.array([1, 2]))
    _seal(store, [nul, _batch(2, ["b", "c\x00"], [200, 200])])
    service = _by_segment(store, ["service"])
    assert service[0]["service"] == ColumnStats("service", "string", 0, "a", "web")
    assert service[2]["service"] == ColumnStats("service", "string", 0, "b", None)
    assert _by_segment(store, ["x\x00y"]) == {}
    for value, offsets in (("a\x00z", [0]), ("c\x00", [3]), ("a", []), ("b", [2]), ("c", [])):
        found = store.read("logs", where={"service": value}).to_table()
        assert found.column("offset").to_pylist() == offsets, value
    assert store.read("logs", where={"x\x00y": 2}).to_table().column("offset").to_pylist() == [1]


def test_a_column_name_longer_than_the_manifest_keeps_seals_and_is_found(store: Store) -> None:
    """A JSON field name may be any length; the manifest's column names hold 255 characters
    (PostgreSQL enforces it): the seal failed on a longer one and was retried forever. Such a
    column has no statistics or filter in the manifest, and is read unpruned."""
    long = "f" * 300
    wide = _batch(0, ["a", "b"], [1, 2]).append_column(long, pa.array([1, 2]))
    table = pa.Table.from_batches([wide])
    directory = store.data_dir / "topics" / "logs" / "0"
    index = IndexPolicy(bloom=(long, "service"))
    _path, stats = write_segment(directory, table, fsync=False, index=index)
    relative = relative_segment_path("logs", 0, stats.start_offset)
    assert store.manifest.commit_segment("logs", 0, stats, relative, table.schema)
    assert _by_segment(store, [long]) == {}
    assert set(_by_segment(store, ["service"])[0]) == {"service"}
    assert store.manifest.blooms("logs", [long]) == {}
    assert store.read("logs", where={long: 2}).to_table().column("offset").to_pylist() == [1]

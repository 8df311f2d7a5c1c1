"""The Iceberg target's settings, catalog choice and column mapping, and the errors that
name what is wrong."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from bridge.config import load_config
from bridge.errors import ConfigError
from plateau_core.errors import InvalidInputError
from plateau_core.manifest.urls import shown_url
from plateau_spark.replication import (
    IcebergSettings,
    S3Settings,
    SchemaConflictError,
    Target,
    TargetError,
)
from plateau_spark.replication.iceberg_catalog import catalog_properties, open_catalog
from plateau_spark.replication.iceberg_schema import (
    Evolution,
    check_evolution,
    in_table_types,
    table_schema,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plateau.yaml"
    path.write_text("storage:\n  data_dir: data\ntopics:\n  - source: s\n" + text)
    return path


def test_config_iceberg_section_loads_and_refuses_bad_values(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "replication:\n  target: wh\n  format: iceberg\n  iceberg:\n"
            "    namespace: lake.raw\n    small_file_size: 8MiB\n    snapshot_retention: 2d\n",
        )
    )
    iceberg = config.replication.iceberg
    assert config.replication.format == "iceberg"
    assert (iceberg.namespace, iceberg.small_file_size) == ("lake.raw", 8 * 2**20)
    assert iceberg.snapshot_retention == 2 * 86_400
    with pytest.raises(ConfigError, match=r"replication\.format"):
        load_config(write(tmp_path, "replication:\n  format: delta\n"))
    with pytest.raises(ConfigError, match=r"replication\.iceberg\.namespace"):
        load_config(write(tmp_path, "replication:\n  iceberg:\n    namespace: 'a..b'\n"))
    with pytest.raises(ConfigError, match=r"replication\.iceberg\.catalog"):
        load_config(write(tmp_path, "replication:\n  iceberg:\n    catalog: x\n"))


def test_catalog_chosen_by_uri(tmp_path: Path) -> None:
    local = Target.parse(str(tmp_path / "wh"))
    default = catalog_properties(IcebergSettings(), local, tmp_path / "data")
    assert default["type"] == "sql"
    assert default["uri"] == f"sqlite:///{tmp_path / 'data' / 'iceberg_catalog.db'}"
    assert default["warehouse"] == f"file://{tmp_path / 'wh'}"
    postgres = IcebergSettings(catalog_uri="postgresql+psycopg2://u@db/iceberg")
    assert catalog_properties(postgres, local, tmp_path)["type"] == "sql"
    rest = IcebergSettings(catalog_uri="http://127.0.0.1:8181/api")
    assert catalog_properties(rest, local, tmp_path) == {
        "type": "rest",
        "uri": "http://127.0.0.1:8181/api",
        "warehouse": f"file://{tmp_path / 'wh'}",
    }
    s3 = Target.parse(
        "s3://bucket/lake",
        S3Settings(endpoint_url="http://127.0.0.1:9000", access_key_id="k", secret_access_key="s"),
    )
    on_s3 = catalog_properties(IcebergSettings(), s3, tmp_path)
    assert on_s3["warehouse"] == "s3://bucket/lake"
    assert on_s3["s3.endpoint"] == "http://127.0.0.1:9000"
    assert on_s3["s3.secret-access-key"] == "s"
    with pytest.raises(InvalidInputError, match="catalog_uri 'thrift://hive:9083'"):
        catalog_properties(IcebergSettings(catalog_uri="thrift://hive:9083"), local, tmp_path)
    assert IcebergSettings(namespace="lake.raw").identifier("a.b") == ("lake", "raw", "a.b")


def test_columns_mapped_to_iceberg_types() -> None:
    merged = pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
            pa.field("small", pa.int8()),
            pa.field("count", pa.uint32()),
            pa.field("text", pa.large_string()),
            pa.field("unknown", pa.null()),
            pa.field("tags", pa.list_(pa.int16())),
        ]
    )
    schema = table_schema(merged, "t")
    assert schema.names == ["partition", "offset", "timestamp", "small", "count", "text", "tags"]
    assert schema.field("partition").type == pa.int32()
    assert not schema.field("partition").nullable and not schema.field("offset").nullable
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("count").type == pa.int64() and schema.field("text").type == pa.string()
    assert schema.field("tags").type == pa.list_(pa.int32())
    with pytest.raises(SchemaConflictError, match="topic 't': field 'id' is uint64"):
        table_schema(pa.schema([pa.field("id", pa.uint64())]), "t")


def test_evolution_adds_widens_and_refuses_naming_the_field() -> None:
    current = pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string())])
    wanted = pa.schema(
        [pa.field("a", pa.int64()), pa.field("b", pa.string()), pa.field("c", pa.float64())]
    )
    assert check_evolution(current, wanted, "t") == Evolution(added=["a", "c"])
    assert check_evolution(current, current, "t") == Evolution()
    with pytest.raises(SchemaConflictError, match="field 'b' is int64 in the store but string"):
        check_evolution(current, pa.schema([pa.field("b", pa.int64())]), "t")


def test_evolution_replaces_what_the_store_widens_and_iceberg_cannot_promote() -> None:
    """long to double, a naive timestamp put in UTC, a struct child made a double: the
    store's readers widen them, Iceberg has no promotion for them, so the columns are
    replaced. A column the table holds wider than the store (another store widened it) is
    kept, and this store's files are written in the table's type."""
    current = pa.schema(
        [
            pa.field("n", pa.int64()),
            pa.field("at", pa.timestamp("us")),
            pa.field("o", pa.struct([pa.field("ms", pa.int64())])),
            pa.field("wide", pa.float64()),
        ]
    )
    wanted = pa.schema(
        [
            pa.field("n", pa.float64()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("o", pa.struct([pa.field("ms", pa.float64())])),
            pa.field("wide", pa.int64()),
        ]
    )
    evolution = check_evolution(current, wanted, "t")
    assert evolution.added == []
    assert evolution.replaced == {
        "n": pa.float64(),
        "at": pa.timestamp("us", tz="UTC"),
        "o": pa.struct([pa.field("ms", pa.float64())]),
    }
    assert in_table_types(wanted, current, "t").field("wide").type == pa.float64()
    assert in_table_types(wanted, current, "t").field("n").type == pa.float64()
    # The fixed columns are never replaced: a change to them stays refused.
    with pytest.raises(SchemaConflictError, match="field 'offset'"):
        check_evolution(
            pa.schema([pa.field("offset", pa.int32())]),
            pa.schema([pa.field("offset", pa.float64())]),
            "t",
        )


def test_an_unreachable_catalog_is_named_without_its_password(tmp_path: Path) -> None:
    local = Target.parse(str(tmp_path / "wh"))
    missing = IcebergSettings(catalog_uri=f"sqlite:///{tmp_path / 'no' / 'such' / 'cat.db'}")
    with pytest.raises(TargetError, match=r"cannot open the Iceberg catalog sqlite:///.*cat\.db"):
        open_catalog(missing, local, tmp_path)
    assert (
        shown_url("postgresql+psycopg2://plateau:hunter2@127.0.0.1/iceberg")
        == "postgresql+psycopg2://plateau:***@127.0.0.1/iceberg"
    )


def test_a_catalog_uri_of_another_scheme_is_refused_without_its_password(tmp_path: Path) -> None:
    local = Target.parse(str(tmp_path / "wh"))
    odd = IcebergSettings(catalog_uri="mysql://plateau:hunter2@db/iceberg")
    with pytest.raises(InvalidInputError) as refused:
        catalog_properties(odd, local, tmp_path)
    assert "mysql://plateau:***@db/iceberg" in str(refused.value)
    assert "hunter2" not in str(refused.value)

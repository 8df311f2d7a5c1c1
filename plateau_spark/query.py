"""`plateau query`: SQL over every plateau topic (each a temp view), printed or written."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import structlog
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from plateau_spark.errors import QueryError, SparkJobError
from plateau_spark.jobs import StoreLocation, spark_message, topic_frame

Format = Literal["table", "json", "csv", "parquet"]
FORMATS: tuple[Format, ...] = ("table", "json", "csv", "parquet")
log = structlog.get_logger("plateau.query")


def run_query(
    spark: SparkSession,
    location: StoreLocation,
    sql: str,
    *,
    fmt: Format = "table",
    output: Path | None = None,
    limit: int = 20,
) -> int:
    """Run `sql` with every topic of the store as a view; returns the number of rows
    written (table: rows shown). Raises QueryError with Spark's message when it refuses."""
    if fmt == "parquet" and output is None:
        raise SparkJobError("--format parquet needs --output PATH")
    with location.open() as store:
        topics = store.topics()
    for topic in topics:
        # Backticks: topic names may hold '-' and '.', which a bare view name cannot.
        topic_frame(spark, location, topic).createOrReplaceTempView(f"`{topic}`")
    try:
        frame = spark.sql(sql)
        if fmt == "table":
            return _show(frame, limit, output)
        table = frame.toArrow()
    except PySparkException as exc:
        raise QueryError(spark_message(exc)) from None
    if fmt == "parquet":
        assert output is not None
        with _owner_only(output, "wb") as binary:
            pq.write_table(table, binary)
    else:
        with _opened(output) as handle:
            (_write_json if fmt == "json" else _write_csv)(table, handle)
    log.info("query_finished", rows=table.num_rows, format=fmt, output=str(output or "-"))
    return int(table.num_rows)


def _show(frame: DataFrame, limit: int, output: Path | None) -> int:
    rows = frame.limit(limit + 1).toArrow()
    text = render_table(rows.slice(0, limit))
    if rows.num_rows > limit:
        text += f"\n(first {limit} rows; --limit N shows more, --format csv|json all of them)"
    with _opened(output) as handle:
        handle.write(text + "\n")
    return min(int(rows.num_rows), limit)


def render_table(table: pa.Table) -> str:
    """An aligned text table; binary values print as text when they are UTF-8."""
    header = table.column_names
    body = [[_cell(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, _row(header, widths), line, *(_row(r, widths) for r in body), line]
    out.append(f"{len(body)} row{'s' if len(body) != 1 else ''}")
    return "\n".join(out)


def _row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return "0x" + value.hex()
    return str(_jsonable(value))


def _jsonable(value: Any) -> Any:
    """JSON form of a value: binary as base64, times as ISO 8601, decimals exact, and NaN
    and the infinities as the strings Spark's own JSON writer gives them (JSON has no
    literal for them: a bare NaN is not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _write_json(table: pa.Table, handle: IO[str]) -> None:
    for batch in table.to_batches():
        for row in batch.to_pylist():
            handle.write(json.dumps(_jsonable(row), ensure_ascii=False, allow_nan=False) + "\n")


def _write_csv(table: pa.Table, handle: IO[str]) -> None:
    writer = csv.writer(handle)
    writer.writerow(table.column_names)
    for batch in table.to_batches():
        for row in batch.to_pylist():
            writer.writerow(_csv_cell(v) for v in row.values())


def _csv_cell(value: Any) -> Any:
    """Empty for null, nested values as JSON, the rest as `_jsonable` gives them."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(_jsonable(value))
    return _jsonable(value)


@contextmanager
def _opened(output: Path | None) -> Iterator[IO[str]]:
    """stdout, or the output file (owner-readable only: results hold topic data)."""
    if output is None:
        yield sys.stdout
        return
    with _owner_only(output, "w") as handle:
        yield handle


def _owner_only(path: Path, mode: str) -> IO[Any]:
    """Open for writing, created owner-readable only (the umask may allow more)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, newline="", encoding="utf-8")

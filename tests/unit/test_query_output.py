"""`plateau query`'s json and csv output, written from an Arrow table as the query gives it."""

from __future__ import annotations

import io
import json
import math

import pyarrow as pa

from plateau_spark.query import _write_csv, _write_json


def test_json_output_is_json_for_nan_and_the_infinities() -> None:
    table = pa.table(
        {
            "x": pa.array([1.5, math.nan, math.inf, -math.inf, None], pa.float64()),
            "nested": pa.array([[math.nan], [], None, [1.0], [-math.inf]], pa.list_(pa.float32())),
        }
    )
    out = io.StringIO()
    _write_json(table, out)

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    rows = [json.loads(line, parse_constant=refuse) for line in out.getvalue().splitlines()]
    assert [r["x"] for r in rows] == [1.5, "NaN", "Infinity", "-Infinity", None]
    assert [r["nested"] for r in rows] == [["NaN"], [], None, [1.0], ["-Infinity"]]


def test_csv_output_spells_nan_and_the_infinities_as_json_does() -> None:
    out = io.StringIO()
    _write_csv(pa.table({"x": pa.array([math.nan, -math.inf, 2.0])}), out)
    assert out.getvalue().splitlines() == ["x", "NaN", "-Infinity", "2.0"]

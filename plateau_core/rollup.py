"""Roll-ups: per-segment aggregates of a topic by time bucket and dimensions, sealed into a
derived topic `{topic}.rollup.{label}` in the same manifest transaction as the raw segment.

Each raw segment yields one roll-up segment whose rows are the segment's groups: `offset` is
the raw segment's first offset (every row shares it), `timestamp` the bucket's start, then
the dimensions and the metrics. A bucket spanning several raw segments has one row per
segment: a query re-aggregates (sum the counts and sums, min of mins, max of maxes, merge the
distinct sketches), which is what makes the roll-up exact for count/sum/min/max and
mergeable for distinct counts.

Distinct counts are k-minimum-values sketches (plateau_core.sketches).

Sums of integers are exact or widened, never wrapped: a sum that would pass its type (int64
for signed columns, uint64 for unsigned ones) is held as decimal(38, 0), in that roll-up
segment's column or that query's answer only, which the readers merge with int64 columns
(plateau_core.schema_merge). A seal never fails for it: that would stall the partition.
Sums of decimals take Arrow's widest decimal (38 digits at the column's scale), where a sum
past it wrapped round silently: it is summed in 76 digits, and held as a double, logged, in
that segment's column or that query's answer, when it passes 38. Those 38 digits are the sum
type's, not whole digits the values take: the readers merge a roll-up topic's decimal sums
by their places (`rollup_sum`, plateau_core.schema_merge), so decimal(38, 0) sums beside
decimal(38, 2) ones read as decimal(38, 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import structlog

from plateau_core.errors import InvalidInputError
from plateau_core.json_text import as_json_text
from plateau_core.schema import OFFSET, TIMESTAMP, TIMESTAMP_TYPE
from plateau_core.sketches import estimate, merge_sketches, sketch, sketch_kind

MetricKind = Literal["count", "sum", "min", "max", "distinct"]
METRIC_KINDS: tuple[MetricKind, ...] = ("count", "sum", "min", "max", "distinct")
_LABEL = re.compile(r"[1-9][0-9]*[smhd]")
log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RollupMetric:
    kind: MetricKind
    column: str | None = None  # None for count

    def __post_init__(self) -> None:
        if (self.kind == "count") != (self.column is None):
            raise InvalidInputError(
                f"rollup metric {self.kind}: count takes no column, the others one"
            )

    @property
    def name(self) -> str:
        return "count" if self.column is None else f"{self.kind}_{self.column}"


@dataclass(frozen=True)
class RollupPolicy:
    """One roll-up of a topic: `label` names its granularity (`1m`) in the derived topic."""

    label: str
    granularity_ms: int
    dimensions: tuple[str, ...]
    metrics: tuple[RollupMetric, ...]

    def __post_init__(self) -> None:
        if not _LABEL.fullmatch(self.label):
            raise InvalidInputError(f"rollup granularity {self.label!r}: like 10s, 1m, 1h or 1d")
        if self.granularity_ms <= 0:
            raise InvalidInputError("rollup granularity must be positive")
        if not self.metrics:
            raise InvalidInputError("a rollup needs at least one metric")
        names = [*self.dimensions, *(m.name for m in self.metrics)]
        clash = {OFFSET, TIMESTAMP} & set(names)
        if clash or len(set(names)) != len(names):
            raise InvalidInputError(
                f"rollup columns must be distinct and not {OFFSET}/{TIMESTAMP}: {names}"
            )

    def derived_topic(self, topic: str) -> str:
        return f"{topic}.rollup.{self.label}"


def rollup_base(topic: str) -> str | None:
    """The topic whose roll-up `topic` is named as (`{base}.rollup.{label}`), or None."""
    base, marker, label = topic.rpartition(".rollup.")
    return base if marker and base and _LABEL.fullmatch(label) else None


def rollup_sum(topic: str | None, column: str) -> bool:
    """Whether `column` of `topic` is named as a roll-up's sum (`sum_{col}` of a roll-up
    topic), whose decimals the readers merge by the places they hold (schema_merge). A
    dimension named so is taken for one only where all its decimals have 38 digits."""
    return topic is not None and column.startswith("sum_") and rollup_base(topic) is not None


_BUCKET = "__bucket"


def rollup_table(
    table: pa.Table, policy: RollupPolicy, *, topic: str | None = None, partition: int = -1
) -> pa.Table:
    """The roll-up rows of one raw segment table (non-empty), by bucket then dimensions.
    `topic` and `partition` (of the raw segment) name it in the log."""
    rows = table.num_rows
    first_offset = table.column(OFFSET)[0].as_py()
    # What every log line of this roll-up names it by.
    context = {
        "topic": topic,
        "partition": partition,
        "rollup": policy.label,
        "start_offset": first_offset,
        "end_offset": table.column(OFFSET)[rows - 1].as_py(),
    }
    stamps = table.column(TIMESTAMP).cast(pa.int64()).to_numpy()
    buckets = stamps // policy.granularity_ms * policy.granularity_ms
    # Grouped under names of their place, not the topic's own: a dimension or metric column
    # called like one of these would have taken its place in the grouping.
    columns: dict[str, pa.ChunkedArray | pa.Array] = {_BUCKET: pa.array(buckets)}
    keys = [_BUCKET]
    for at, dimension in enumerate(policy.dimensions):
        keys.append(f"__d{at}")
        columns[keys[-1]] = _column(table, dimension, rows)
    # A metric over a column the segment lacks, holds only as nulls of no type (a JSON
    # field seen only as null), or holds in a type its aggregate has no kernel for (the sum
    # of text, the minimum of a list) adds nothing: its groups get nulls or empty sketches.
    # Run, such an aggregate failed every seal of the partition, its raw records with it
    # (and distinct crashes the process on a null-typed column).
    taken = [m for m in policy.metrics if m.column is None or _aggregable(table, m)]
    # Only a type without an aggregate is the config's to fix: a column missing or all
    # null is a sparse field of a JSON topic, segment after segment.
    unfit = {
        m.name: str(table.schema.field(m.column).type)
        for m in policy.metrics
        if m not in taken and m.column is not None and _typed(table, m.column)
    }
    if unfit:
        log.warning("rollup_metrics_skipped", **context, metrics=unfit)
    named = sorted({m.column for m in taken if m.column is not None})
    sources = {column: f"__m{at}" for at, column in enumerate(named)}
    for source, name in sources.items():
        columns[name] = table.column(source)
    exact = {
        column: f"__x{at}"
        for at, column in enumerate(named)
        if any(m.kind == "sum" and m.column == column for m in taken)
        and not _sums_fit(table.column(column))
    }
    for source, name in exact.items():
        columns[name] = _summed_wide(table.column(source))

    # The grouped column each metric over a column aggregates.
    grouped_as = {
        m: exact[m.column] if m.kind == "sum" and m.column in exact else sources[m.column]
        for m in taken
        if m.column is not None
    }
    aggregations = [
        (grouped_as[m], m.kind) if m in grouped_as else ([], "count_all") for m in taken
    ]
    grouped = pa.table(columns).group_by(keys, use_threads=False).aggregate(aggregations)
    grouped = grouped.sort_by([(k, "ascending") for k in keys])
    out: dict[str, pa.Array | pa.ChunkedArray] = {
        OFFSET: pa.array([first_offset] * grouped.num_rows, pa.int64()),
        TIMESTAMP: grouped.column(_BUCKET).cast(pa.int64()).cast(TIMESTAMP_TYPE),
    }
    for dimension, key in zip(policy.dimensions, keys[1:], strict=True):
        out[dimension] = grouped.column(key)
    widened: dict[str, list[str]] = {}  # sums past their type, by the type that holds them
    for metric in policy.metrics:
        if metric not in taken:
            missing = grouped.num_rows
            out[metric.name] = (
                pa.array([b""] * missing, pa.binary())
                if metric.kind == "distinct"
                else pa.nulls(missing)
            )
            continue
        aggregated = grouped_as.get(metric)
        produced = grouped.column(_aggregate_name(metric, aggregated))
        if metric.column in exact and metric.kind == "sum":
            source = table.schema.field(metric.column).type
            produced = _narrowed(produced, source)
            if produced.type == _held_past(source):
                widened.setdefault(str(produced.type), []).append(metric.name)
        elif metric.kind == "distinct" and aggregated is not None:
            kind = sketch_kind(columns[aggregated].type)
            produced = pa.array(
                [sketch(kind, values or []) for values in produced.to_pylist()], pa.binary()
            )
        out[metric.name] = produced
    for held, metrics in widened.items():
        log.warning("rollup_sum_widened", **context, metrics=metrics, type=held)
    return pa.table(out)


# Sums that would pass their integer type are held in this: 38 digits hold the sum of
# 10**19 values of int64 or uint64, more than any segment or query has rows.
EXACT_SUM = pa.decimal128(38, 0)
# Below this, no sum of the values can pass int64 (the float sum of their magnitudes is off
# by far less than the margin to 2**63): the common case keeps Arrow's fast integer sum.
_SUM_BOUND = float(2**62)


# Arrow sums a decimal(p, s) as a decimal of these digits at scale s, and wraps round past them.
_DECIMAL_SUM_DIGITS = 38
_DECIMAL256_SUM_DIGITS = 76


def _sums_fit(values: pa.ChunkedArray | pa.Array) -> bool:
    """Whether Arrow's sum of any subset of `values` fits its result type: always for
    floats (a float sum overflows to infinity, as IEEE says), for integers when their
    magnitudes add up to well below 2**63, for decimals well below 38 (76 for decimal256)
    digits at their scale."""
    data_type = values.type
    if pa.types.is_integer(data_type):
        bound = _SUM_BOUND
    elif pa.types.is_decimal(data_type):
        digits = (
            _DECIMAL256_SUM_DIGITS if pa.types.is_decimal256(data_type) else _DECIMAL_SUM_DIGITS
        )
        bound = 10.0 ** (digits - data_type.scale) / 2
    else:
        return True
    magnitude = pc.sum(pc.abs(values.cast(pa.float64(), safe=False))).as_py()
    return magnitude is None or magnitude < bound


def _summed_wide(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """`values` whose sums may pass Arrow's sum type, in a type whose sum holds them:
    integers as decimal(38, 0), decimals in 76 digits, decimal256 (76 already) as doubles."""
    data_type = values.type
    if pa.types.is_integer(data_type):
        return values.cast(EXACT_SUM)
    if pa.types.is_decimal128(data_type):
        return values.cast(pa.decimal256(_DECIMAL256_SUM_DIGITS, data_type.scale))
    return values.cast(pa.float64(), safe=False)


def _held_past(source: pa.DataType) -> pa.DataType:
    """The type of sums of `source` values that passed Arrow's sum type."""
    return EXACT_SUM if pa.types.is_integer(source) else pa.float64()


def _narrowed(sums: pa.ChunkedArray | pa.Array, source: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """Wide `sums` (`_summed_wide`) of `source` values as Arrow's sum of `source` types them
    when every one fits, else as `_held_past` types them: integers as uint64 for unsigned,
    int64 for signed, else the exact decimal(38, 0); decimals as decimal(38, s), else as
    doubles (the digits a reader and Spark take end at 38)."""
    if pa.types.is_integer(source):
        target = pa.uint64() if pa.types.is_unsigned_integer(source) else pa.int64()
    elif pa.types.is_decimal128(source):
        target = pa.decimal128(_DECIMAL_SUM_DIGITS, source.scale)
    else:
        return sums
    try:
        return sums.cast(target)  # a safe cast: raises on a value that does not fit
    except pa.ArrowInvalid:
        return sums if pa.types.is_integer(source) else sums.cast(pa.float64(), safe=False)


def _aggregable(table: pa.Table, metric: RollupMetric) -> bool:
    if metric.column is None or not _typed(table, metric.column):
        return False
    data_type = table.schema.field(metric.column).type
    if metric.kind == "distinct":
        # Arrow lists the distinct values of any type, but a sketch hashes only these: any
        # other gave empty sketches, a distinct count of 0, with nothing said.
        return sketch_kind(data_type) is not None
    return _has_kernel(metric.kind, data_type)


def _typed(table: pa.Table, column: str) -> bool:
    """Whether the segment has the column with a type (not only nulls of no type)."""
    return column in table.column_names and not pa.types.is_null(table.schema.field(column).type)


@cache
def _has_kernel(kind: MetricKind, data_type: pa.DataType) -> bool:
    """Whether Arrow groups values of this type with this aggregate (asked of no rows)."""
    empty = pa.table({"g": pa.array([], pa.int64()), "v": pa.array([], data_type)})
    try:
        empty.group_by(["g"], use_threads=False).aggregate([("v", kind)])
    except pa.ArrowNotImplementedError:
        return False
    return True


def _aggregate_name(metric: RollupMetric, source: str | None) -> str:
    """Arrow's name for the aggregate of `metric` over the grouped column `source`."""
    if metric.kind == "count":
        return "count_all"
    suffix = "distinct" if metric.kind == "distinct" else metric.kind
    return f"{source}_{suffix}"


def _column(table: pa.Table, name: str, rows: int) -> pa.ChunkedArray | pa.Array:
    """A dimension of the segment, or nulls where the segment lacks it (a newer schema added
    it, or no record of a JSON segment had the field): its rows group under a null value.
    Null-typed, so the segment's schema merges with those whose column has a type.

    Arrow groups by no list, struct or map (a JSON field holding arrays or objects): such a
    dimension groups by its values' JSON text, as a column whose types clash reads. Kept
    as it was, it failed every seal of the partition, its raw records with it."""
    if name not in table.column_names:
        return pa.nulls(rows)
    column = table.column(name)
    if _groupable(column.type):
        return column
    return as_json_text(column)


@cache
def _groupable(data_type: pa.DataType) -> bool:
    """Whether Arrow groups rows by values of this type (asked of no rows)."""
    empty = pa.table({"k": pa.array([], data_type)})
    try:
        empty.group_by(["k"], use_threads=False).aggregate([])
    except pa.ArrowNotImplementedError:
        return False
    return True


def reaggregate(table: pa.Table, policy: RollupPolicy) -> pa.Table:
    """Roll-up rows of several segments merged to one row per bucket and dimensions (what a
    query over the derived topic computes), distinct sketches estimated. A dimension or
    metric the rows lack (sealed before the policy had it) reads as nulls, as it does for a
    segment without its column."""
    for name in (*policy.dimensions, *(m.name for m in policy.metrics)):
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows))
    keys = [TIMESTAMP, *policy.dimensions]
    # The rows of several segments can add up past int64 (or 38 digits) where no one did.
    exact = {
        m.name: f"__x{at}"
        for at, m in enumerate(policy.metrics)
        if m.kind in ("count", "sum") and not _sums_fit(table.column(m.name))
    }
    for name, wide in exact.items():
        table = table.append_column(wide, _summed_wide(table.column(name)))
    aggregations: list[tuple[str, str]] = []
    for metric in policy.metrics:
        if metric.kind in ("count", "sum"):
            aggregations.append((exact.get(metric.name, metric.name), "sum"))
        elif metric.kind in ("min", "max"):
            aggregations.append((metric.name, metric.kind))
        else:
            aggregations.append((metric.name, "list"))
    grouped = table.group_by(keys, use_threads=False).aggregate(aggregations)
    doubled: list[str] = []
    for name, wide in exact.items():
        index = grouped.schema.get_field_index(f"{wide}_sum")
        source = table.schema.field(name).type
        sums = _narrowed(grouped.column(index), source)
        if pa.types.is_decimal(source) and pa.types.is_floating(sums.type):
            doubled.append(name)
        grouped = grouped.set_column(index, f"{name}_sum", sums)
    if doubled:
        # An answer, not a seal: no topic or offsets, the roll-up and its metrics name it.
        log.warning(
            "rollup_sum_widened", rollup=policy.label, metrics=doubled, type=str(pa.float64())
        )
    for metric in policy.metrics:
        if metric.kind == "distinct":
            name = f"{metric.name}_list"
            estimates = [estimate(merge_sketches(s)) for s in grouped.column(name).to_pylist()]
            index = grouped.schema.get_field_index(name)
            grouped = grouped.set_column(index, metric.name, pa.array(estimates, pa.float64()))
    renamed = {
        f"{m.name}_{'sum' if m.kind in ('count', 'sum') else m.kind}": m.name
        for m in policy.metrics
        if m.kind != "distinct"
    }
    return grouped.rename_columns([renamed.get(n, n) for n in grouped.column_names]).sort_by(
        [(k, "ascending") for k in keys]
    )


def rollup_metrics(specs: Iterable[str]) -> tuple[RollupMetric, ...]:
    """Metrics from `count`, `sum:col`, `min:col`, `max:col`, `distinct:col`."""
    found = []
    for spec in specs:
        kind, _, column = spec.partition(":")
        if kind not in METRIC_KINDS:
            raise InvalidInputError(
                f"rollup metric {spec!r}: one of count, sum:<col>, min:<col>, max:<col>, "
                "distinct:<col>"
            )
        found.append(RollupMetric(kind, column or None))
    return tuple(found)


def granularity_ms(label: str) -> int:
    if not _LABEL.fullmatch(label):
        raise InvalidInputError(f"rollup granularity {label!r}: like 10s, 1m, 1h or 1d")
    unit = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[label[-1]]
    return int(label[:-1]) * unit

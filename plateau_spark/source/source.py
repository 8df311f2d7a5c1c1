"""The `plateau` data source: batch reads with segment pruning at the manifest.

spark.read.format("plateau").option("path", data_dir).option("topic", t).load()
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from plateau_core.errors import InvalidInputError
from plateau_core.schema import merge_schemas
from plateau_spark.source.filters import ScanBounds, push
from plateau_spark.source.options import SourceOptions
from plateau_spark.source.scan import SegmentGroup, group_segments, read_group
from plateau_spark.source.types import arrow_schema, spark_schema

SOURCE_NAME = "plateau"


class PlateauDataSource(DataSource):
    """A plateau topic as a DataFrame: `partition` plus the topic's merged segment schema."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        options = SourceOptions.parse(self.options)
        with options.open_store() as store:
            if options.topic not in store.topics():
                raise InvalidInputError(
                    f"topic {options.topic!r} is not in the plateau store; it has "
                    f"{store.topics() or 'no topics yet'}"
                )
            merged = merge_schemas(store.manifest.schemas(options.topic).values())
        return spark_schema(merged)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = SourceOptions.parse(self.options)
        if options.pushdown:
            return PlateauPushdownReader(options, schema)
        # Spark refuses a reader that implements pushFilters when its pushdown setting is
        # off, so option("pushdown", "false") gets one without it.
        return PlateauBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from plateau_spark.source.stream import PlateauStreamReader  # noqa: PLC0415

        return PlateauStreamReader(SourceOptions.parse(self.options), schema)


class PlateauBatchReader(DataSourceReader):
    """Plans tasks from the manifest at query time, so every query sees the segments sealed
    by then. Without pushdown it reads every segment and Spark applies the filters."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.bounds = ScanBounds()

    def partitions(self) -> Sequence[InputPartition]:
        if self.bounds.empty:
            return []
        request = self.bounds.request(self.options.topic)
        with self.options.open_store() as store:
            data_dir = store.data_dir
            segments = store.manifest.segments(
                self.options.topic,
                start_offset=request.start_offset,
                end_offset=request.end_offset,
                time_start=request.time_start,
                time_end=request.time_end,
            )
        admitted = [s for s in segments if self.bounds.admits(s)]
        return group_segments(admitted, data_dir, self.options.max_partition_bytes, request)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentGroup):
            return  # Spark reads one placeholder partition when planning found none
        yield from read_group(
            partition,
            self.bounds.request(self.options.topic),
            arrow_schema(self.schema),
            self.options.trace_file,
        )


class PlateauPushdownReader(PlateauBatchReader):
    """Takes partition, offset and timestamp filters: segments are pruned at the manifest
    and rows filtered inside the batches; every other filter stays with Spark."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        # Replaced, never merged: the bounds are exactly this query's filters.
        self.bounds, rejected = push(filters)
        return rejected

"""A replicated Iceberg table as a Spark DataFrame, without Spark's Iceberg runtime.

Apache Iceberg ships runtimes for Spark 3.4 to 4.1; on Spark 4.2 and later the 4.1 runtime
fails to load (`IncompatibleClassChangeError`: Spark's CatalogManager and View changed
shape). Until a runtime for this Spark exists, pyiceberg plans the current snapshot (which
data files, after partition pruning on `row_filter`) and Spark's own Parquet reader reads
them. Exact for the tables plateau writes: it commits appends and file rewrites only, never
delete files; a table that has delete files (another engine's row deletes) is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table
from pyspark.sql.pandas.types import from_arrow_schema

from plateau_core.errors import PlateauError
from plateau_spark.replication.iceberg_schema import iceberg_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class IcebergReadError(PlateauError):
    """The table holds something this reader cannot read exactly."""


def iceberg_frame(
    spark: SparkSession, table: Table, row_filter: BooleanExpression | None = None
) -> DataFrame:
    """The table's current snapshot (files pruned by `row_filter`, rows not filtered) with
    its current columns; files written before a column was added read it as null."""
    paths = []
    for task in table.scan(row_filter=row_filter or AlwaysTrue()).plan_files():
        if task.delete_files:
            raise IcebergReadError(
                f"{table.name()} has delete files (rows deleted by another engine); read it "
                "with pyiceberg or an engine with an Iceberg runtime"
            )
        paths.append(_spark_path(task.file.file_path))
    schema = from_arrow_schema(iceberg_arrow_schema(table.schema()))
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*paths)


def _spark_path(path: str) -> str:
    # Hadoop names its S3 connector s3a://; file:// paths need no change.
    return "s3a://" + path.removeprefix("s3://") if path.startswith("s3://") else path

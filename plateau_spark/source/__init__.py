"""The `plateau` data source for Spark: batch and streaming reads with pruning at the
manifest."""

from plateau_spark.source.source import SOURCE_NAME, PlateauDataSource

__all__ = ["SOURCE_NAME", "PlateauDataSource"]

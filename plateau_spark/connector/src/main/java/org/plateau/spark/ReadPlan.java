package org.plateau.spark;

import java.io.Serializable;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** What every task of a scan shares: the columns to return, the bounds, the row limit. */
final class ReadPlan implements PartitionReaderFactory, Serializable {
  final SourceOptions options;
  final StructType readSchema;
  final Bounds bounds;
  final long limit; // rows per task at most; -1: no limit

  ReadPlan(SourceOptions options, StructType readSchema, Bounds bounds, long limit) {
    this.options = options;
    this.readSchema = readSchema;
    this.bounds = bounds;
    this.limit = limit;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return partition instanceof SegmentGroup;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new BatchReader(this, (SegmentGroup) partition);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new AggregateScan.RowsReader((AggregateScan.Rows) partition);
  }
}

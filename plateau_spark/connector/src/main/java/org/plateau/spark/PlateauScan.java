package org.plateau.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

/**
 * A batch scan. Its segments are listed from the manifest when Spark plans the tasks, in one
 * query: the scan reads one consistent set of sealed segments, and retention keeps their files
 * for its grace period after marking them, so a query that started reads all it planned.
 */
final class PlateauScan implements Scan, Batch, SupportsReportStatistics {
  private final SourceOptions options;
  private final StructType schema;
  private final Bounds bounds;
  private final BloomProbes probes;
  private final List<String> filters;
  private final long limit;
  private final TopN topN; // null: none pushed
  private Bounds readBounds; // the bounds, narrowed by a TopN's threshold once planned
  private final int fullRowSize;
  private InputPartition[] planned;

  PlateauScan(
      SourceOptions options,
      StructType schema,
      StructType full,
      Bounds bounds,
      BloomProbes probes,
      List<String> filters,
      long limit,
      TopN topN) {
    this.options = options;
    this.fullRowSize = full.defaultSize();
    this.schema = schema;
    this.bounds = bounds;
    this.probes = probes;
    this.topN = topN;
    this.filters = filters;
    this.limit = limit;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "PlateauScan[topic=" + options.topic + "] ReadSchema: " + schema.catalogString()
        + ", PushedFilters: " + filters + (limit >= 0 ? ", PushedLimit: " + limit : "")
        + (probes.isEmpty() ? "" : ", BloomFilterColumns: " + probes.columns())
        + (topN == null
            ? ""
            : ", PushedTopN: timestamp " + (topN.descending ? "DESC" : "ASC") + " LIMIT " + topN.limit);
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new PlateauStream(options, schema);
  }

  @Override
  public synchronized InputPartition[] planInputPartitions() {
    if (planned == null) {
      planned = plan().toArray(new InputPartition[0]);
    }
    return planned;
  }

  private List<SegmentGroup> plan() {
    if (bounds.isEmpty()) {
      return List.of();
    }
    List<Segment> candidates;
    try (ManifestReader manifest = new ManifestReader(options)) {
      candidates = manifest.admitted(options.topic, bounds, probes);
    }
    if (topN != null) {
      TopN.Plan plan = topN.plan(candidates, bounds);
      readBounds = plan.bounds();
      return SegmentGroup.plan(plan.segments(), options.maxPartitionBytes, readBounds);
    }
    List<Segment> admitted = new ArrayList<>();
    long sure = 0; // rows certain to be returned by the segments admitted so far
    for (Segment s : candidates) {
      if (limit >= 0 && sure >= limit) {
        break; // enough rows for the LIMIT: the rest need not be read
      }
      admitted.add(s);
      if (bounds.covers(s)) {
        sure += s.recordCount();
      }
    }
    return SegmentGroup.plan(admitted, options.maxPartitionBytes, bounds);
  }

  /**
   * The planned segments' bytes and rows, so Spark can tell a small topic (a broadcast join)
   * from a large one. Bytes are scaled by the share of the columns read, as Spark does for
   * files; the row count is exact when the bounds cover the segments whole.
   */
  @Override
  public Statistics estimateStatistics() {
    long bytes = 0;
    long rows = 0;
    for (InputPartition partition : planInputPartitions()) {
      for (Segment s : ((SegmentGroup) partition).segments) {
        bytes += s.sizeBytes();
        rows += s.recordCount();
      }
    }
    double share = schema.defaultSize() / (double) Math.max(1, fullRowSize);
    long scaled = Math.max(1, (long) (bytes * Math.min(1.0, share)));
    long count = rows;
    return new Statistics() {
      @Override
      public OptionalLong sizeInBytes() {
        return OptionalLong.of(scaled);
      }

      @Override
      public OptionalLong numRows() {
        return OptionalLong.of(count);
      }
    };
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    planInputPartitions(); // a TopN's threshold narrows the bounds the tasks read with
    if (topN != null) {
      // Rows are not read in time order, so no task may stop early: Spark takes the first k.
      return new ReadPlan(options, schema, readBounds == null ? bounds : readBounds, -1);
    }
    return new ReadPlan(options, schema, bounds, limit);
  }
}

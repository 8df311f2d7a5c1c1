package org.plateau.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.HashSet;
import java.util.Set;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;

/**
 * One group's running aggregates (all rows, or one partition's): folded from whole segments'
 * manifest rows, and from the rows of segments the bounds cut, read on the driver.
 */
final class AggregateFold {
  long count;
  long minOffset = Long.MAX_VALUE;
  long maxOffset = Long.MIN_VALUE;
  long minTime = Long.MAX_VALUE; // epoch ms
  long maxTime = Long.MIN_VALUE;
  int minPartition = Integer.MAX_VALUE;
  int maxPartition = Integer.MIN_VALUE;

  /** A segment every row of which matches, from its manifest row alone. */
  void addWhole(Segment s) {
    count += s.recordCount();
    minOffset = Math.min(minOffset, s.startOffset());
    maxOffset = Math.max(maxOffset, s.endOffset() - 1);
    minTime = Math.min(minTime, s.timeMin());
    maxTime = Math.max(maxTime, s.timeMax());
    minPartition = Math.min(minPartition, s.partition());
    maxPartition = Math.max(maxPartition, s.partition());
  }

  /**
   * Folds the rows of `segment` the bounds keep, reading only the batches its index leaves and
   * only the columns the bounds look at. Batches are checked before any is used, as a task
   * checks them.
   */
  void addRows(SourceOptions options, Segment segment, Bounds bounds) {
    SegmentFile file = SegmentFile.open(options.segmentPath(segment.path()), segment, options.topic);
    int[] chosen = file.checkedBatches(bounds, options.topic);
    Set<String> keep = new HashSet<>();
    keep.add(Bounds.OFFSET); // for MIN/MAX of a batch the bounds cut, and the row filter
    keep.add(Bounds.TIMESTAMP);
    if (bounds.key != null) {
      keep.add(Bounds.KEY);
    }
    if (options.traceFile != null) {
      BatchReader.trace(options.traceFile, segment, chosen.length, file.batchCount() - chosen.length, true);
    }
    try (BufferAllocator allocator = BatchReader.ROOT.newChildAllocator("plateau-aggregate", 0, Long.MAX_VALUE);
        VectorSchemaRoot root = VectorSchemaRoot.create(file.kept(keep), allocator)) {
      VectorLoader loader = new VectorLoader(root, Codecs.FACTORY);
      for (int i : chosen) {
        try (ArrowRecordBatch body = file.batch(i, keep)) {
          loader.load(body);
        }
        boolean whole = file.batchCovered(i, bounds);
        addBatch(root, whole ? null : RowFilter.select(root, bounds), segment.partition());
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read segment " + segment.path() + ": " + e.getMessage(), e);
    }
  }

  private void addBatch(VectorSchemaRoot root, int[] rows, int partition) {
    int n = rows == null ? root.getRowCount() : rows.length;
    if (n == 0) {
      return;
    }
    count += n;
    minPartition = Math.min(minPartition, partition);
    maxPartition = Math.max(maxPartition, partition);
    ArrowBuf offsets = root.getVector(Bounds.OFFSET).getDataBuffer();
    FieldVector time = root.getVector(Bounds.TIMESTAMP);
    ArrowBuf times = time.getDataBuffer();
    long perMs = RowFilter.unitsPerMilli(time);
    for (int j = 0; j < n; j++) {
      long row = rows == null ? j : rows[j];
      long offset = offsets.getLong(row * 8);
      long ms = Math.floorDiv(times.getLong(row * 8), perMs);
      minOffset = Math.min(minOffset, offset);
      maxOffset = Math.max(maxOffset, offset);
      minTime = Math.min(minTime, ms);
      maxTime = Math.max(maxTime, ms);
    }
  }
}

package org.plateau.spark;

import java.util.Arrays;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;

/** The bounds applied row by row to a loaded record batch: what a task and an aggregate share. */
final class RowFilter {
  private RowFilter() {}

  /**
   * The rows passing the bounds, as indices into the loaded batch. The batch holds the offset,
   * timestamp and key columns whenever the bounds look at them.
   */
  static int[] select(VectorSchemaRoot root, Bounds b) {
    int rows = root.getRowCount();
    boolean byOffset = !b.offsets.isAll();
    boolean byTime = !b.times.isAll();
    ArrowBuf offsets = byOffset ? root.getVector(Bounds.OFFSET).getDataBuffer() : null;
    FieldVector time = byTime ? root.getVector(Bounds.TIMESTAMP) : null;
    ArrowBuf times = byTime ? time.getDataBuffer() : null;
    long perMs = byTime ? unitsPerMilli(time) : 1;
    // A segment whose keys are all null stores them as a null column: no key matches there.
    FieldVector keyColumn = b.key == null ? null : root.getVector(Bounds.KEY);
    VarBinaryVector keys = keyColumn instanceof VarBinaryVector ? (VarBinaryVector) keyColumn : null;
    // No upper bound (null) is not Long.MAX_VALUE, which `x < hi` would exclude.
    long oLo = b.offsets.lo == null ? Long.MIN_VALUE : b.offsets.lo;
    boolean oBounded = b.offsets.hi != null;
    long oHi = oBounded ? b.offsets.hi : 0;
    long tLo = b.times.lo == null ? Long.MIN_VALUE : b.times.lo;
    boolean tBounded = b.times.hi != null;
    long tHi = tBounded ? b.times.hi : 0;
    int[] kept = new int[rows];
    int n = 0;
    for (int i = 0; i < rows; i++) {
      if (byOffset) {
        long offset = offsets.getLong((long) i * 8);
        if (offset < oLo || (oBounded && offset >= oHi) || (b.offsets.values != null && !b.offsets.values.contains(offset))) {
          continue;
        }
      }
      if (byTime) {
        long ms = Math.floorDiv(times.getLong((long) i * 8), perMs);
        if (ms < tLo || (tBounded && ms >= tHi) || (b.times.values != null && !b.times.values.contains(ms))) {
          continue;
        }
      }
      if (b.key != null && (keys == null || keys.isNull(i) || !Arrays.equals(keys.get(i), b.key))) {
        continue;
      }
      kept[n++] = i;
    }
    return Arrays.copyOf(kept, n);
  }

  /** The stored timestamp's units in a millisecond, plateau's (and the manifest's) resolution. */
  static long unitsPerMilli(FieldVector time) {
    if (!(time instanceof TimeStampVector)) {
      return 1;
    }
    TimeUnit unit = ((ArrowType.Timestamp) time.getField().getType()).getUnit();
    return unit == TimeUnit.MICROSECOND ? 1_000 : unit == TimeUnit.NANOSECOND ? 1_000_000 : 1;
  }
}

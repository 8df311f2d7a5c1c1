package org.plateau.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark task: neighbouring segments, in (partition, offset) order, each with the offsets
 * read of it when only a share of it is (a stream's micro-batch over a consolidated segment).
 */
final class SegmentGroup implements InputPartition {
  final Segment[] segments;
  final Range[] offsets; // per segment: the offsets read of it (null: all the bounds keep)

  private SegmentGroup(List<Segment> segments, List<Range> offsets) {
    this.segments = segments.toArray(new Segment[0]);
    this.offsets = offsets.toArray(new Range[0]);
  }

  static List<SegmentGroup> plan(List<Segment> segments, long maxBytes, Bounds bounds) {
    return plan(segments, maxBytes, bounds, Map.of());
  }

  /**
   * Neighbouring segments share a task while the bytes it reads stay under `maxBytes`; a larger
   * segment is a task of its own. A segment counts only for the share of it the bounds keep, so
   * a narrow query becomes a few tasks instead of one per segment: each task has a fixed cost.
   */
  static List<SegmentGroup> plan(
      List<Segment> segments, long maxBytes, Bounds bounds, Map<Long, Range> shares) {
    List<Segment> ordered = new ArrayList<>(segments);
    ordered.sort(Comparator.comparingInt(Segment::partition).thenComparingLong(Segment::startOffset));
    List<SegmentGroup> groups = new ArrayList<>();
    List<Segment> current = new ArrayList<>();
    List<Range> currentShares = new ArrayList<>();
    long size = 0;
    for (Segment segment : ordered) {
      Range share = shares.get(segment.id());
      long cost = readBytes(segment, share == null ? bounds : bounds.withOffsets(share));
      if (!current.isEmpty() && size + cost > maxBytes) {
        groups.add(new SegmentGroup(current, currentShares));
        current = new ArrayList<>();
        currentShares = new ArrayList<>();
        size = 0;
      }
      current.add(segment);
      currentShares.add(share);
      size += cost;
    }
    if (!current.isEmpty()) {
      groups.add(new SegmentGroup(current, currentShares));
    }
    return groups;
  }

  /** The bounds segment `i` is read with: the scan's, narrowed to its share of offsets. */
  Bounds boundsOf(int i, Bounds bounds) {
    return offsets[i] == null ? bounds : bounds.withOffsets(offsets[i]);
  }

  /** The segment's rows scaled by the share of its offsets and times the bounds keep. */
  static long rowsKept(Segment s, Bounds bounds) {
    return Math.max(1, (long) Math.ceil(s.recordCount() * share(s, bounds)));
  }

  private static double share(Segment s, Bounds bounds) {
    return Math.min(
        overlap(s.startOffset(), s.endOffset(), bounds.offsets),
        overlap(s.timeMin(), s.timeMax() + 1, bounds.times));
  }

  /** The segment's bytes scaled by the share of its offsets and times the bounds keep (rows are
   * assumed spread evenly; the per-batch index makes reads follow that share). */
  static long readBytes(Segment s, Bounds bounds) {
    return Math.max(1, (long) (s.sizeBytes() * share(s, bounds)));
  }

  private static double overlap(long lo, long hi, Range range) {
    long first = range.lo == null ? lo : Math.max(lo, range.lo);
    long last = range.hi == null ? hi : Math.min(hi, range.hi);
    return Math.max(0, last - first) / (double) Math.max(1, hi - lo);
  }
}

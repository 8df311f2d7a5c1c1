package org.plateau.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: neighbouring segments, in (partition, offset) order. */
final class SegmentGroup implements InputPartition {
  final Segment[] segments;

  SegmentGroup(List<Segment> segments) {
    this.segments = segments.toArray(new Segment[0]);
  }

  /**
   * Neighbouring segments share a task while the bytes it reads stay under `maxBytes`; a larger
   * segment is a task of its own. A segment counts only for the share of it the bounds keep, so
   * a narrow query becomes a few tasks instead of one per segment: each task has a fixed cost.
   */
  static List<SegmentGroup> plan(List<Segment> segments, long maxBytes, Bounds bounds) {
    List<Segment> ordered = new ArrayList<>(segments);
    ordered.sort(Comparator.comparingInt(Segment::partition).thenComparingLong(Segment::startOffset));
    List<SegmentGroup> groups = new ArrayList<>();
    List<Segment> current = new ArrayList<>();
    long size = 0;
    for (Segment segment : ordered) {
      long cost = readBytes(segment, bounds);
      if (!current.isEmpty() && size + cost > maxBytes) {
        groups.add(new SegmentGroup(current));
        current = new ArrayList<>();
        size = 0;
      }
      current.add(segment);
      size += cost;
    }
    if (!current.isEmpty()) {
      groups.add(new SegmentGroup(current));
    }
    return groups;
  }

  /** The segment's bytes scaled by the share of its offsets and times the bounds keep (rows are
   * assumed spread evenly; the per-batch index makes reads follow that share). */
  private static long readBytes(Segment s, Bounds bounds) {
    double share =
        Math.min(
            overlap(s.startOffset(), s.endOffset(), bounds.offsets),
            overlap(s.timeMin(), s.timeMax() + 1, bounds.times));
    return Math.max(1, (long) (s.sizeBytes() * share));
  }

  private static double overlap(long lo, long hi, Range range) {
    long first = range.lo == null ? lo : Math.max(lo, range.lo);
    long last = range.hi == null ? hi : Math.min(hi, range.hi);
    return Math.max(0, last - first) / (double) Math.max(1, hi - lo);
  }
}

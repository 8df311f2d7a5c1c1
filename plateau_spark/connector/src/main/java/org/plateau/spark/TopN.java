package org.plateau.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * An `ORDER BY timestamp [DESC] LIMIT k` Spark pushed to the scan. Planning reads the segments'
 * time spans from the manifest, newest first (oldest first ascending), and stops admitting
 * segments once the ones admitted certainly hold k rows at or beyond a threshold: every later
 * segment lies wholly past it, so none of its rows can be among the first k. The threshold also
 * narrows the scan's time range, so the segments read skip their batches and rows past it. Spark
 * still sorts the rows the scan returns and takes the first k (the push is partial), which is
 * what makes the answer the same as a full sort's.
 */
final class TopN {
  final boolean descending;
  final int limit;

  TopN(boolean descending, int limit) {
    this.descending = descending;
    this.limit = limit;
  }

  /** What the scan reads: the segments that may hold one of the first k rows, and the bounds. */
  record Plan(List<Segment> segments, Bounds bounds) {}

  Plan plan(List<Segment> candidates, Bounds bounds) {
    List<Segment> ordered = new ArrayList<>(candidates);
    Comparator<Segment> newest = Comparator.comparingLong(Segment::timeMax).reversed();
    ordered.sort(descending ? newest : Comparator.comparingLong(Segment::timeMin));
    // Rows certainly returned, by how far they are from the end the order starts at: a covered
    // segment's rows all lie at or beyond its time_min (descending) or time_max (ascending).
    TreeMap<Long, Long> sure = new TreeMap<>();
    Long threshold = null;
    List<Segment> admitted = new ArrayList<>();
    for (Segment s : ordered) {
      if (threshold != null && (descending ? s.timeMax() < threshold : s.timeMin() > threshold)) {
        break;
      }
      admitted.add(s);
      if (bounds.covers(s)) {
        sure.merge(descending ? s.timeMin() : s.timeMax(), s.recordCount(), Long::sum);
        threshold = threshold(sure);
      }
    }
    if (threshold == null) {
      return new Plan(admitted, bounds);
    }
    return new Plan(admitted, descending ? bounds.atOrAfter(threshold) : bounds.atOrBefore(threshold));
  }

  /** The time at or beyond which k certain rows lie, or null while fewer are certain. */
  private Long threshold(TreeMap<Long, Long> sure) {
    long rows = 0;
    Iterable<Map.Entry<Long, Long>> entries =
        descending ? sure.descendingMap().entrySet() : sure.entrySet();
    for (Map.Entry<Long, Long> e : entries) {
      rows += e.getValue();
      if (rows >= limit) {
        return e.getKey();
      }
    }
    return null;
  }
}

package org.plateau.spark;

import java.io.Serializable;
import java.util.Set;
import java.util.TreeSet;

/** lo <= x < hi (null: unbounded), optionally x in `values` (a SQL IN). */
final class Range implements Serializable {
  static final Range ALL = new Range(null, null, null);
  static final Range NONE = new Range(0L, 0L, null);

  final Long lo;
  final Long hi;
  final Set<Long> values; // null: any value within the bounds

  Range(Long lo, Long hi, Set<Long> values) {
    this.lo = lo;
    this.hi = hi;
    this.values = values;
  }

  /** The exclusive upper bound just above v: null (no bound) for Long.MAX_VALUE. */
  static Long after(long v) {
    return v == Long.MAX_VALUE ? null : Long.valueOf(v + 1);
  }

  Range narrow(Long newLo, Long newHi) {
    Long l = lo == null ? newLo : newLo == null ? lo : Long.valueOf(Math.max(lo, newLo));
    Long h = hi == null ? newHi : newHi == null ? hi : Long.valueOf(Math.min(hi, newHi));
    return new Range(l, h, values).settled();
  }

  Range only(Set<Long> chosen) {
    Set<Long> kept = new TreeSet<>(chosen);
    if (values != null) {
      kept.retainAll(values);
    }
    return new Range(lo, hi, kept).settled();
  }

  /** Bounds tightened to the set's extent, and the set to the bounds. */
  private Range settled() {
    if (values == null) {
      return this;
    }
    TreeSet<Long> inside = new TreeSet<>();
    for (long v : values) {
      if ((lo == null || v >= lo) && (hi == null || v < hi)) {
        inside.add(v);
      }
    }
    if (inside.isEmpty()) {
      return new Range(0L, 0L, inside);
    }
    return new Range(inside.first(), after(inside.last()), inside);
  }

  boolean isEmpty() {
    return hi != null && ((lo != null && lo >= hi) || hi == Long.MIN_VALUE);
  }

  boolean isAll() {
    return lo == null && hi == null && values == null;
  }

  boolean contains(long v) {
    return (lo == null || v >= lo) && (hi == null || v < hi) && (values == null || values.contains(v));
  }

  /** Whether every x in [first, last] is inside (no set: a set never covers a span). */
  boolean covers(long first, long last) {
    return values == null && (lo == null || first >= lo) && (hi == null || last < hi);
  }

  /** Whether some x in [first, last] may be inside. */
  boolean overlaps(long first, long last) {
    if ((lo != null && last < lo) || (hi != null && first >= hi)) {
      return false;
    }
    if (values == null) {
      return true;
    }
    Long next = ((TreeSet<Long>) values).ceiling(first);
    return next != null && next <= last;
  }

  @Override
  public String toString() {
    return "[" + lo + ", " + hi + ")" + (values == null ? "" : " in " + values);
  }
}

package org.plateau.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.types.DataTypes;

/**
 * The conjunction of the predicates plateau took over from Spark: ranges of partition, offset
 * and time (epoch ms, the manifest's unit), and an exact key. Every predicate taken is applied
 * exactly, down to the row, so Spark does not evaluate it again; that is what lets aggregates
 * over filtered scans be pushed too.
 */
final class Bounds implements Serializable {
  static final String PARTITION = "partition";
  static final String OFFSET = "offset";
  static final String TIMESTAMP = "timestamp";
  static final String KEY = "key";
  static final Bounds NONE = new Bounds(Range.ALL, Range.ALL, Range.ALL, null, false);

  final Range partitions;
  final Range offsets;
  final Range times;
  final byte[] key; // rows whose key equals it; null: any key
  final boolean noKey; // two different keys were asked for: no row matches

  private Bounds(Range partitions, Range offsets, Range times, byte[] key, boolean noKey) {
    this.partitions = partitions;
    this.offsets = offsets;
    this.times = times;
    this.key = key;
    this.noKey = noKey;
  }

  boolean isEmpty() {
    return noKey || partitions.isEmpty() || offsets.isEmpty() || times.isEmpty();
  }

  /** Whether the segment may hold a matching row. */
  boolean admits(Segment s) {
    return !isEmpty()
        && partitions.contains(s.partition())
        && offsets.overlaps(s.startOffset(), s.endOffset() - 1)
        && times.overlaps(s.timeMin(), s.timeMax());
  }

  /** Whether every row of the segment matches: it is read without a row filter. */
  boolean covers(Segment s) {
    return key == null
        && offsets.covers(s.startOffset(), s.endOffset() - 1)
        && times.covers(s.timeMin(), s.timeMax());
  }

  /** Whether a record batch with these offsets and times may hold a matching row. */
  boolean overlapsBatch(long first, long last, long timeMin, long timeMax) {
    return offsets.overlaps(first, last) && times.overlaps(timeMin, timeMax);
  }

  boolean coversBatch(long first, long last, long timeMin, long timeMax) {
    return key == null && offsets.covers(first, last) && times.covers(timeMin, timeMax);
  }

  /** These bounds with rows before `lo` (epoch ms) excluded too. */
  Bounds atOrAfter(long lo) {
    return withRange(TIMESTAMP, times.narrow(lo, null));
  }

  /** These bounds with rows after `last` (epoch ms) excluded too. */
  Bounds atOrBefore(long last) {
    return withRange(TIMESTAMP, times.narrow(null, Range.after(last)));
  }

  /** These bounds with offsets outside `share` excluded too. */
  Bounds withOffsets(Range share) {
    return withRange(OFFSET, offsets.narrow(share.lo, share.hi));
  }

  /** The predicates plateau applies and those left to Spark, in the order given. */
  static Bounds push(Predicate[] predicates, List<Predicate> taken, List<Predicate> left) {
    Bounds bounds = NONE;
    List<Predicate> keyNotNull = new ArrayList<>();
    for (Predicate p : predicates) {
      Bounds next = bounds.with(p);
      if (next == null) {
        (isKeyNotNull(p) ? keyNotNull : left).add(p);
      } else {
        taken.add(p);
        bounds = next;
      }
    }
    // Spark adds `key IS NOT NULL` beside `key = x`; the equality implies it, so taking it too
    // leaves Spark nothing to evaluate, which an aggregate needs to be pushed.
    (bounds.key != null || bounds.noKey ? taken : left).addAll(keyNotNull);
    return bounds;
  }

  private static boolean isKeyNotNull(Predicate p) {
    Expression[] children = p.children();
    return p.name().equals("IS_NOT_NULL")
        && children.length == 1
        && children[0] instanceof NamedReference
        && KEY.equals(columnName((NamedReference) children[0]));
  }

  private Bounds with(Predicate p) {
    Expression[] children = p.children();
    String op = p.name();
    if (children.length == 0 || !(children[0] instanceof NamedReference)) {
      if (children.length == 2 && children[1] instanceof NamedReference && children[0] instanceof Literal) {
        String flipped = flip(op);
        return flipped == null ? null : compare(flipped, (NamedReference) children[1], (Literal<?>) children[0]);
      }
      return null;
    }
    NamedReference column = (NamedReference) children[0];
    String name = columnName(column);
    if (name == null) {
      return null;
    }
    if (op.equals("IS_NOT_NULL") && children.length == 1) {
      return name.equals(KEY) ? null : this; // the other three columns are never null
    }
    if (op.equals("IN") && children.length > 1 && !name.equals(KEY)) {
      Set<Long> values = new TreeSet<>();
      for (Expression e : Arrays.copyOfRange(children, 1, children.length)) {
        if (!(e instanceof Literal)) {
          return null;
        }
        Range span = span(name, (Literal<?>) e);
        if (span == null) {
          return null;
        }
        if (span.hi == null || span.hi - span.lo == 1) { // matches only when exact at plateau's resolution
          values.add(span.lo);
        }
      }
      return withRange(name, range(name).only(values));
    }
    if (children.length == 2 && children[1] instanceof Literal) {
      return compare(op, column, (Literal<?>) children[1]);
    }
    return null;
  }

  private Bounds compare(String op, NamedReference column, Literal<?> literal) {
    String name = columnName(column);
    if (name == null) {
      return null;
    }
    if (name.equals(KEY)) {
      if (!(op.equals("=") || op.equals("<=>")) || !(literal.value() instanceof byte[])) {
        return null;
      }
      byte[] wanted = (byte[]) literal.value();
      boolean conflict = noKey || (key != null && !Arrays.equals(key, wanted));
      return new Bounds(partitions, offsets, times, wanted, conflict);
    }
    Range span = span(name, literal);
    if (span == null) {
      return null;
    }
    Long lo = span.lo;
    Long hi = span.hi; // the values v with lo <= v < hi compare equal to the literal
    Range current = range(name);
    switch (op) {
      case "=":
      case "<=>":
        return withRange(name, current.narrow(lo, hi));
      case ">":
        // hi null: the literal is Long.MAX_VALUE, and no value is greater.
        return withRange(name, hi == null ? Range.NONE : current.narrow(hi, null));
      case ">=":
        return withRange(name, current.narrow(lo, null));
      case "<":
        return withRange(name, current.narrow(null, lo));
      case "<=":
        return withRange(name, current.narrow(null, hi));
      default:
        return null;
    }
  }

  private static String flip(String op) {
    switch (op) {
      case "=":
      case "<=>":
        return op;
      case ">":
        return "<";
      case ">=":
        return "<=";
      case "<":
        return ">";
      case "<=":
        return ">=";
      default:
        return null;
    }
  }

  private static String columnName(NamedReference column) {
    String[] names = column.fieldNames();
    if (names.length != 1) {
      return null;
    }
    String name = names[0];
    return name.equals(PARTITION) || name.equals(OFFSET) || name.equals(TIMESTAMP) || name.equals(KEY)
        ? name
        : null;
  }

  /**
   * [lo, hi) in the manifest's unit of the values equal to the literal; hi is null (no bound)
   * for Long.MAX_VALUE, whose successor a long cannot hold. Spark's timestamps are
   * microseconds and plateau's milliseconds: a literal between two milliseconds equals none
   * (lo == hi), which keeps every comparison exact.
   */
  private static Range span(String column, Literal<?> literal) {
    Object value = literal.value();
    if (value == null) {
      return null;
    }
    if (column.equals(TIMESTAMP)) {
      if (!literal.dataType().equals(DataTypes.TimestampType) || !(value instanceof Long)) {
        return null;
      }
      long micros = (Long) value;
      long floor = Math.floorDiv(micros, 1000); // both ends without overflow at either extreme
      long ceiling = floor + (Math.floorMod(micros, 1000) == 0 ? 0 : 1);
      return new Range(ceiling, floor + 1, null);
    }
    if (value instanceof Integer || value instanceof Long || value instanceof Short || value instanceof Byte) {
      long v = ((Number) value).longValue();
      return new Range(v, Range.after(v), null);
    }
    return null;
  }

  private Range range(String column) {
    return column.equals(PARTITION) ? partitions : column.equals(OFFSET) ? offsets : times;
  }

  private Bounds withRange(String column, Range r) {
    switch (column) {
      case PARTITION:
        return new Bounds(r, offsets, times, key, noKey);
      case OFFSET:
        return new Bounds(partitions, r, times, key, noKey);
      default:
        return new Bounds(partitions, offsets, r, key, noKey);
    }
  }

  static List<String> describe(List<Predicate> predicates) {
    List<String> out = new ArrayList<>();
    for (Predicate p : predicates) {
      out.add(p.toString());
    }
    return out;
  }
}

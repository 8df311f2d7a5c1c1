package org.plateau.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;

/**
 * The equality and IN predicates of a query on columns a segment may keep bloom filters of: at
 * planning, a segment whose filter of such a column holds none of the values is not read. Taken
 * from every predicate Spark offers, whether plateau applies it or Spark does after the scan:
 * pruning a segment that holds no match changes no result either way.
 */
final class BloomProbes {
  static final BloomProbes NONE = new BloomProbes(List.of());

  /** One predicate: the column equals one of the values (each as {@link Bloom#candidate}). */
  record Probe(String column, List<Object> values) {}

  final List<Probe> probes;

  private BloomProbes(List<Probe> probes) {
    this.probes = probes;
  }

  /**
   * The probes of `predicates`, but on the `clashed` columns: their filters are of the types a
   * segment stores, not of the text the column reads as (bytes stored as such are read as base64).
   */
  static BloomProbes of(Predicate[] predicates, Set<String> clashed) {
    List<Probe> probes = new ArrayList<>();
    for (Predicate p : predicates) {
      Probe probe = probe(p);
      if (probe != null && !clashed.contains(probe.column())) {
        probes.add(probe);
      }
    }
    return new BloomProbes(probes);
  }

  boolean isEmpty() {
    return probes.isEmpty();
  }

  Set<String> columns() {
    Set<String> columns = new TreeSet<>();
    for (Probe p : probes) {
      columns.add(p.column());
    }
    return columns;
  }

  /** Whether a segment with these filters (by column) may hold a row every probe keeps. */
  boolean admits(Map<String, Bloom> filters) {
    if (filters == null) {
      return true;
    }
    for (Probe probe : probes) {
      Bloom bloom = filters.get(probe.column());
      if (bloom != null && probe.values().stream().noneMatch(bloom::mayContain)) {
        return false;
      }
    }
    return true;
  }

  private static Probe probe(Predicate p) {
    Expression[] children = p.children();
    String op = p.name();
    if ((op.equals("=") || op.equals("<=>")) && children.length == 2) {
      if (op.equals("<=>") && (isNull(children[0]) || isNull(children[1]))) {
        return null; // <=> NULL keeps the rows whose value is null: no filter can rule them out
      }
      if (children[0] instanceof NamedReference && children[1] instanceof Literal) {
        return make((NamedReference) children[0], new Expression[] {children[1]});
      }
      if (children[1] instanceof NamedReference && children[0] instanceof Literal) {
        return make((NamedReference) children[1], new Expression[] {children[0]});
      }
      return null;
    }
    if (op.equals("IN") && children.length > 1 && children[0] instanceof NamedReference) {
      Expression[] values = new Expression[children.length - 1];
      System.arraycopy(children, 1, values, 0, values.length);
      return make((NamedReference) children[0], values);
    }
    return null;
  }

  private static boolean isNull(Expression e) {
    return e instanceof Literal && ((Literal<?>) e).value() == null;
  }

  private static Probe make(NamedReference column, Expression[] literals) {
    String[] names = column.fieldNames();
    if (names.length != 1 || Bounds.PARTITION.equals(names[0]) || Bounds.OFFSET.equals(names[0])
        || Bounds.TIMESTAMP.equals(names[0])) {
      return null;
    }
    List<Object> values = new ArrayList<>();
    for (Expression e : literals) {
      if (!(e instanceof Literal)) {
        return null;
      }
      Object value = ((Literal<?>) e).value();
      if (value == null) {
        continue; // = NULL matches no row; IN (NULL, ...) only the others
      }
      Object candidate = Bloom.candidate(value);
      if (candidate == null) {
        return null; // a value no filter can judge: this predicate prunes nothing
      }
      values.add(candidate);
    }
    return new Probe(names[0], values);
  }
}

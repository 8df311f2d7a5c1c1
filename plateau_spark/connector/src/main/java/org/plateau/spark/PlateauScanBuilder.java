package org.plateau.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.SortDirection;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownTopN;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.types.StructType;

/**
 * One query's scan: Spark hands it the columns it needs, the predicates, a LIMIT and an
 * aggregate. A builder is made per query, so nothing pushed for one query leaks into another.
 */
final class PlateauScanBuilder
    implements ScanBuilder,
        SupportsPushDownRequiredColumns,
        SupportsPushDownV2Filters,
        SupportsPushDownLimit,
        SupportsPushDownTopN,
        SupportsPushDownAggregates {
  private final SourceOptions options;
  private final StructType full;
  private StructType required;
  private Bounds bounds = Bounds.NONE;
  private BloomProbes probes = BloomProbes.NONE;
  private final List<Predicate> pushed = new ArrayList<>();
  private long limit = -1;
  private TopN topN;
  private AggregateScan aggregate;

  PlateauScanBuilder(SourceOptions options, StructType schema) {
    this.options = options;
    this.full = schema;
    this.required = schema;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    this.required = requiredSchema;
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    if (!options.pushdown) {
      return predicates;
    }
    List<Predicate> left = new ArrayList<>();
    pushed.clear();
    bounds = Bounds.push(predicates, pushed, left);
    probes = BloomProbes.of(predicates, TopicSchema.clashed(full));
    return left.toArray(new Predicate[0]);
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushed.toArray(new Predicate[0]);
  }

  @Override
  public boolean pushLimit(int n) {
    if (!options.pushdown) {
      return false;
    }
    limit = n;
    return true;
  }

  /** Taken for one sort key, `timestamp` (never null in plateau), either direction. */
  @Override
  public boolean pushTopN(SortOrder[] orders, int n) {
    if (!options.pushdown || orders.length != 1) {
      return false;
    }
    SortOrder order = orders[0];
    if (!(order.expression() instanceof NamedReference)) {
      return false;
    }
    String[] names = ((NamedReference) order.expression()).fieldNames();
    if (names.length != 1 || !names[0].equals(Bounds.TIMESTAMP)) {
      return false;
    }
    topN = new TopN(order.direction() == SortDirection.DESCENDING, n);
    return true;
  }

  @Override
  public boolean isPartiallyPushed() {
    return true; // each task stops at the limit; Spark still takes the first n of all tasks
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return options.pushdown && AggregateScan.functions(aggregation) != null;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    if (!options.pushdown) {
      return false;
    }
    aggregate = AggregateScan.answer(options, bounds, probes, Bounds.describe(pushed), aggregation);
    return aggregate != null;
  }

  @Override
  public Scan build() {
    if (aggregate != null) {
      return aggregate;
    }
    return new PlateauScan(
        options, required, full, bounds, probes, Bounds.describe(pushed), limit, topN);
  }
}

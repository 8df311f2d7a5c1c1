package org.plateau.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * COUNT(*) and MIN/MAX of partition, offset and timestamp, grouped by nothing or by partition,
 * answered while Spark plans the query: one task returns the rows, reading nothing. Segments
 * the bounds cover whole count from their manifest rows alone; the rows of segments the bounds
 * cut are read here, on the driver, but only while that is at most `driverAggregateRows` rows
 * and `maxPartitionBytes` bytes (estimated as a task's share is): past it the aggregate is left
 * to Spark's tasks, which read in parallel.
 */
final class AggregateScan implements Scan, Batch {
  private static final String COUNT = "COUNT";
  private final String description;
  private final StructType schema;
  private final Rows rows;

  private AggregateScan(String description, StructType schema, Rows rows) {
    this.description = description;
    this.schema = schema;
    this.rows = rows;
  }

  /** {function, column} per aggregate, or null when plateau cannot answer one of them. */
  static String[][] functions(Aggregation aggregation) {
    for (Expression group : aggregation.groupByExpressions()) {
      if (!isColumn(group, Bounds.PARTITION)) {
        return null;
      }
    }
    if (aggregation.groupByExpressions().length > 1) {
      return null;
    }
    AggregateFunc[] funcs = aggregation.aggregateExpressions();
    String[][] out = new String[funcs.length][];
    for (int i = 0; i < funcs.length; i++) {
      AggregateFunc f = funcs[i];
      if (f instanceof CountStar) {
        out[i] = new String[] {COUNT, null};
      } else if (f instanceof Count) {
        Count c = (Count) f;
        Expression column = c.column();
        boolean never = column instanceof Literal && ((Literal<?>) column).value() != null;
        if (c.isDistinct() || !(never || isColumn(column, Bounds.PARTITION) || isColumn(column, Bounds.OFFSET)
            || isColumn(column, Bounds.TIMESTAMP))) {
          return null;
        }
        out[i] = new String[] {COUNT, null};
      } else if (f instanceof Min || f instanceof Max) {
        Expression column = f instanceof Min ? ((Min) f).column() : ((Max) f).column();
        String name = name(column);
        if (name == null || name.equals(Bounds.KEY)) {
          return null;
        }
        out[i] = new String[] {f instanceof Min ? "MIN" : "MAX", name};
      } else {
        return null;
      }
    }
    return out;
  }

  /**
   * The answer, or null when answering would read more than the options allow on the driver: a
   * segment the bounds cut needs its rows counted.
   */
  static AggregateScan answer(
      SourceOptions options,
      Bounds bounds,
      BloomProbes probes,
      List<String> filters,
      Aggregation aggregation) {
    String[][] funcs = functions(aggregation);
    if (funcs == null) {
      return null;
    }
    boolean grouped = aggregation.groupByExpressions().length == 1;
    List<Segment> admitted = List.of();
    if (!bounds.isEmpty()) {
      try (ManifestReader manifest = new ManifestReader(options)) {
        // A key's Bloom filters spare the segments that cannot hold it, as they spare tasks.
        admitted = manifest.admitted(options.topic, bounds, probes);
      }
    }
    long rowsToRead = 0;
    long bytesToRead = 0;
    int cut = 0;
    for (Segment s : admitted) {
      if (!bounds.covers(s)) {
        rowsToRead += SegmentGroup.rowsKept(s, bounds);
        bytesToRead += SegmentGroup.readBytes(s, bounds);
        cut++;
      }
    }
    // Every batch read is checked against its CRC, all its columns: past what one task would
    // read, the driver's one thread would take longer than the tasks, which run in parallel.
    if (rowsToRead > options.driverAggregateRows || (cut > 0 && bytesToRead > options.maxPartitionBytes)) {
      return null;
    }
    Map<Integer, AggregateFold> groups = new TreeMap<>();
    for (Segment s : admitted) {
      AggregateFold g = groups.computeIfAbsent(grouped ? s.partition() : 0, p -> new AggregateFold());
      if (bounds.covers(s)) {
        g.addWhole(s);
      } else {
        g.addRows(options, s, bounds);
      }
    }
    groups.values().removeIf(g -> g.count == 0); // a partition whose cut segments kept no row
    if (!grouped && groups.isEmpty()) {
      groups.put(0, null); // no rows: COUNT is 0, MIN/MAX null, one row all the same
    }
    List<StructField> fields = new ArrayList<>();
    if (grouped) {
      fields.add(new StructField(Bounds.PARTITION, DataTypes.IntegerType, false, Metadata.empty()));
    }
    AggregateFunc[] exprs = aggregation.aggregateExpressions();
    for (int i = 0; i < funcs.length; i++) {
      fields.add(new StructField(exprs[i].toString(), type(funcs[i]), !funcs[i][0].equals(COUNT), Metadata.empty()));
    }
    List<Object[]> rows = new ArrayList<>();
    for (Map.Entry<Integer, AggregateFold> e : groups.entrySet()) {
      List<Object> row = new ArrayList<>();
      if (grouped) {
        row.add(e.getKey());
      }
      for (String[] f : funcs) {
        row.add(value(f, e.getValue()));
      }
      rows.add(row.toArray());
    }
    String described =
        "PlateauAggregate[topic=" + options.topic + "] PushedAggregation: " + Arrays.toString(exprs)
            + ", PushedGroupBy: " + Arrays.toString(aggregation.groupByExpressions())
            + ", PushedFilters: " + filters + ", answered "
            + (cut == 0 ? "from the manifest" : "from the manifest and " + cut + " cut segments read at planning");
    return new AggregateScan(
        described, new StructType(fields.toArray(new StructField[0])), new Rows(rows));
  }

  private static DataType type(String[] f) {
    if (f[0].equals(COUNT)) {
      return DataTypes.LongType;
    }
    return f[1].equals(Bounds.PARTITION) ? DataTypes.IntegerType
        : f[1].equals(Bounds.OFFSET) ? DataTypes.LongType : DataTypes.TimestampType;
  }

  private static Object value(String[] f, AggregateFold g) {
    if (f[0].equals(COUNT)) {
      return g == null ? 0L : g.count;
    }
    if (g == null) {
      return null;
    }
    boolean min = f[0].equals("MIN");
    switch (f[1]) {
      case Bounds.PARTITION:
        return min ? g.minPartition : g.maxPartition;
      case Bounds.OFFSET:
        return min ? g.minOffset : g.maxOffset;
      default:
        return (min ? g.minTime : g.maxTime) * 1000L; // Spark's timestamps are microseconds
    }
  }

  private static String name(Expression e) {
    if (!(e instanceof NamedReference) || ((NamedReference) e).fieldNames().length != 1) {
      return null;
    }
    String n = ((NamedReference) e).fieldNames()[0];
    return n.equals(Bounds.PARTITION) || n.equals(Bounds.OFFSET) || n.equals(Bounds.TIMESTAMP) ? n : null;
  }

  private static boolean isColumn(Expression e, String column) {
    return column.equals(name(e));
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return description;
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return new InputPartition[] {rows};
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReadPlan(null, schema, Bounds.NONE, -1);
  }

  /** The answer's rows, computed at planning and shipped to one task. */
  static final class Rows implements InputPartition {
    final List<Object[]> values;

    Rows(List<Object[]> values) {
      this.values = values;
    }
  }

  static final class RowsReader implements PartitionReader<InternalRow> {
    private final List<Object[]> values;
    private int next = -1;

    RowsReader(Rows rows) {
      this.values = rows.values;
    }

    @Override
    public boolean next() {
      return ++next < values.size();
    }

    @Override
    public InternalRow get() {
      return new GenericInternalRow(values.get(next));
    }

    @Override
    public void close() {}
  }
}

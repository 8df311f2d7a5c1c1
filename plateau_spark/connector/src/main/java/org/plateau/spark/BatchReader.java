package org.plateau.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.HashSet;
import java.util.Set;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one task's segments as ColumnarBatches: the batches the footer index leaves, only the
 * columns the query needs (plus those its filters look at), rows filtered by a selection view.
 */
final class BatchReader implements PartitionReader<ColumnarBatch> {
  static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final ReadPlan plan;
  private final SegmentGroup group;
  private final Segment[] segments;
  private final BufferAllocator allocator;
  private final StructField[] output;
  private long remaining;
  private int next; // the next segment to open
  private SegmentFile file;
  private Bounds bounds; // the open segment's: the scan's, narrowed to the share of it read
  private VectorSchemaRoot root;
  private VectorLoader loader;
  private Set<String> keep;
  private int[] selected;
  private int position;
  private boolean filtered;
  private int batchesRead;
  private int batchesSkipped;
  private ColumnarBatch current;

  BatchReader(ReadPlan plan, SegmentGroup group) {
    this.plan = plan;
    this.group = group;
    this.segments = group.segments;
    this.allocator = ROOT.newChildAllocator("plateau-task", 0, Long.MAX_VALUE);
    this.output = plan.readSchema.fields();
    this.remaining = plan.limit < 0 ? Long.MAX_VALUE : plan.limit;
  }

  @Override
  public boolean next() throws IOException {
    while (remaining > 0) {
      if (file == null) {
        if (next >= segments.length) {
          return false;
        }
        bounds = group.boundsOf(next, plan.bounds);
        open(segments[next++]);
      } else if (position < selected.length) {
        int batch = selected[position++];
        try (ArrowRecordBatch body = file.batch(batch, keep)) {
          loader.load(body);
        }
        batchesRead++;
        boolean whole = file.batchCovered(batch, bounds);
        current = build(whole ? null : RowFilter.select(root, bounds));
        if (current != null) {
          return true;
        }
      } else {
        finish();
      }
    }
    return false;
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  private void open(Segment segment) {
    SegmentFile opened = SegmentFile.open(plan.options.segmentPath(segment.path()), segment, plan.options.topic);
    file = opened;
    filtered = !bounds.covers(segment);
    try {
      selected = file.checkedBatches(bounds, plan.options.topic);
    } catch (SegmentFile.SegmentException e) {
      file = null;
      throw e;
    }
    batchesSkipped = file.batchCount() - selected.length;
    checkTypes(segment);
    position = 0;
    keep = new HashSet<>();
    for (StructField f : output) {
      keep.add(f.name());
    }
    if (filtered) { // the columns the row filter looks at, whether or not the query returns them
      if (!bounds.offsets.isAll()) {
        keep.add(Bounds.OFFSET);
      }
      if (!bounds.times.isAll()) {
        keep.add(Bounds.TIMESTAMP);
      }
      if (bounds.key != null) {
        keep.add(Bounds.KEY);
      }
    }
    root = VectorSchemaRoot.create(file.kept(keep), allocator);
    loader = new VectorLoader(root, Codecs.FACTORY);
  }

  /**
   * Every column returned can be read as the type the query planned, before any row of the
   * segment is: the plan's schema was taken when the DataFrame was loaded (or the stream
   * started), and a segment sealed since may hold a column under a wider type.
   */
  private void checkTypes(Segment segment) {
    for (StructField f : output) {
      if (f.name().equals(Bounds.PARTITION)) {
        continue;
      }
      Field field = null;
      for (Field candidate : file.schema.getFields()) {
        if (candidate.getName().equals(f.name())) {
          field = candidate;
          break;
        }
      }
      if (field != null && !TopicSchema.clashed(f) && !TopicSchema.readable(field, f, plan.options.topic)
          && !clashesSinceLoad(field, f)) {
        file = null;
        throw new TopicSchema.ChangedTypeException(
            "topic '" + plan.options.topic + "', segment " + segment.path() + " (partition "
                + segment.partition() + ", offsets [" + segment.startOffset() + ", "
                + segment.endOffset() + ")): column '" + f.name() + "' is "
                + TopicSchema.describe(field) + " on disk, but the query was planned with "
                + f.dataType().simpleString() + ", its type when the DataFrame was loaded: a "
                + "segment sealed since widened it, and its values cannot be read as "
                + f.dataType().simpleString() + ". Load the DataFrame again (restart a "
                + "streaming query) to read the column as its widened type.");
      }
    }
  }

  /**
   * A column planned as text that a segment sealed since holds as another type (but binary, which
   * text widens to): a new load would read it as text too, the two types clashing.
   */
  private static boolean clashesSinceLoad(Field field, StructField planned) {
    ArrowType.ArrowTypeID id = field.getType().getTypeID();
    return planned.dataType().equals(DataTypes.StringType)
        && id != ArrowType.ArrowTypeID.Binary && id != ArrowType.ArrowTypeID.LargeBinary;
  }

  private void finish() {
    Segment segment = file.segment;
    if (root != null) {
      root.close();
    }
    root = null;
    file = null;
    if (plan.options.traceFile != null) {
      trace(segment);
    }
    batchesRead = 0;
    batchesSkipped = 0;
  }

  private ColumnarBatch build(int[] rows) {
    int loaded = root.getRowCount();
    int count = rows == null ? loaded : rows.length;
    if (count == 0) {
      return null;
    }
    ColumnVector[] columns = new ColumnVector[output.length];
    for (int c = 0; c < output.length; c++) {
      StructField f = output[c];
      ColumnVector column;
      if (f.name().equals(Bounds.PARTITION)) {
        column = new ConstantColumns.PartitionColumn(f.dataType(), file.segment.partition());
      } else {
        FieldVector vector = root.getVector(f.name());
        column =
            vector == null
                ? new ConstantColumns.NullColumn(f.dataType(), loaded)
                : ConvertedColumns.of(vector, f.dataType());
        if (rows != null) {
          int children = f.dataType() instanceof StructType ? ((StructType) f.dataType()).fields().length : 0;
          column = new SelectedColumn(column, rows, children);
        }
      }
      columns[c] = column;
    }
    int returned = (int) Math.min(count, remaining);
    remaining -= returned;
    return new ColumnarBatch(columns, returned);
  }

  private void trace(Segment segment) {
    trace(plan.options.traceFile, segment, batchesRead, batchesSkipped, false);
  }

  /**
   * One JSON line per segment opened, by a task or (`planning`) by an aggregate answered while
   * planning; one O_APPEND write keeps lines whole across tasks.
   */
  static void trace(String traceFile, Segment segment, int read, int skipped, boolean planning) {
    ObjectNode line = JSON.createObjectNode();
    line.put("segment", segment.path());
    line.put("partition", segment.partition());
    line.put("batches_read", read);
    line.put("batches_skipped", skipped);
    if (planning) {
      line.put("planning", true);
    }
    try {
      Files.write(
          Paths.get(traceFile),
          (JSON.writeValueAsString(line) + "\n").getBytes(StandardCharsets.UTF_8),
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND,
          StandardOpenOption.WRITE);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void close() {
    if (file != null) {
      finish();
    }
    allocator.close();
  }
}

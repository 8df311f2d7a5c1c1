package org.plateau.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
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
  private static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);
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
        long[] span = file.index == null ? null : file.index[batch];
        boolean whole = !filtered || (span != null && bounds.coversBatch(span[0], span[1], span[2], span[3]));
        current = build(whole ? null : selection());
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
    List<Integer> chosen = new ArrayList<>();
    for (int i = 0; i < file.batchCount(); i++) {
      long[] span = file.index == null ? null : file.index[i];
      if (filtered && span != null && !bounds.overlapsBatch(span[0], span[1], span[2], span[3])) {
        batchesSkipped++;
      } else {
        chosen.add(i);
      }
    }
    // Every batch about to be decoded is checked before the first row is returned: a task never
    // hands Spark rows of a segment that then turns out to be corrupt.
    for (int i : chosen) {
      String problem = file.batchProblem(i);
      if (problem != null) {
        file = null;
        throw new SegmentFile.SegmentException(
            "segment " + segment.path() + " (" + plan.options.topic + "[" + segment.partition()
                + "]) is corrupt: " + problem,
            null);
      }
    }
    checkTypes(segment);
    selected = chosen.stream().mapToInt(Integer::intValue).toArray();
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
    List<Field> fields = new ArrayList<>();
    for (Field f : file.schema.getFields()) {
      if (keep.contains(f.getName())) {
        fields.add(f);
      }
    }
    root = VectorSchemaRoot.create(new Schema(fields), allocator);
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

  /** The rows passing the bounds, as indices into the loaded batch. */
  private int[] selection() {
    int rows = root.getRowCount();
    Bounds b = bounds;
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

  private static long unitsPerMilli(FieldVector time) {
    if (!(time instanceof TimeStampVector)) {
      return 1;
    }
    TimeUnit unit = ((ArrowType.Timestamp) time.getField().getType()).getUnit();
    return unit == TimeUnit.MICROSECOND ? 1_000 : unit == TimeUnit.NANOSECOND ? 1_000_000 : 1;
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

  /** One JSON line per segment opened; one O_APPEND write keeps lines whole across tasks. */
  private void trace(Segment segment) {
    ObjectNode line = JSON.createObjectNode();
    line.put("segment", segment.path());
    line.put("partition", segment.partition());
    line.put("batches_read", batchesRead);
    line.put("batches_skipped", batchesSkipped);
    try {
      Files.write(
          Paths.get(plan.options.traceFile),
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

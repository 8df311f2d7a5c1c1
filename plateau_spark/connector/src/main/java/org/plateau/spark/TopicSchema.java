package org.plateau.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A topic's DataFrame schema: `partition`, then its segment schemas merged the way the store
 * merges them (fields united in first-seen order, types widened, all nullable but `offset`).
 * Arrow types Spark lacks are widened: unsigned integers grow (uint64 to decimal(20, 0), exact)
 * and timestamps of every unit become Spark's microseconds. A column stored with different
 * zones, or with and without one, is a timestamp (instants, naive values taken as UTC), as the
 * store reads it in UTC (plateau_core.schema). A column of a segment sealed before data fields
 * named like plateau's columns got a `_` suffix reads as the suffixed name ({@link StoredNames}).
 */
final class TopicSchema {
  /**
   * The metadata key of a roll-up's sum column ({@link #rollupSum}): the whole digits of the
   * integer sums its merged decimal keeps, so that a segment sealed since is checked against the
   * type a fresh load would give ({@link #readable(Field, StructField, String)}).
   */
  static final String SUM_WHOLE_DIGITS = "plateau.sum_whole_digits";

  private static final String ROLLUP = ".rollup.";
  private static final Pattern ROLLUP_LABEL = Pattern.compile("[1-9][0-9]*[smhd]");
  private static final int MAX_DIGITS = DecimalType.MAX_PRECISION();

  /** The metadata key of a column whose stored types clash: those types, as Spark names them. */
  static final String CLASH = "plateau.clashed_types";

  private static final Logger LOG = LoggerFactory.getLogger(TopicSchema.class);

  private TopicSchema() {}

  /** Whether the planned column is one whose stored types clash: it reads any type as text. */
  static boolean clashed(StructField column) {
    return column.metadata().contains(CLASH);
  }

  /** The columns of `schema` whose stored types clash. */
  static Set<String> clashed(StructType schema) {
    Set<String> names = new TreeSet<>();
    for (StructField f : schema.fields()) {
      if (clashed(f)) {
        names.add(f.name());
      }
    }
    return names;
  }

  /**
   * The schema; a column whose types cannot be merged (two workers each inferred a JSON field's
   * type: an int in one partition, a string in another) is a string column marked {@link
   * #CLASH} with its types, which reads the other types' values as their JSON text ({@link
   * JsonText}). Each such column is logged as a warning naming `topic`.
   */
  static StructType of(List<byte[]> segmentSchemas, String topic) {
    Map<String, StructField> merged = new LinkedHashMap<>();
    Map<String, Set<String>> types = new LinkedHashMap<>();
    Set<String> clashed = new LinkedHashSet<>();
    Map<String, int[]> sums = new LinkedHashMap<>();
    merged.put(Bounds.OFFSET, new StructField(Bounds.OFFSET, DataTypes.LongType, false, Metadata.empty()));
    merged.put(Bounds.TIMESTAMP, new StructField(Bounds.TIMESTAMP, DataTypes.TimestampType, true, Metadata.empty()));
    for (byte[] bytes : segmentSchemas) {
      for (Field field : readAs(bytes).getFields()) {
        DataType type = sparkType(field);
        String name = field.getName();
        types.computeIfAbsent(name, n -> new TreeSet<>()).add(type.simpleString());
        if (rollupSum(topic, name)) {
          sums.put(name, sumDigits(field, sums.getOrDefault(name, NO_SUMS)));
        }
        StructField known = merged.get(name);
        if (known == null) {
          merged.put(name, new StructField(name, type, true, Metadata.empty()));
        } else if (!name.equals(Bounds.OFFSET) && !name.equals(Bounds.TIMESTAMP) && !clashed.contains(name)) {
          DataType widened;
          try {
            widened = merge(name, known.dataType(), type);
          } catch (IllegalArgumentException e) {
            clashed.add(name);
            widened = DataTypes.StringType;
          }
          merged.put(name, new StructField(name, widened, true, Metadata.empty()));
        }
      }
    }
    for (Map.Entry<String, int[]> sum : sums.entrySet()) {
      String name = sum.getKey();
      int[] digits = sum.getValue();
      if (!clashed.contains(name) && digits != null && digits[2] > 0) {
        Metadata whole = new MetadataBuilder().putLong(SUM_WHOLE_DIGITS, digits[0]).build();
        merged.put(name, new StructField(name, sumType(digits), true, whole));
      }
    }
    for (String name : clashed) {
      String stored = String.join(", ", types.get(name));
      Metadata marked = new MetadataBuilder().putString(CLASH, stored).build();
      merged.put(name, new StructField(name, DataTypes.StringType, true, marked));
      LOG.warn(
          "topic '{}': column '{}' was stored as {} in different segments, which cannot be "
              + "merged: it reads as string, the other types' values as their JSON text",
          topic, name, stored);
    }
    List<StructField> fields = new ArrayList<>();
    fields.add(new StructField(Bounds.PARTITION, DataTypes.IntegerType, false, Metadata.empty()));
    fields.addAll(merged.values());
    return new StructType(fields.toArray(new StructField[0]));
  }

  /**
   * A manifest schema message with its columns named as they read ({@link StoredNames}): a
   * `partition` of a segment sealed before the `_` suffix rule as `partition_`.
   */
  static Schema readAs(byte[] message) {
    try {
      return StoredNames.readAs(parse(message));
    } catch (StoredNames.TwinColumnsException e) {
      throw new StoredNames.TwinColumnsException(e.twins, message);
    }
  }

  static Schema parse(byte[] message) {
    try {
      return MessageSerializer.deserializeSchema(
          new ReadChannel(Channels.newChannel(new ByteArrayInputStream(message))));
    } catch (IOException e) {
      throw new IllegalStateException("unreadable segment schema in the manifest: " + e.getMessage(), e);
    }
  }

  /**
   * Whether `column` of `topic` is named as a roll-up's sum (`sum_{col}` of a topic named
   * `{topic}.rollup.{label}`), as plateau_core.rollup.rollup_sum says.
   */
  static boolean rollupSum(String topic, String column) {
    int at = topic == null ? -1 : topic.lastIndexOf(ROLLUP);
    return column.startsWith("sum_") && at > 0
        && ROLLUP_LABEL.matcher(topic.substring(at + ROLLUP.length())).matches();
  }

  private static final int[] NO_SUMS = {0, 0, 0};

  /**
   * A roll-up sum column's stored types so far, `digits` ({whole digits of the integers, most
   * places of the 38-digit decimals, how many such decimals}, or null once a type that is
   * neither came), with `field`'s added: as plateau_core.schema_merge._sum_holding counts
   * them. A sum of decimals is Arrow's decimal(38, s) whatever digits its values take, one of
   * integers past int64 is decimal(38, 0): their 38 digits are no whole digits.
   */
  private static int[] sumDigits(Field field, int[] digits) {
    ArrowType type = field.getType();
    if (digits == null || type.getTypeID() == ArrowType.ArrowTypeID.Null) {
      return digits;
    }
    if (type instanceof ArrowType.Int) {
      // The whole digits of the type Spark reads it as, as the store counts them: uint64 is
      // decimal(20, 0), the others an integer type.
      int rank = integerRank(sparkType(field));
      int whole = rank > 0 ? INTEGER_DIGITS[rank] : 20;
      return new int[] {Math.max(digits[0], whole), digits[1], digits[2]};
    }
    if (type instanceof ArrowType.Decimal) {
      ArrowType.Decimal t = (ArrowType.Decimal) type;
      if (t.getPrecision() == MAX_DIGITS && t.getBitWidth() == 128) {
        return new int[] {digits[0], Math.max(digits[1], t.getScale()), digits[2] + 1};
      }
    }
    return null;
  }

  /**
   * The decimal a roll-up's sums of `digits` ({@link #sumDigits}) read as: the most places of
   * any, the whole digits of the integers beside them, and past 38 digits the places give way,
   * never the whole digits.
   */
  private static DecimalType sumType(int[] digits) {
    return DataTypes.createDecimalType(MAX_DIGITS, Math.min(digits[1], MAX_DIGITS - digits[0]));
  }

  /** The Spark type a segment column reads as (before merging with other segments). */
  static DataType sparkType(Field field) {
    ArrowType type = field.getType();
    switch (type.getTypeID()) {
      case Null:
        return DataTypes.NullType;
      case Bool:
        return DataTypes.BooleanType;
      case Int: {
        ArrowType.Int t = (ArrowType.Int) type;
        int bits = t.getBitWidth();
        if (t.getIsSigned()) {
          return bits == 8 ? DataTypes.ByteType : bits == 16 ? DataTypes.ShortType
              : bits == 32 ? DataTypes.IntegerType : DataTypes.LongType;
        }
        return bits == 8 ? DataTypes.ShortType : bits == 16 ? DataTypes.IntegerType
            : bits == 32 ? DataTypes.LongType : DataTypes.createDecimalType(20, 0);
      }
      case FloatingPoint:
        return ((ArrowType.FloatingPoint) type).getPrecision()
                == org.apache.arrow.vector.types.FloatingPointPrecision.DOUBLE
            ? DataTypes.DoubleType
            : DataTypes.FloatType;
      case Decimal: {
        ArrowType.Decimal t = (ArrowType.Decimal) type;
        return DataTypes.createDecimalType(t.getPrecision(), t.getScale());
      }
      case Utf8:
      case LargeUtf8:
        return DataTypes.StringType;
      case Binary:
      case LargeBinary:
        return DataTypes.BinaryType;
      case Date:
        return DataTypes.DateType;
      case Timestamp:
        return ((ArrowType.Timestamp) type).getTimezone() == null
            ? DataTypes.TimestampNTZType
            : DataTypes.TimestampType;
      case List:
      case LargeList: {
        Field element = field.getChildren().get(0);
        return DataTypes.createArrayType(sparkType(element), element.isNullable());
      }
      case Struct: {
        List<StructField> fields = new ArrayList<>();
        for (Field child : field.getChildren()) {
          fields.add(new StructField(child.getName(), sparkType(child), child.isNullable(), Metadata.empty()));
        }
        return new StructType(fields.toArray(new StructField[0]));
      }
      case Map: {
        Field entries = field.getChildren().get(0);
        Field key = entries.getChildren().get(0);
        Field value = entries.getChildren().get(1);
        return DataTypes.createMapType(sparkType(key), sparkType(value), value.isNullable());
      }
      default:
        throw new IllegalArgumentException(
            "column '" + field.getName() + "' has Arrow type " + type + ", which Spark cannot read");
    }
  }

  /** Whether Spark's ArrowColumnVector reads the Arrow column as `target` without conversion. */
  static boolean direct(Field field, DataType target) {
    ArrowType type = field.getType();
    switch (type.getTypeID()) {
      case Int:
        return ((ArrowType.Int) type).getIsSigned() && sparkType(field).equals(target);
      case FloatingPoint:
      case Decimal:
      case Utf8:
      case LargeUtf8:
      case Binary:
      case LargeBinary:
      case Bool:
      case Null:
        return sparkType(field).equals(target);
      case Date:
        return ((ArrowType.Date) type).getUnit() == org.apache.arrow.vector.types.DateUnit.DAY
            && target.equals(DataTypes.DateType);
      case Timestamp:
        return ((ArrowType.Timestamp) type).getUnit() == org.apache.arrow.vector.types.TimeUnit.MICROSECOND
            && sparkType(field).equals(target);
      case List:
        return target instanceof ArrayType
            && direct(field.getChildren().get(0), ((ArrayType) target).elementType());
      case Struct: {
        if (!(target instanceof StructType)) {
          return false;
        }
        StructField[] wanted = ((StructType) target).fields();
        List<Field> children = field.getChildren();
        if (wanted.length != children.size()) {
          return false;
        }
        for (int i = 0; i < wanted.length; i++) {
          if (!wanted[i].name().equals(children.get(i).getName())
              || !direct(children.get(i), wanted[i].dataType())) {
            return false;
          }
        }
        return true;
      }
      case Map: {
        if (!(target instanceof MapType)) {
          return false;
        }
        Field entries = field.getChildren().get(0);
        MapType map = (MapType) target;
        return direct(entries.getChildren().get(0), map.keyType())
            && direct(entries.getChildren().get(1), map.valueType());
      }
      default:
        return false;
    }
  }

  /**
   * Whether a segment's column can be read as the type a query planned: when merging the
   * column's type into the planned one gives the planned type, as a fresh load's merged schema
   * would (an int32 column under a bigint, an int64 under a double, a timestamp without a zone
   * under one with it). Otherwise its values would be reinterpreted or cut (a double's bits
   * read as a bigint, an int64 cut to an int): the plan was made before a later segment widened
   * the column. A column of nulls reads as any type; of a struct, the children the plan names
   * are checked (children it lacks are not read); nullability counts where Spark relies on it.
   */
  static boolean readable(Field field, DataType planned) {
    ArrowType type = field.getType();
    switch (type.getTypeID()) {
      case Null:
        return true;
      case Struct: {
        if (!(planned instanceof StructType)) {
          return false;
        }
        for (StructField wanted : ((StructType) planned).fields()) {
          Field child = null;
          for (Field c : field.getChildren()) {
            if (c.getName().equals(wanted.name())) {
              child = c;
              break;
            }
          }
          boolean ok =
              child == null
                  ? wanted.nullable()
                  : readable(child, wanted.dataType()) && (wanted.nullable() || !child.isNullable());
          if (!ok) {
            return false;
          }
        }
        return true;
      }
      case List:
      case LargeList: {
        if (!(planned instanceof ArrayType)) {
          return false;
        }
        ArrayType array = (ArrayType) planned;
        Field element = field.getChildren().get(0);
        return readable(element, array.elementType()) && (array.containsNull() || !element.isNullable());
      }
      case Map: {
        if (!(planned instanceof MapType)) {
          return false;
        }
        MapType map = (MapType) planned;
        Field entries = field.getChildren().get(0);
        Field value = entries.getChildren().get(1);
        return readable(entries.getChildren().get(0), map.keyType())
            && readable(value, map.valueType())
            && (map.valueContainsNull() || !value.isNullable());
      }
      default:
        try {
          return merge(field.getName(), planned, sparkType(field)).equals(planned);
        } catch (IllegalArgumentException e) {
          return false; // types that do not merge, or one Spark cannot read
        }
    }
  }

  /**
   * {@link #readable(Field, DataType)} for the planned column `planned` of `topic`: a roll-up's
   * sum planned as a decimal is readable when the segment's sums merged with those the plan
   * was made from ({@link #SUM_WHOLE_DIGITS}) give the planned type, as a fresh load would.
   */
  static boolean readable(Field field, StructField planned, String topic) {
    DataType type = planned.dataType();
    if (rollupSum(topic, planned.name()) && planned.metadata().contains(SUM_WHOLE_DIGITS)
        && type instanceof DecimalType && ((DecimalType) type).precision() == MAX_DIGITS) {
      int whole = (int) planned.metadata().getLong(SUM_WHOLE_DIGITS);
      int[] digits = sumDigits(field, new int[] {whole, ((DecimalType) type).scale(), 1});
      if (digits != null) {
        return sumType(digits).equals(type);
      }
    }
    return readable(field, type);
  }

  /** A segment column's type for a message: Spark's name for it, then Arrow's. */
  static String describe(Field field) {
    String arrow = field.getChildren().isEmpty() ? field.getType().toString() : field.toString();
    try {
      return sparkType(field).simpleString() + " (Arrow " + arrow + ")";
    } catch (IllegalArgumentException e) {
      return "Arrow " + arrow;
    }
  }

  private static int integerRank(DataType t) {
    if (t.equals(DataTypes.ByteType)) {
      return 1;
    }
    if (t.equals(DataTypes.ShortType)) {
      return 2;
    }
    if (t.equals(DataTypes.IntegerType)) {
      return 3;
    }
    if (t.equals(DataTypes.LongType)) {
      return 4;
    }
    return 0;
  }

  private static final int[] INTEGER_DIGITS = {0, 3, 5, 10, 19};

  /** One type for a column that had types a and b in different segments. */
  static DataType merge(String column, DataType a, DataType b) {
    if (a.equals(b)) {
      return a;
    }
    if (a.equals(DataTypes.NullType)) {
      return b;
    }
    if (b.equals(DataTypes.NullType)) {
      return a;
    }
    int ra = integerRank(a);
    int rb = integerRank(b);
    if (ra > 0 && rb > 0) {
      return ra >= rb ? a : b;
    }
    boolean fa = a.equals(DataTypes.FloatType) || a.equals(DataTypes.DoubleType);
    boolean fb = b.equals(DataTypes.FloatType) || b.equals(DataTypes.DoubleType);
    if ((fa || ra > 0) && (fb || rb > 0)) {
      return DataTypes.DoubleType;
    }
    if (a instanceof DecimalType || b instanceof DecimalType) {
      DecimalType da = asDecimal(a);
      DecimalType db = asDecimal(b);
      if (da != null && db != null) {
        // Every whole digit of both sides is kept, so that no value fails to fit (an int64
        // beside decimal(5, 2) is decimal(21, 2)); past Spark's 38 digits the places give
        // way, and a value reads rounded half up to those kept, as the store reads it.
        int whole = Math.max(da.precision() - da.scale(), db.precision() - db.scale());
        int scale = Math.min(Math.max(da.scale(), db.scale()), DecimalType.MAX_PRECISION() - whole);
        return DataTypes.createDecimalType(Math.max(1, whole + scale), scale);
      }
      // As the store's reader merges them (Arrow's permissive promotion): a decimal meeting a
      // float or a double becomes that floating type.
      if (fa || fb) {
        return fa ? a : b;
      }
    }
    // Avro promotes string to bytes; the store reads the column as binary, and so does Spark.
    if ((a.equals(DataTypes.StringType) || a.equals(DataTypes.BinaryType))
        && (b.equals(DataTypes.StringType) || b.equals(DataTypes.BinaryType))) {
      return DataTypes.BinaryType;
    }
    // A naive value's number is read as UTC microseconds (ConvertedColumns), as the store
    // reads such a column: in UTC, naive values taken as UTC.
    if ((a.equals(DataTypes.TimestampType) || a.equals(DataTypes.TimestampNTZType))
        && (b.equals(DataTypes.TimestampType) || b.equals(DataTypes.TimestampNTZType))) {
      return DataTypes.TimestampType;
    }
    if (a instanceof ArrayType && b instanceof ArrayType) {
      ArrayType x = (ArrayType) a;
      ArrayType y = (ArrayType) b;
      return DataTypes.createArrayType(merge(column, x.elementType(), y.elementType()), true);
    }
    if (a instanceof MapType && b instanceof MapType) {
      MapType x = (MapType) a;
      MapType y = (MapType) b;
      return DataTypes.createMapType(
          merge(column, x.keyType(), y.keyType()), merge(column, x.valueType(), y.valueType()), true);
    }
    if (a instanceof StructType && b instanceof StructType) {
      Map<String, StructField> fields = new LinkedHashMap<>();
      for (StructField f : ((StructType) a).fields()) {
        fields.put(f.name(), f.copy(f.name(), f.dataType(), true, f.metadata()));
      }
      for (StructField f : ((StructType) b).fields()) {
        StructField known = fields.get(f.name());
        DataType type = known == null ? f.dataType() : merge(column, known.dataType(), f.dataType());
        fields.put(f.name(), new StructField(f.name(), type, true, Metadata.empty()));
      }
      return new StructType(fields.values().toArray(new StructField[0]));
    }
    throw new IllegalArgumentException(
        "column '" + column + "' has types " + a.simpleString() + " and " + b.simpleString()
            + " in different segments, which cannot be merged");
  }

  /** A segment holds a column in a type the query's plan cannot read it as. */
  static final class ChangedTypeException extends IllegalStateException {
    ChangedTypeException(String message) {
      super(message);
    }
  }

  private static DecimalType asDecimal(DataType t) {
    if (t instanceof DecimalType) {
      return (DecimalType) t;
    }
    int rank = integerRank(t);
    return rank == 0 ? null : DataTypes.createDecimalType(INTEGER_DIGITS[rank], 0);
  }
}

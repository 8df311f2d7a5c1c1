package org.plateau.spark;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateMilliVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FixedSizeBinaryVector;
import org.apache.arrow.vector.LargeVarBinaryVector;
import org.apache.arrow.vector.LargeVarCharVector;
import org.apache.arrow.vector.NullVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.complex.LargeListVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.MapVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Arrow columns as Spark sees them, without copying: Spark's ArrowColumnVector where it reads
 * the Arrow type as the topic's type, else a view that widens each value as it is read
 * (millisecond timestamps, unsigned integers, a column widened by a later segment).
 */
final class ConvertedColumns {
  private ConvertedColumns() {}

  static ColumnVector of(ValueVector vector, DataType target) {
    if (TopicSchema.direct(vector.getField(), target)) {
      return new ArrowColumnVector(vector);
    }
    if (vector instanceof NullVector) {
      return new ConstantColumns.NullColumn(target, vector.getValueCount());
    }
    if (target.equals(DataTypes.StringType)) { // a column whose stored types clash
      return new JsonText.Column(vector);
    }
    if (target instanceof StructType && vector instanceof StructVector) {
      return new StructColumn((StructVector) vector, (StructType) target);
    }
    if (target instanceof MapType && vector instanceof MapVector) {
      return new MapColumn((MapVector) vector, (MapType) target);
    }
    if (target instanceof ArrayType && (vector instanceof ListVector || vector instanceof LargeListVector)) {
      return new ListColumn(vector, (ArrayType) target);
    }
    return new ScalarColumn(vector, target);
  }

  /** A column over one Arrow vector, whose nulls are the vector's. */
  abstract static class Wrapped extends BaseColumn {
    final ValueVector vector;

    Wrapped(ValueVector vector, DataType type) {
      super(type);
      this.vector = vector;
    }

    @Override
    public boolean hasNull() {
      return vector.getNullCount() > 0;
    }

    @Override
    public int numNulls() {
      return vector.getNullCount();
    }

    @Override
    public boolean isNullAt(int rowId) {
      return vector.isNull(rowId);
    }
  }

  private static final class ScalarColumn extends Wrapped {
    private static final int INT = 0;
    private static final int UINT = 1;
    private static final int FLOAT = 2;
    private static final int OTHER = 3;
    private final int kind;
    private final int width;
    private final ArrowBuf data;
    private final long multiply; // timestamps: to microseconds
    private final long divide;

    ScalarColumn(ValueVector vector, DataType type) {
      super(vector, type);
      ArrowType arrow = vector.getField().getType();
      long mul = 1;
      long div = 1;
      int k = OTHER;
      int w = 0;
      if (arrow instanceof ArrowType.Int) {
        ArrowType.Int t = (ArrowType.Int) arrow;
        k = t.getIsSigned() ? INT : UINT;
        w = t.getBitWidth() / 8;
      } else if (arrow instanceof ArrowType.FloatingPoint) {
        k = FLOAT;
        w = ((BaseFixedWidthVector) vector).getTypeWidth();
      } else if (vector instanceof TimeStampVector) {
        k = INT;
        w = 8;
        TimeUnit unit = ((ArrowType.Timestamp) arrow).getUnit();
        if (unit == TimeUnit.SECOND) {
          mul = 1_000_000L;
        } else if (unit == TimeUnit.MILLISECOND) {
          mul = 1_000L;
        } else if (unit == TimeUnit.NANOSECOND) {
          div = 1_000L;
        }
      } else if (vector instanceof DateMilliVector) {
        k = INT;
        w = 8;
        div = 86_400_000L;
      }
      this.kind = k;
      this.width = w;
      this.multiply = mul;
      this.divide = div;
      this.data = vector instanceof BaseFixedWidthVector ? ((BaseFixedWidthVector) vector).getDataBuffer() : null;
    }

    private long raw(int i) {
      long at = (long) i * width;
      switch (width) {
        case 1:
          return kind == UINT ? data.getByte(at) & 0xFFL : data.getByte(at);
        case 2:
          return kind == UINT ? data.getShort(at) & 0xFFFFL : data.getShort(at);
        case 4:
          return kind == UINT ? data.getInt(at) & 0xFFFFFFFFL : data.getInt(at);
        default:
          return data.getLong(at);
      }
    }

    private long integer(int i) {
      long v = raw(i);
      if (divide != 1) {
        return Math.floorDiv(v, divide);
      }
      if (multiply == 1) {
        return v;
      }
      try {
        return Math.multiplyExact(v, multiply);
      } catch (ArithmeticException e) {
        // Wrapped around, the product is another instant: the store's reader refuses it too.
        throw new ArithmeticException(
            "column '" + vector.getField().getName() + "' holds " + v + " "
                + ((ArrowType.Timestamp) vector.getField().getType()).getUnit()
                + " since the epoch, beyond the microseconds Spark's timestamps hold");
      }
    }

    @Override
    public boolean getBoolean(int rowId) {
      return ((BitVector) vector).get(rowId) == 1;
    }

    @Override
    public byte getByte(int rowId) {
      return (byte) integer(rowId);
    }

    @Override
    public short getShort(int rowId) {
      return (short) integer(rowId);
    }

    @Override
    public int getInt(int rowId) {
      return (int) integer(rowId);
    }

    @Override
    public long getLong(int rowId) {
      return integer(rowId);
    }

    @Override
    public double getDouble(int rowId) {
      if (vector instanceof DecimalVector) { // a decimal column a later segment made a double
        return ((DecimalVector) vector).getObject(rowId).doubleValue();
      }
      if (kind == FLOAT) {
        return width == 4 ? data.getFloat((long) rowId * 4) : data.getDouble((long) rowId * 8);
      }
      long v = integer(rowId);
      return kind == UINT && width == 8 && v < 0 ? unsigned(v).doubleValue() : v;
    }

    @Override
    public float getFloat(int rowId) {
      if (vector instanceof DecimalVector) { // rounded once, not through a double
        return ((DecimalVector) vector).getObject(rowId).floatValue();
      }
      return (float) getDouble(rowId);
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
      BigDecimal value;
      if (vector instanceof DecimalVector) {
        value = ((DecimalVector) vector).getObject(rowId);
      } else if (kind == UINT && width == 8) {
        value = new BigDecimal(unsigned(raw(rowId)));
      } else {
        value = BigDecimal.valueOf(integer(rowId));
      }
      Decimal d = Decimal.apply(value.setScale(scale, RoundingMode.HALF_UP));
      if (!d.changePrecision(precision, scale)) {
        // A roll-up's sum with more whole digits than the places beside it leave: read as
        // null, it was lost without a word; the store's reader refuses it too.
        throw new ArithmeticException(
            "column '" + vector.getField().getName() + "' holds " + value.toPlainString()
                + ", which the topic's merged type decimal(" + precision + ", " + scale
                + ") cannot hold");
      }
      return d;
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      if (vector instanceof VarCharVector) {
        return UTF8String.fromBytes(((VarCharVector) vector).get(rowId));
      }
      return UTF8String.fromBytes(((LargeVarCharVector) vector).get(rowId));
    }

    @Override
    public byte[] getBinary(int rowId) {
      if (vector instanceof VarCharVector) { // a string column a later segment made binary
        return ((VarCharVector) vector).get(rowId);
      }
      if (vector instanceof LargeVarCharVector) {
        return ((LargeVarCharVector) vector).get(rowId);
      }
      if (vector instanceof VarBinaryVector) {
        return ((VarBinaryVector) vector).get(rowId);
      }
      if (vector instanceof LargeVarBinaryVector) {
        return ((LargeVarBinaryVector) vector).get(rowId);
      }
      return ((FixedSizeBinaryVector) vector).get(rowId);
    }

    private static BigInteger unsigned(long v) {
      return new BigInteger(Long.toUnsignedString(v));
    }
  }

  private static final class StructColumn extends Wrapped {
    private final ColumnVector[] children;

    StructColumn(StructVector vector, StructType type) {
      super(vector, type);
      StructField[] fields = type.fields();
      children = new ColumnVector[fields.length];
      for (int i = 0; i < fields.length; i++) {
        ValueVector child = vector.getChild(fields[i].name());
        children[i] =
            child == null
                ? new ConstantColumns.NullColumn(fields[i].dataType(), vector.getValueCount())
                : of(child, fields[i].dataType());
      }
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      return children[ordinal];
    }
  }

  private static final class ListColumn extends Wrapped {
    private final ColumnVector elements;
    private final ArrowBuf offsets;
    private final boolean large;

    ListColumn(ValueVector vector, ArrayType type) {
      super(vector, type);
      large = vector instanceof LargeListVector;
      ValueVector data =
          large ? ((LargeListVector) vector).getDataVector() : ((ListVector) vector).getDataVector();
      offsets = vector.getOffsetBuffer();
      elements = of(data, type.elementType());
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      long start = large ? offsets.getLong((long) rowId * 8) : offsets.getInt((long) rowId * 4);
      long end = large ? offsets.getLong((long) (rowId + 1) * 8) : offsets.getInt((long) (rowId + 1) * 4);
      return new ColumnarArray(elements, (int) start, (int) (end - start));
    }
  }

  private static final class MapColumn extends Wrapped {
    private final ColumnVector keys;
    private final ColumnVector values;
    private final ArrowBuf offsets;

    MapColumn(MapVector vector, MapType type) {
      super(vector, type);
      StructVector entries = (StructVector) vector.getDataVector();
      keys = of(entries.getChildByOrdinal(0), type.keyType());
      values = of(entries.getChildByOrdinal(1), type.valueType());
      offsets = vector.getOffsetBuffer();
    }

    @Override
    public ColumnarMap getMap(int rowId) {
      int start = offsets.getInt((long) rowId * 4);
      int end = offsets.getInt((long) (rowId + 1) * 4);
      return new ColumnarMap(keys, values, start, end - start);
    }
  }
}

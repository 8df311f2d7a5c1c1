package org.plateau.spark;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;

/** Columns that hold one value for every row: the partition number, and nulls. */
final class ConstantColumns {
  private ConstantColumns() {}

  /** The `partition` column: the segment's Kafka partition in every row. */
  static final class PartitionColumn extends BaseColumn {
    private final int partition;

    PartitionColumn(DataType type, int partition) {
      super(type);
      this.partition = partition;
    }

    @Override
    public boolean hasNull() {
      return false;
    }

    @Override
    public int numNulls() {
      return 0;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return false;
    }

    @Override
    public int getInt(int rowId) {
      return partition;
    }

    @Override
    public long getLong(int rowId) {
      return partition;
    }
  }

  /** A column a segment does not have (added to the topic later): null in its rows. */
  static final class NullColumn extends BaseColumn {
    private final int rows;
    private final ColumnVector[] children;

    NullColumn(DataType type, int rows) {
      super(type);
      this.rows = rows;
      if (type instanceof StructType) {
        StructType struct = (StructType) type;
        children = new ColumnVector[struct.fields().length];
        for (int i = 0; i < children.length; i++) {
          children[i] = new NullColumn(struct.fields()[i].dataType(), rows);
        }
      } else {
        children = new ColumnVector[0];
      }
    }

    @Override
    public boolean hasNull() {
      return rows > 0;
    }

    @Override
    public int numNulls() {
      return rows;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return true;
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      return null;
    }

    @Override
    public ColumnarMap getMap(int rowId) {
      return null;
    }

    @Override
    public byte[] getBinary(int rowId) {
      return null;
    }

    @Override
    public org.apache.spark.unsafe.types.UTF8String getUTF8String(int rowId) {
      return null;
    }

    @Override
    public org.apache.spark.sql.types.Decimal getDecimal(int rowId, int precision, int scale) {
      return null;
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      return children[ordinal];
    }
  }
}

package org.plateau.spark;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The rows of a batch that pass plateau's filters, as a view: row i is row rows[i] of the
 * column underneath. Rows are never copied, so a filtered batch costs one int per kept row.
 */
final class SelectedColumn extends ColumnVector {
  private final ColumnVector inner;
  private final int[] rows;
  private final SelectedColumn[] children;

  SelectedColumn(ColumnVector inner, int[] rows, int childCount) {
    super(inner.dataType());
    this.inner = inner;
    this.rows = rows;
    this.children = new SelectedColumn[childCount];
  }

  @Override
  public void close() {}

  @Override
  public boolean hasNull() {
    return inner.hasNull();
  }

  @Override
  public int numNulls() {
    int nulls = 0;
    if (inner.hasNull()) {
      for (int row : rows) {
        nulls += inner.isNullAt(row) ? 1 : 0;
      }
    }
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return inner.isNullAt(rows[rowId]);
  }

  @Override
  public boolean getBoolean(int rowId) {
    return inner.getBoolean(rows[rowId]);
  }

  @Override
  public byte getByte(int rowId) {
    return inner.getByte(rows[rowId]);
  }

  @Override
  public short getShort(int rowId) {
    return inner.getShort(rows[rowId]);
  }

  @Override
  public int getInt(int rowId) {
    return inner.getInt(rows[rowId]);
  }

  @Override
  public long getLong(int rowId) {
    return inner.getLong(rows[rowId]);
  }

  @Override
  public float getFloat(int rowId) {
    return inner.getFloat(rows[rowId]);
  }

  @Override
  public double getDouble(int rowId) {
    return inner.getDouble(rows[rowId]);
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    return inner.getArray(rows[rowId]);
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    return inner.getMap(rows[rowId]);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return inner.getDecimal(rows[rowId], precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return inner.getUTF8String(rows[rowId]);
  }

  @Override
  public byte[] getBinary(int rowId) {
    return inner.getBinary(rows[rowId]);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    if (children[ordinal] == null) {
      ColumnVector child = inner.getChild(ordinal);
      int grandchildren = child.dataType() instanceof org.apache.spark.sql.types.StructType
          ? ((org.apache.spark.sql.types.StructType) child.dataType()).fields().length
          : 0;
      children[ordinal] = new SelectedColumn(child, rows, grandchildren);
    }
    return children[ordinal];
  }
}

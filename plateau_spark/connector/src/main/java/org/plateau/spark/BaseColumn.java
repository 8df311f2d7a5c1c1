package org.plateau.spark;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/** A ColumnVector whose getters fail unless a subclass gives them: each overrides its own. */
abstract class BaseColumn extends ColumnVector {
  BaseColumn(DataType type) {
    super(type);
  }

  private UnsupportedOperationException unsupported(String getter) {
    return new UnsupportedOperationException(getter + " on a " + dataType().simpleString() + " column");
  }

  @Override
  public void close() {}

  @Override
  public boolean getBoolean(int rowId) {
    throw unsupported("getBoolean");
  }

  @Override
  public byte getByte(int rowId) {
    throw unsupported("getByte");
  }

  @Override
  public short getShort(int rowId) {
    throw unsupported("getShort");
  }

  @Override
  public int getInt(int rowId) {
    throw unsupported("getInt");
  }

  @Override
  public long getLong(int rowId) {
    throw unsupported("getLong");
  }

  @Override
  public float getFloat(int rowId) {
    throw unsupported("getFloat");
  }

  @Override
  public double getDouble(int rowId) {
    throw unsupported("getDouble");
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw unsupported("getArray");
  }

  @Override
  public ColumnarMap getMap(int rowId) {
    throw unsupported("getMap");
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw unsupported("getDecimal");
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw unsupported("getUTF8String");
  }

  @Override
  public byte[] getBinary(int rowId) {
    throw unsupported("getBinary");
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw unsupported("getChild");
  }
}

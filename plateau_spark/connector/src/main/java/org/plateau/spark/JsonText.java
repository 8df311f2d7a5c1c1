package org.plateau.spark;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.BaseIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DateMilliVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
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
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Values as JSON text, character for character as plateau_core/json_text.py writes them: how a
 * column whose stored types clash (an int in some segments, a string in others) reads, as one
 * string column. Strings stay as they are (inside a list or struct, quoted and escaped as
 * Python's json.dumps escapes them), integers and decimals in plain digits, doubles as Python's
 * repr (the shortest digits that read back as the same double; NaN, Infinity, -Infinity),
 * booleans as true/false, binary in base64, dates and timestamps in ISO 8601 (UTC, `Z` when the
 * type has a zone), lists as arrays and structs and maps as objects, without spaces.
 */
final class JsonText {
  private JsonText() {}

  /** A segment's column read as text: its values' JSON text, nulls null. */
  static final class Column extends ConvertedColumns.Wrapped {
    Column(ValueVector vector) {
      super(vector, DataTypes.StringType);
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      return UTF8String.fromString(text(vector, rowId));
    }
  }

  /** The text of row `i`, written at the top of a column (strings, dates and times unquoted). */
  static String text(ValueVector v, int i) {
    if (v instanceof VarCharVector || v instanceof LargeVarCharVector || v instanceof TimeStampVector
        || v instanceof DateDayVector || v instanceof DateMilliVector || v instanceof VarBinaryVector
        || v instanceof LargeVarBinaryVector) {
      return quotable(v, i);
    }
    StringBuilder out = new StringBuilder();
    write(out, v, i);
    return out.toString();
  }

  private static void write(StringBuilder out, ValueVector v, int i) {
    if (v instanceof NullVector || v.isNull(i)) {
      out.append("null");
    } else if (v instanceof BitVector) {
      out.append(((BitVector) v).get(i) == 1 ? "true" : "false");
    } else if (v instanceof Float4Vector) {
      out.append(shortest(((Float4Vector) v).get(i)));
    } else if (v instanceof Float8Vector) {
      out.append(shortest(((Float8Vector) v).get(i)));
    } else if (v instanceof DecimalVector) {
      out.append(((DecimalVector) v).getObject(i).toPlainString());
    } else if (v instanceof BaseIntVector) {
      out.append(integer(v, i));
    } else if (v instanceof StructVector) {
      StructVector struct = (StructVector) v;
      out.append('{');
      List<FieldVector> children = struct.getChildrenFromFields();
      for (int c = 0; c < children.size(); c++) {
        if (c > 0) {
          out.append(',');
        }
        quote(out, children.get(c).getName());
        out.append(':');
        write(out, children.get(c), i);
      }
      out.append('}');
    } else if (v instanceof MapVector) {
      MapVector map = (MapVector) v;
      StructVector entries = (StructVector) map.getDataVector();
      ValueVector keys = entries.getChildByOrdinal(0);
      ValueVector values = entries.getChildByOrdinal(1);
      ArrowBuf offsets = map.getOffsetBuffer();
      int start = offsets.getInt((long) i * 4);
      int end = offsets.getInt((long) (i + 1) * 4);
      out.append('{');
      for (int j = start; j < end; j++) {
        if (j > start) {
          out.append(',');
        }
        quote(out, text(keys, j)); // Arrow's map keys are never null
        out.append(':');
        write(out, values, j);
      }
      out.append('}');
    } else if (v instanceof ListVector || v instanceof LargeListVector) {
      boolean large = v instanceof LargeListVector;
      ValueVector items = large ? ((LargeListVector) v).getDataVector() : ((ListVector) v).getDataVector();
      ArrowBuf offsets = v.getOffsetBuffer();
      long start = large ? offsets.getLong((long) i * 8) : offsets.getInt((long) i * 4);
      long end = large ? offsets.getLong((long) (i + 1) * 8) : offsets.getInt((long) (i + 1) * 4);
      out.append('[');
      for (long j = start; j < end; j++) {
        if (j > start) {
          out.append(',');
        }
        write(out, items, (int) j);
      }
      out.append(']');
    } else {
      quote(out, quotable(v, i));
    }
  }

  private static String integer(ValueVector v, int i) {
    long value = ((BaseIntVector) v).getValueAsLong(i);
    ArrowType.Int type = (ArrowType.Int) v.getField().getType();
    if (type.getIsSigned()) {
      return Long.toString(value);
    }
    int bits = type.getBitWidth();
    return bits == 64 ? Long.toUnsignedString(value) : Long.toString(value & ((1L << bits) - 1));
  }

  /** The text of a value JSON holds as a string: text, binary, a date or a timestamp. */
  private static String quotable(ValueVector v, int i) {
    if (v instanceof VarCharVector) {
      return new String(((VarCharVector) v).get(i), StandardCharsets.UTF_8);
    }
    if (v instanceof LargeVarCharVector) {
      return new String(((LargeVarCharVector) v).get(i), StandardCharsets.UTF_8);
    }
    if (v instanceof VarBinaryVector) {
      return Base64.getEncoder().encodeToString(((VarBinaryVector) v).get(i));
    }
    if (v instanceof LargeVarBinaryVector) {
      return Base64.getEncoder().encodeToString(((LargeVarBinaryVector) v).get(i));
    }
    if (v instanceof DateDayVector) {
      return date(((DateDayVector) v).get(i));
    }
    if (v instanceof DateMilliVector) {
      return date(Math.floorDiv(((DateMilliVector) v).get(i), 86_400_000L));
    }
    if (v instanceof TimeStampVector) {
      ArrowType.Timestamp type = (ArrowType.Timestamp) v.getField().getType();
      int digits = type.getUnit() == TimeUnit.SECOND ? 0
          : type.getUnit() == TimeUnit.MILLISECOND ? 3
          : type.getUnit() == TimeUnit.MICROSECOND ? 6 : 9;
      String zone = type.getTimezone() == null ? "" : "Z";
      return timestamp(((TimeStampVector) v).get(i), digits) + zone;
    }
    throw new IllegalArgumentException("no JSON text for Arrow type " + v.getField().getType());
  }

  /** The digits Python's repr gives: the shortest that read back as `value`, in its layout. */
  static String shortest(double value) {
    if (Double.isNaN(value)) {
      return "NaN";
    }
    if (Double.isInfinite(value)) {
      return value > 0 ? "Infinity" : "-Infinity";
    }
    if (value == 0) {
      return 1 / value < 0 ? "-0.0" : "0.0";
    }
    BigDecimal exact = new BigDecimal(value);
    BigDecimal found = exact;
    for (int precision = 1; precision <= 17; precision++) {
      BigDecimal rounded = exact.round(new MathContext(precision, RoundingMode.HALF_EVEN));
      if (rounded.doubleValue() == value) {
        found = rounded;
        break;
      }
    }
    found = found.stripTrailingZeros();
    String digits = found.unscaledValue().abs().toString();
    int point = digits.length() - found.scale(); // value = 0.digits * 10^point
    String sign = found.signum() < 0 ? "-" : "";
    if (point > -4 && point <= 16) {
      if (point <= 0) {
        return sign + "0." + "0".repeat(-point) + digits;
      }
      if (point >= digits.length()) {
        return sign + digits + "0".repeat(point - digits.length()) + ".0";
      }
      return sign + digits.substring(0, point) + "." + digits.substring(point);
    }
    int exponent = point - 1;
    String mantissa = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
    return sign + mantissa + "e" + (exponent < 0 ? "-" : "+")
        + (Math.abs(exponent) < 10 ? "0" : "") + Math.abs(exponent);
  }

  private static String date(long days) {
    long[] civil = civil(days);
    return pad(civil[0], 4) + "-" + pad(civil[1], 2) + "-" + pad(civil[2], 2);
  }

  private static String timestamp(long value, int digits) {
    long scale = 1;
    for (int d = 0; d < digits; d++) {
      scale *= 10;
    }
    long seconds = Math.floorDiv(value, scale);
    long fraction = Math.floorMod(value, scale);
    long days = Math.floorDiv(seconds, 86_400L);
    long second = Math.floorMod(seconds, 86_400L);
    String text = date(days) + "T" + pad(second / 3600, 2) + ":" + pad(second / 60 % 60, 2) + ":"
        + pad(second % 60, 2);
    return digits == 0 ? text : text + "." + pad(fraction, digits);
  }

  /** As Python's f"{n:0{width}d}": zero-padded to `width` characters, a sign included. */
  private static String pad(long n, int width) {
    String digits = Long.toString(Math.abs(n));
    int zeros = width - digits.length() - (n < 0 ? 1 : 0);
    return (n < 0 ? "-" : "") + "0".repeat(Math.max(0, zeros)) + digits;
  }

  /** {year, month, day} of a day number since 1970-01-01 (Howard Hinnant's civil_from_days). */
  private static long[] civil(long days) {
    long z = days + 719_468;
    long era = Math.floorDiv(z, 146_097);
    long doe = z - era * 146_097;
    long yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long mp = (5 * doy + 2) / 153;
    long day = doy - (153 * mp + 2) / 5 + 1;
    long month = mp < 10 ? mp + 3 : mp - 9;
    return new long[] {yoe + era * 400 + (month <= 2 ? 1 : 0), month, day};
  }

  /** `text` as a JSON string, escaped as Python's json.dumps(text, ensure_ascii=False). */
  private static void quote(StringBuilder out, String text) {
    out.append('"');
    for (int k = 0; k < text.length(); k++) {
      char c = text.charAt(k);
      switch (c) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\r':
          out.append("\\r");
          break;
        case '\t':
          out.append("\\t");
          break;
        case '\b':
          out.append("\\b");
          break;
        case '\f':
          out.append("\\f");
          break;
        default:
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }
}

package org.plateau.spark;

import java.io.Serializable;
import net.jpountz.xxhash.XXHash64;
import net.jpountz.xxhash.XXHashFactory;

/**
 * A segment's bloom filter of one column, in the layout plateau_core/bloom.py writes (version 1):
 * xxHash64 (seed 0) of the value's canonical bytes, h1 its low and h2 its high 32 bits, bit
 * positions (h1 + i * h2) mod m for i below k, bit b being bit (b mod 8) of byte b / 8.
 * Canonical bytes: a string's UTF-8 bytes, a byte string itself, an integer as 8 bytes of int64,
 * little-endian. The Python side builds filters and this side only probes them; the two must
 * agree bit for bit, which tests/spark/test_bloom_pruning.py checks through this class.
 */
public final class Bloom implements Serializable {
  // The pure-Java instance: the same hash as the native one, without loading a JNI library into
  // the driver for a few probes.
  private static final XXHash64 XXH64 = XXHashFactory.safeInstance().hash64();

  final String kind; // "int" or "bytes"
  final int hashes;
  final byte[] bits;

  Bloom(String kind, int hashes, byte[] bits) {
    this.kind = kind;
    this.hashes = hashes;
    this.bits = bits;
  }

  /**
   * False only when no value equal to `value` was added. `value` is a Java form of a Spark
   * literal (see {@link #candidate}); one this filter cannot judge is reported as present.
   */
  boolean mayContain(Object value) {
    byte[] raw = canonical(kind, value);
    return raw == null || mayContain(bits, hashes, raw);
  }

  /** xxHash64 with seed 0 of `raw`. */
  public static long hash(byte[] raw) {
    return XXH64.hash(raw, 0, raw.length, 0L);
  }

  /** Whether a filter of `bits` with `hashes` positions per value may hold `raw`. */
  public static boolean mayContain(byte[] bits, int hashes, byte[] raw) {
    long m = bits.length * 8L;
    if (m == 0) {
      return true;
    }
    long h = hash(raw);
    long low = h & 0xFFFFFFFFL;
    long high = h >>> 32;
    for (int i = 0; i < hashes; i++) {
      long position = (low + i * high) % m; // below 2^37: no overflow, never negative
      if ((bits[(int) (position >>> 3)] & (1 << (int) (position & 7))) == 0) {
        return false;
      }
    }
    return true;
  }

  /** The canonical bytes of `value` for a filter of `kind`, or null when it cannot hold it. */
  public static byte[] canonical(String kind, Object value) {
    if (kind.equals("int")) {
      if (!(value instanceof Long)) {
        return null;
      }
      long v = (Long) value;
      byte[] out = new byte[8];
      for (int i = 0; i < 8; i++) {
        out[i] = (byte) (v >>> (8 * i));
      }
      return out;
    }
    return value instanceof byte[] ? (byte[]) value : null;
  }

  /**
   * The form a Spark literal's value is probed as: a Long for an integral number, the bytes of a
   * string (UTF-8) or binary; null for anything else (then no segment is ruled out by it).
   */
  static Object candidate(Object literal) {
    if (literal instanceof Long || literal instanceof Integer || literal instanceof Short
        || literal instanceof Byte) {
      return ((Number) literal).longValue();
    }
    if (literal instanceof org.apache.spark.unsafe.types.UTF8String) {
      return ((org.apache.spark.unsafe.types.UTF8String) literal).getBytes();
    }
    if (literal instanceof String) {
      return ((String) literal).getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }
    if (literal instanceof byte[]) {
      return literal;
    }
    return null;
  }
}

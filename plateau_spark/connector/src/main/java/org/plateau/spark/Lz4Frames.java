package org.plateau.spark;

import static org.apache.arrow.memory.util.MemoryUtil.copyMemory;
import static org.apache.arrow.memory.util.MemoryUtil.getByte;
import static org.apache.arrow.memory.util.MemoryUtil.getInt;
import static org.apache.arrow.memory.util.MemoryUtil.putByte;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.compression.AbstractCompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;

/**
 * LZ4 frames, as Arrow writes compressed buffers, decoded from memory into memory.
 *
 * <p>Arrow's own codec goes through commons-compress streams (copies into and out of the heap
 * for every buffer), and lz4-java's frame reader refuses linked blocks, which is what Arrow
 * C++ writes. A frame's blocks are decoded one after another into the one output buffer, so a
 * block's matches may reach back into the blocks before it, as the format allows.
 */
final class Lz4Frames extends AbstractCompressionCodec {
  static final Lz4Frames INSTANCE = new Lz4Frames();
  private static final int MAGIC = 0x184D2204;
  private static final int SKIPPABLE_MASK = 0xFFFFFFF0;
  private static final int SKIPPABLE = 0x184D2A50;

  private Lz4Frames() {}

  @Override
  protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressed) {
    throw new UnsupportedOperationException("plateau's connector only reads segments");
  }

  @Override
  protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressed) {
    long length = readUncompressedLength(compressed);
    ArrowBuf out = allocator.buffer(length);
    try {
      long start = compressed.memoryAddress() + CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      long end = compressed.memoryAddress() + compressed.writerIndex();
      long written = frames(start, end, out.memoryAddress(), out.memoryAddress() + length);
      if (written != out.memoryAddress() + length) {
        throw new IllegalStateException(
            "an lz4 buffer decoded to " + (written - out.memoryAddress()) + " bytes, " + length + " expected");
      }
    } catch (RuntimeException e) {
      out.close();
      throw e;
    }
    out.writerIndex(length);
    return out;
  }

  @Override
  public CompressionUtil.CodecType getCodecType() {
    return CompressionUtil.CodecType.LZ4_FRAME;
  }

  /** Decodes the frames in [ip, ipEnd) to [op, opEnd); returns where the output ends. */
  static long frames(long ip, long ipEnd, long op, long opEnd) {
    long opStart = op;
    while (ip < ipEnd) {
      int magic = getInt(ip);
      ip += 4;
      if ((magic & SKIPPABLE_MASK) == SKIPPABLE) {
        ip += 4 + (getInt(ip) & 0xFFFFFFFFL);
        continue;
      }
      if (magic != MAGIC) {
        throw malformed("no lz4 frame magic");
      }
      int flags = getByte(ip) & 0xFF;
      ip += 2; // flags and block descriptor
      if ((flags >>> 6) != 1) {
        throw malformed("lz4 frame version " + (flags >>> 6));
      }
      boolean blockChecksums = (flags & 0x10) != 0;
      ip += ((flags & 0x08) != 0 ? 8 : 0) + ((flags & 0x01) != 0 ? 4 : 0) + 1; // size, dict, header crc
      while (true) {
        if (ip + 4 > ipEnd) {
          throw malformed("lz4 frame ends inside a block header");
        }
        int size = getInt(ip);
        ip += 4;
        if (size == 0) {
          break;
        }
        boolean stored = (size & 0x80000000) != 0;
        size &= 0x7FFFFFFF;
        if (ip + size > ipEnd) {
          throw malformed("lz4 block past the end of its buffer");
        }
        if (stored) {
          if (op + size > opEnd) {
            throw malformed("lz4 output larger than announced");
          }
          copyMemory(ip, op, size);
          op += size;
        } else {
          op = block(ip, ip + size, op, opStart, opEnd);
        }
        ip += size + (blockChecksums ? 4 : 0);
      }
      ip += (flags & 0x04) != 0 ? 4 : 0; // content checksum
    }
    return op;
  }

  /** One LZ4 block: literal runs and matches, which may reach back to opStart. */
  static long block(long ip, long ipEnd, long op, long opStart, long opEnd) {
    while (ip < ipEnd) {
      int token = getByte(ip++) & 0xFF;
      long literals = token >>> 4;
      if (literals == 15) {
        int b;
        do {
          b = getByte(ip++) & 0xFF;
          literals += b;
        } while (b == 255);
      }
      if (ip + literals > ipEnd || op + literals > opEnd) {
        throw malformed("lz4 literals past the end");
      }
      copyMemory(ip, op, literals);
      ip += literals;
      op += literals;
      if (ip >= ipEnd) {
        break; // the last sequence holds literals only
      }
      int offset = (getByte(ip) & 0xFF) | ((getByte(ip + 1) & 0xFF) << 8);
      ip += 2;
      long match = op - offset;
      if (offset == 0 || match < opStart) {
        throw malformed("lz4 match before the start of the output");
      }
      long length = token & 0x0F;
      if (length == 15) {
        int b;
        do {
          b = getByte(ip++) & 0xFF;
          length += b;
        } while (b == 255);
      }
      length += 4;
      if (op + length > opEnd) {
        throw malformed("lz4 match past the end of the output");
      }
      if (offset >= length) {
        copyMemory(match, op, length);
      } else {
        for (long i = 0; i < length; i++) { // overlapping: repeats the last `offset` bytes
          putByte(op + i, getByte(match + i));
        }
      }
      op += length;
    }
    return op;
  }

  private static IllegalStateException malformed(String problem) {
    return new IllegalStateException("malformed lz4 data in a segment: " + problem);
  }
}

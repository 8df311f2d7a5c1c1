package org.plateau.spark;

import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;

/** Decompression of segment buffers: lz4 by Lz4Frames, zstd by Arrow's codec over zstd-jni (both
 * jars ship with Spark). */
final class Codecs implements CompressionCodec.Factory {
  static final Codecs FACTORY = new Codecs();

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType type) {
    if (type == CompressionUtil.CodecType.NO_COMPRESSION) {
      return NoCompressionCodec.INSTANCE;
    }
    if (type == CompressionUtil.CodecType.LZ4_FRAME) {
      return Lz4Frames.INSTANCE;
    }
    return CommonsCompressionFactory.INSTANCE.createCodec(type);
  }

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType type, int level) {
    return createCodec(type);
  }
}

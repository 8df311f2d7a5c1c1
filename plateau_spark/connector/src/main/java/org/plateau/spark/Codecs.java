package org.plateau.spark;

import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;

/** Decompression of segment buffers: lz4 and zstd through the codecs Spark ships. */
final class Codecs implements CompressionCodec.Factory {
  static final Codecs FACTORY = new Codecs();

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType type) {
    if (type == CompressionUtil.CodecType.NO_COMPRESSION) {
      return NoCompressionCodec.INSTANCE;
    }
    return CommonsCompressionFactory.INSTANCE.createCodec(type);
  }

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType type, int level) {
    return createCodec(type);
  }
}

package org.plateau.spark;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.OwnershipTransferResult;
import org.apache.arrow.memory.ReferenceManager;

/**
 * Arrow buffers over a memory-mapped segment file. The mapping is owned by the SegmentFile
 * (unmapped when it is dropped), so counting references is moot; what this adds over Arrow's
 * NO_OP manager is slicing: a derived buffer is the slice asked for, not the whole body.
 */
final class MappedMemory implements ReferenceManager {
  static final MappedMemory INSTANCE = new MappedMemory();

  private MappedMemory() {}

  static ArrowBuf buffer(long address, long length) {
    ArrowBuf buf = new ArrowBuf(INSTANCE, null, length, address);
    buf.writerIndex(length); // codecs read a buffer up to its writer index
    return buf;
  }

  @Override
  public int getRefCount() {
    return 1;
  }

  @Override
  public boolean release() {
    return false;
  }

  @Override
  public boolean release(int decrement) {
    return false;
  }

  @Override
  public void retain() {}

  @Override
  public void retain(int increment) {}

  @Override
  public ArrowBuf retain(ArrowBuf source, BufferAllocator allocator) {
    return source;
  }

  @Override
  public ArrowBuf deriveBuffer(ArrowBuf source, long index, long length) {
    return new ArrowBuf(this, null, length, source.memoryAddress() + index);
  }

  @Override
  public OwnershipTransferResult transferOwnership(ArrowBuf source, BufferAllocator target) {
    throw new UnsupportedOperationException("buffers of a mapped segment file stay with it");
  }

  @Override
  public BufferAllocator getAllocator() {
    return null;
  }

  @Override
  public long getSize() {
    return 0;
  }

  @Override
  public long getAccountedSize() {
    return 0;
  }
}

package org.plateau.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32;
import org.apache.arrow.flatbuf.Footer;
import org.apache.arrow.flatbuf.Message;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.flatbuf.RecordBatch;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.ipc.message.ArrowBlock;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowFooter;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * One segment file, memory-mapped: checked against its manifest row (size, then CRC32s of its
 * regions), its footer's per-batch index read, and record batches handed out with only the
 * columns asked for. Batch bodies are read in place from the mapping; only compressed buffers
 * are decompressed into Arrow memory.
 */
final class SegmentFile {
  static final String BATCH_INDEX_KEY = "plateau.batches";
  private static final ObjectMapper JSON = new ObjectMapper();

  final Segment segment;
  final Schema schema;
  final long[][] index; // per batch {first offset, last offset, min time, max time}, or null
  private final MappedByteBuffer map; // kept referenced: unmapped only when this is dropped
  private final long address;
  private final List<ArrowBlock> blocks;
  private final long[][] batchCrcs; // per batch {position, length, crc}, or null

  private SegmentFile(Segment segment, MappedByteBuffer map, String where) throws IOException {
    this.segment = segment;
    this.map = map;
    this.address = MemoryUtil.getByteBufferAddress(map);
    long size = map.capacity();
    JsonNode sums = checksums(segment, where);
    if (sums != null) {
      long[][] crcs = new long[sums.get("batches").size()][];
      for (int i = 0; i < crcs.length; i++) {
        JsonNode b = sums.get("batches").get(i);
        crcs[i] = new long[] {b.get(0).asLong(), b.get(1).asLong(), b.get(2).asLong()};
      }
      this.batchCrcs = crcs;
      checkEnds(sums.get("head").asLong(), sums.get("tail").asLong(), size, where);
    } else {
      this.batchCrcs = null;
    }
    ByteBuffer tail = map.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    int footerLength = tail.getInt((int) size - 10);
    ByteBuffer footerBytes = slice((int) (size - 10 - footerLength), footerLength);
    ArrowFooter footer = new ArrowFooter(Footer.getRootAsFooter(footerBytes));
    try {
      // Named as the columns read: the plan and the scan's filters use those names.
      this.schema = StoredNames.readAs(footer.getSchema());
    } catch (StoredNames.TwinColumnsException e) {
      throw new SegmentException(e.at(where), null);
    }
    this.blocks = footer.getRecordBatches();
    if (batchCrcs != null && batchCrcs.length != blocks.size()) {
      throw corrupt(where, "the file holds " + blocks.size() + " record batches, its checksums " + batchCrcs.length);
    }
    this.index = batchIndex(footer.getMetaData().get(BATCH_INDEX_KEY), blocks.size());
  }

  /** Opens and checks the file; a file that disagrees with its row raises SegmentException. */
  static SegmentFile open(Path path, Segment segment, String topic) {
    String where =
        "segment " + segment.path() + " (" + topic + "[" + segment.partition() + "] offsets ["
            + segment.startOffset() + ", " + segment.endOffset() + "))";
    try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
      long size = channel.size();
      if (size != segment.sizeBytes()) {
        throw corrupt(where, "size is " + size + " bytes, the manifest says " + segment.sizeBytes());
      }
      return new SegmentFile(segment, channel.map(FileChannel.MapMode.READ_ONLY, 0, size), where);
    } catch (NoSuchFileException e) {
      throw new SegmentException(where + " cannot be read: the file is missing", e);
    } catch (IOException | RuntimeException e) {
      if (e instanceof SegmentException) {
        throw (SegmentException) e;
      }
      throw new SegmentException(where + " cannot be read: " + e, e);
    }
  }

  int batchCount() {
    return blocks.size();
  }

  /** A batch's CRC problem, or null. */
  private String batchProblem(int i) {
    if (batchCrcs == null) {
      return null;
    }
    long[] b = batchCrcs[i];
    if (crc(b[0], b[1]) != b[2]) {
      return "checksum mismatch in record batch " + i + " (bytes " + b[0] + ".." + (b[0] + b[1]) + ")";
    }
    return null;
  }

  /**
   * The batches that may hold rows the bounds keep (all of them when the bounds cover the
   * segment or the file has no index), each checked against its CRC before any is returned:
   * nothing is read of a segment that then turns out to be corrupt.
   */
  int[] checkedBatches(Bounds bounds, String topic) {
    boolean filtered = !bounds.covers(segment);
    List<Integer> chosen = new ArrayList<>();
    for (int i = 0; i < blocks.size(); i++) {
      long[] span = index == null ? null : index[i];
      if (!filtered || span == null || bounds.overlapsBatch(span[0], span[1], span[2], span[3])) {
        chosen.add(i);
      }
    }
    for (int i : chosen) {
      String problem = batchProblem(i);
      if (problem != null) {
        throw new SegmentException(
            "segment " + segment.path() + " (" + topic + "[" + segment.partition() + "]) is corrupt: "
                + problem,
            null);
      }
    }
    return chosen.stream().mapToInt(Integer::intValue).toArray();
  }

  /** Whether batch i's rows all pass the bounds (as its index says), so none need filtering. */
  boolean batchCovered(int i, Bounds bounds) {
    long[] span = index == null ? null : index[i];
    return bounds.covers(segment)
        || (span != null && bounds.coversBatch(span[0], span[1], span[2], span[3]));
  }

  /** The file's schema with only the top-level fields in `keep`, in file order. */
  Schema kept(Set<String> keep) {
    List<Field> fields = new ArrayList<>();
    for (Field f : schema.getFields()) {
      if (keep.contains(f.getName())) {
        fields.add(f);
      }
    }
    return new Schema(fields);
  }

  /** Batch i holding only the top-level fields in `keep` (in file order); the caller closes it. */
  ArrowRecordBatch batch(int i, Set<String> keep) throws IOException {
    ArrowBlock block = blocks.get(i);
    // The message's metadata: a length (after a 0xFFFFFFFF continuation marker in files
    // written since Arrow 0.15), then the flatbuffer; the body follows the padded metadata.
    ByteBuffer prefix = slice((int) block.getOffset(), block.getMetadataLength());
    int first = prefix.getInt(0);
    int length = first == -1 ? prefix.getInt(4) : first;
    ByteBuffer metadata = slice((int) block.getOffset() + (first == -1 ? 8 : 4), length);
    Message message = Message.getRootAsMessage(metadata);
    if (message.headerType() != MessageHeader.RecordBatch) {
      throw new IOException("message " + i + " is not a record batch");
    }
    RecordBatch header = (RecordBatch) message.header(new RecordBatch());
    ArrowBuf bodyBuf =
        MappedMemory.buffer(address + block.getOffset() + block.getMetadataLength(), block.getBodyLength());
    ArrowRecordBatch all = MessageSerializer.deserializeRecordBatch(header, bodyBuf);
    List<ArrowFieldNode> nodes = new ArrayList<>();
    List<ArrowBuf> buffers = new ArrayList<>();
    int node = 0;
    int buffer = 0;
    for (Field field : schema.getFields()) {
      int[] used = counts(field);
      if (keep.contains(field.getName())) {
        nodes.addAll(all.getNodes().subList(node, node + used[0]));
        buffers.addAll(all.getBuffers().subList(buffer, buffer + used[1]));
      }
      node += used[0];
      buffer += used[1];
    }
    ArrowRecordBatch kept = new ArrowRecordBatch(all.getLength(), nodes, buffers, all.getBodyCompression());
    all.close();
    return kept;
  }

  /** {field nodes, buffers} a field takes in a record batch, its children included. */
  private static int[] counts(Field field) {
    int nodes = 1;
    int buffers = TypeLayout.getTypeBufferCount(field.getType());
    for (Field child : field.getChildren()) {
      int[] c = counts(child);
      nodes += c[0];
      buffers += c[1];
    }
    return new int[] {nodes, buffers};
  }

  private ByteBuffer slice(int position, int length) {
    ByteBuffer view = map.duplicate();
    view.position(position);
    view.limit(position + length);
    return view.slice().order(ByteOrder.LITTLE_ENDIAN);
  }

  private long crc(long position, long length) {
    CRC32 crc = new CRC32();
    crc.update(slice((int) position, (int) length));
    return crc.getValue();
  }

  private void checkEnds(long head, long tail, long size, String where) {
    if (batchCrcs.length == 0) {
      throw corrupt(where, "the checksums list no record batches");
    }
    long expected = batchCrcs[0][0];
    if (expected <= 0) {
      throw corrupt(where, "the checksums leave no room for the file header");
    }
    for (int i = 0; i < batchCrcs.length; i++) {
      if (batchCrcs[i][0] != expected || batchCrcs[i][1] <= 0) {
        throw corrupt(where, "the checksums of batch " + i + " do not follow the previous region");
      }
      expected = batchCrcs[i][0] + batchCrcs[i][1];
    }
    if (expected >= size) {
      throw corrupt(where, "the checksums' batches end at byte " + expected + ", past the footer of " + size);
    }
    long headEnd = batchCrcs[0][0];
    if (crc(0, headEnd) != head) {
      throw corrupt(where, "checksum mismatch in the file header and schema (bytes 0.." + headEnd + ")");
    }
    if (crc(expected, size - expected) != tail) {
      throw corrupt(
          where,
          "checksum mismatch in the footer (bytes " + expected + ".." + size
              + "): the batch index or schema at the end of the file changed");
    }
  }

  private static JsonNode checksums(Segment segment, String where) {
    if (segment.checksums() == null) {
      return null;
    }
    try {
      JsonNode body = JSON.readTree(segment.checksums());
      if (body.path("v").asInt() != 1 || !body.path("batches").isArray()) {
        throw corrupt(where, "its recorded checksums are unreadable: unknown format");
      }
      return body;
    } catch (IOException e) {
      throw corrupt(where, "its recorded checksums are unreadable: " + e.getMessage());
    }
  }

  private static long[][] batchIndex(String raw, int batches) {
    if (raw == null) {
      return null;
    }
    try {
      long[][] spans = JSON.readValue(raw, long[][].class);
      return spans.length == batches ? spans : null;
    } catch (IOException e) {
      return null; // without an index every batch is read: slower, never wrong
    }
  }

  private static SegmentException corrupt(String where, String problem) {
    return new SegmentException(where + " is corrupt: " + problem, null);
  }

  /** A segment in the read plan that cannot be read; reported, never skipped. */
  static final class SegmentException extends RuntimeException {
    SegmentException(String message, Throwable cause) {
      super(message, cause);
    }
  }
}

package org.plateau.spark;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.PriorityQueue;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Structured Streaming over a topic: offsets are the partitions' watermarks. A micro-batch
 * reads the rows of sealed segments between two offsets, so a stream sees every row exactly
 * once, in offset order per partition, and never a segment still being written. A micro-batch
 * normally ends where a segment ends; consolidation can later merge segments a stream read
 * with ones it has not, so a segment is chosen when it overlaps the batch's offsets and only
 * its rows within them are read.
 */
final class PlateauStream
    implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow, ReportsSourceMetrics {
  private static final Logger LOG = LoggerFactory.getLogger(PlateauStream.class);
  private final SourceOptions options;
  private final StructType schema;
  private PlateauOffset target; // set for trigger(availableNow=True)
  private long skippedOffsets; // offsets moved over that no segment holds any more
  private final Map<Integer, Long> skippedTo = new HashMap<>(); // per partition: reported up to

  PlateauStream(SourceOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  private ManifestReader manifest() {
    return new ManifestReader(options);
  }

  private PlateauOffset watermarks() {
    try (ManifestReader m = manifest()) {
      return new PlateauOffset(m.watermarks(options.topic), m.storeId());
    }
  }

  /**
   * Refuses offsets of another store: a checkpoint kept while the store's folder was deleted
   * and created again (or the stream pointed at another store) holds offsets the store now
   * read has not reached or has other rows at, and would skip them silently. An offset
   * without a store id (checkpointed before store ids) is taken as this store's.
   */
  private void sameStore(PlateauOffset offset, String store) {
    if (offset.store == null || offset.store.equals(store)) {
      return;
    }
    throw new IllegalStateException(
        "the checkpoint of this plateau stream of topic '"
            + options.topic
            + "' belongs to another store: its offsets are of store "
            + offset.store
            + ", but the store at "
            + options.manifest
            + " is "
            + (store == null ? "one without an id (from an older plateau)" : "store " + store)
            + " (it was created again, or the stream reads another store now). To read this"
            + " store from its start, delete the checkpoint (checkpointLocation) and start the"
            + " query again");
  }

  @Override
  public Offset initialOffset() {
    if (options.startLatest) {
      return watermarks();
    }
    try (ManifestReader m = manifest()) {
      return new PlateauOffset(m.starts(options.topic), m.storeId());
    }
  }

  @Override
  public Offset deserializeOffset(String json) {
    return PlateauOffset.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return options.readLimit();
  }

  @Override
  public Offset reportLatestOffset() {
    return watermarks();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    target = watermarks();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is used instead");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    PlateauOffset start = (PlateauOffset) startOffset;
    List<Segment> candidates = new ArrayList<>();
    String store;
    try (ManifestReader m = manifest()) {
      store = m.storeId();
      sameStore(start, store);
      for (Segment s : m.segments(options.topic, Bounds.NONE)) {
        long to = target == null ? Long.MAX_VALUE : target.of(s.partition());
        Segment unread = unread(s, start.of(s.partition()), to);
        if (unread != null) {
          candidates.add(unread);
        }
      }
    }
    Map<Integer, Long> end = new TreeMap<>(start.next);
    for (Segment s : admit(candidates, limit)) {
      end.merge(s.partition(), s.endOffset(), Math::max);
    }
    if (limit instanceof ReadAllAvailable) {
      // Watermarks advanced past skipped offsets (no segment) move the stream on too.
      PlateauOffset ceiling = target != null ? target : watermarks();
      ceiling.next.forEach((p, v) -> end.merge(p, v, Math::max));
    }
    return new PlateauOffset(end, store);
  }

  /**
   * A micro-batch over offsets retention deleted before it read them (the stream fell behind
   * it, or a batch planned before was run again after the deletion grace) goes on without them:
   * said in the log and counted in the query's progress (the source's metric skippedOffsets).
   * Offsets below a partition's oldest stored one are the ones retention removed (it removes
   * the oldest first); records handled without landing (dead-lettered, skipped) leave none
   * either. So do a quarantined segment's: its file is damaged and it is never read again.
   * Reported when a batch is planned (every batch is, also one run again after a restart);
   * Spark may plan a batch more than once, its skipped offsets are counted once.
   */
  private void reportSkipped(
      PlateauOffset start,
      PlateauOffset end,
      Map<Integer, Long> lowest,
      List<Segment> quarantined,
      Map<Integer, TreeMap<Long, Long>> covered) {
    for (Map.Entry<Integer, Long> e : start.next.entrySet()) {
      int partition = e.getKey();
      long to = Math.min(end.of(partition), lowest.getOrDefault(partition, Long.MAX_VALUE));
      skip(
          partition,
          e.getValue(),
          to,
          "no segment holds them any more (retention deleted them before the stream read them,"
              + " or their records were not landed)");
    }
    for (Segment s : quarantined) {
      TreeMap<Long, Long> spans = covered.computeIfAbsent(s.partition(), p -> new TreeMap<>());
      long from = Math.max(s.startOffset(), start.of(s.partition()));
      long to = Math.min(s.endOffset(), end.of(s.partition()));
      for (long[] gap = firstGap(spans, from, to); gap != null; gap = firstGap(spans, gap[1], to)) {
        skip(s.partition(), gap[0], gap[1], "segment " + s.path() + " is quarantined (its file is damaged)");
      }
    }
  }

  private void skip(int partition, long lo, long hi, String why) {
    long from = Math.max(lo, skippedTo.getOrDefault(partition, Long.MIN_VALUE));
    if (hi <= from) {
      return;
    }
    skippedOffsets += hi - from;
    skippedTo.put(partition, hi);
    LOG.warn(
        "plateau stream of topic '{}' partition {} skips offsets [{}, {}): {}; it goes on at offset {}",
        options.topic,
        partition,
        from,
        hi,
        why,
        hi);
  }

  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    return Map.of("skippedOffsets", Long.toString(skippedOffsets));
  }

  /**
   * The part of the segment within [from, to), as a segment spanning only those offsets with
   * its rows and bytes scaled to them (what admission counts), or null when none of it is.
   * A segment partly below `from` is one consolidation merged from segments the stream had
   * read and segments it had not.
   */
  static Segment unread(Segment s, long from, long to) {
    long lo = Math.max(s.startOffset(), from);
    long hi = Math.min(s.endOffset(), to);
    if (lo >= hi) {
      return null;
    }
    if (lo == s.startOffset() && hi == s.endOffset()) {
      return s;
    }
    double share = (hi - lo) / (double) Math.max(1, s.endOffset() - s.startOffset());
    return new Segment(
        s.id(),
        s.partition(),
        lo,
        hi,
        Math.max(1, (long) Math.ceil(s.recordCount() * share)),
        s.timeMin(),
        s.timeMax(),
        Math.max(1, (long) Math.ceil(s.sizeBytes() * share)),
        s.path(),
        s.checksums());
  }

  /**
   * Segments while the limit allows, oldest partition head first, so each partition is read as
   * a contiguous prefix. At least one is admitted: a stream never stalls on a segment larger
   * than its limit.
   */
  static List<Segment> admit(List<Segment> segments, ReadLimit limit) {
    long budget;
    if (limit instanceof ReadMaxRows) {
      budget = ((ReadMaxRows) limit).maxRows();
    } else if (limit instanceof ReadMaxFiles) {
      budget = ((ReadMaxFiles) limit).maxFiles();
    } else if (limit instanceof ReadMaxBytes) {
      budget = ((ReadMaxBytes) limit).maxBytes();
    } else {
      return segments;
    }
    Map<Integer, Deque<Segment>> queues = new TreeMap<>();
    List<Segment> ordered = new ArrayList<>(segments);
    ordered.sort(Comparator.comparingInt(Segment::partition).thenComparingLong(Segment::startOffset));
    for (Segment s : ordered) {
      queues.computeIfAbsent(s.partition(), p -> new ArrayDeque<>()).addLast(s);
    }
    PriorityQueue<Segment> heads =
        new PriorityQueue<>(Comparator.comparingLong(Segment::timeMin).thenComparingInt(Segment::partition));
    queues.values().forEach(q -> heads.add(q.peekFirst()));
    List<Segment> admitted = new ArrayList<>();
    long used = 0;
    while (!heads.isEmpty()) {
      Segment s = heads.poll();
      queues.get(s.partition()).pollFirst();
      long size =
          limit instanceof ReadMaxRows ? s.recordCount() : limit instanceof ReadMaxBytes ? s.sizeBytes() : 1;
      if (!admitted.isEmpty() && used + size > budget) {
        break;
      }
      admitted.add(s);
      used += size;
      Segment nextHead = queues.get(s.partition()).peekFirst();
      if (nextHead != null) {
        heads.add(nextHead);
      }
    }
    return admitted;
  }

  @Override
  public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
    PlateauOffset start = (PlateauOffset) startOffset;
    PlateauOffset end = (PlateauOffset) endOffset;
    List<Segment> chosen = new ArrayList<>();
    Map<Long, Range> shares = new HashMap<>(); // segments only partly in [start, end)
    Map<Integer, TreeMap<Long, Long>> covered = new HashMap<>(); // per partition: lo -> hi
    Map<Integer, Long> lowest = new HashMap<>(); // per partition: the first offset still stored
    List<Segment> quarantined;
    try (ManifestReader m = manifest()) {
      String store = m.storeId();
      sameStore(start, store);
      sameStore(end, store);
      for (Segment s : m.segments(options.topic, Bounds.NONE)) {
        lowest.merge(s.partition(), s.startOffset(), Math::min);
        Segment unread = unread(s, start.of(s.partition()), end.of(s.partition()));
        if (unread == null) {
          continue;
        }
        chosen.add(s);
        if (unread != s) {
          shares.put(s.id(), new Range(unread.startOffset(), unread.endOffset(), null));
        }
        covered.computeIfAbsent(s.partition(), p -> new TreeMap<>()).put(unread.startOffset(), unread.endOffset());
      }
      quarantined = m.quarantined(options.topic);
      for (Segment s : quarantined) {
        lowest.merge(s.partition(), s.startOffset(), Math::min);
      }
      // The batch's offsets were fixed when it was planned (its offset log entry); retention may
      // have retired a segment since (the query stopped before committing the batch and runs it
      // again, or retention ran between planning and reading). Its file stays for the deletion
      // grace so that such a reader still reads it: offsets no readable segment holds are read
      // from one retired in that time.
      for (Segment s : m.retiring(options.topic)) {
        lowest.merge(s.partition(), s.startOffset(), Math::min);
        TreeMap<Long, Long> spans = covered.computeIfAbsent(s.partition(), p -> new TreeMap<>());
        long[] gap =
            firstGap(
                spans,
                Math.max(s.startOffset(), start.of(s.partition())),
                Math.min(s.endOffset(), end.of(s.partition())));
        if (gap == null) {
          continue;
        }
        chosen.add(s);
        if (gap[0] != s.startOffset() || gap[1] != s.endOffset()) {
          shares.put(s.id(), new Range(gap[0], gap[1], null));
        }
        spans.put(gap[0], gap[1]);
      }
    }
    reportSkipped(start, end, lowest, quarantined, covered);
    return SegmentGroup.plan(chosen, options.maxPartitionBytes, Bounds.NONE, shares)
        .toArray(new InputPartition[0]);
  }

  /** The first offsets in [lo, hi) none of the spans (start -> end, disjoint) holds, or null. */
  static long[] firstGap(TreeMap<Long, Long> spans, long lo, long hi) {
    long from = lo;
    for (Map.Entry<Long, Long> before = spans.floorEntry(from);
        before != null && before.getValue() > from;
        before = spans.floorEntry(from)) {
      from = before.getValue();
    }
    if (from >= hi) {
      return null;
    }
    Long nextStart = spans.higherKey(from);
    long to = nextStart == null ? hi : Math.min(hi, nextStart);
    return new long[] {from, to};
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReadPlan(options, schema, Bounds.NONE, -1);
  }

  @Override
  public void commit(Offset end) {
    // Nothing to release: segments stay until retention removes them.
  }

  @Override
  public void stop() {}
}

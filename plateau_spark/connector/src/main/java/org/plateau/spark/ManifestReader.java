package org.plateau.spark;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * The manifest, read through JDBC (SQLite's driver, or PostgreSQL's): read-only connections,
 * autocommit queries, in SQL both databases run.
 *
 * <p>An SQLite manifest is in WAL mode (the writer sets it), so a reader never blocks the writer
 * and sees the last committed state. Each query is its own short read transaction: a long one
 * would keep SQLite from checkpointing the WAL past it.
 */
final class ManifestReader implements AutoCloseable {
  private static final String READABLE = "state IN ('sealed', 'replicated')";
  private static final String SEGMENT_SUFFIX = ".arrow";
  private final Connection connection;

  ManifestReader(SourceOptions options) {
    try {
      this.connection = options.manifest.connect();
    } catch (SQLException e) {
      throw new IllegalStateException(
          "cannot open the plateau manifest " + options.manifest + ": " + e.getMessage(), e);
    }
  }

  List<String> topics() {
    List<String> topics = new ArrayList<>();
    query("SELECT DISTINCT topic FROM partitions ORDER BY topic", List.of(), rs -> topics.add(rs.getString(1)));
    return topics;
  }

  /** Each distinct segment schema of the topic (Arrow IPC schema messages), oldest first. */
  List<byte[]> schemas(String topic) {
    List<byte[]> schemas = new ArrayList<>();
    query(
        "SELECT arrow_schema FROM schemas WHERE topic = ? ORDER BY first_seen",
        List.of(topic),
        rs -> schemas.add(rs.getBytes(1)));
    return schemas;
  }

  /**
   * The readable segments of the topic written with the schema message `schema`, each as its
   * path, partition and offsets, for a message naming them.
   */
  List<String> segmentsWithSchema(String topic, byte[] schema) {
    List<String> fingerprints = new ArrayList<>();
    query(
        "SELECT fingerprint, arrow_schema FROM schemas WHERE topic = ?",
        List.of(topic),
        rs -> {
          if (Arrays.equals(rs.getBytes(2), schema)) {
            fingerprints.add(rs.getString(1));
          }
        });
    List<String> holders = new ArrayList<>();
    for (String fingerprint : fingerprints) {
      query(
          "SELECT path, partition, start_offset, end_offset FROM segments WHERE topic = ? AND "
              + READABLE
              + " AND schema_fingerprint = ? ORDER BY partition, start_offset",
          List.of(topic, fingerprint),
          rs ->
              holders.add(
                  rs.getString(1) + " (partition " + rs.getInt(2) + ", offsets [" + rs.getLong(3)
                      + ", " + rs.getLong(4) + "))"));
    }
    return holders;
  }

  /** Readable segments of the topic overlapping the bounds' ranges, by partition and offset. */
  List<Segment> segments(String topic, Bounds bounds) {
    return segments(topic, bounds, READABLE);
  }

  /**
   * Segments of the topic retention retired or consolidation replaced, whose files stay on disk
   * for the deletion grace (until the row goes), by partition and offset.
   *
   * <p>A row consolidation retired holds -id - 1 as its start offset, which frees the key for the
   * merged row: its start is read from its file's name, `{start:020d}.arrow` or
   * `{start:020d}-{end:020d}.arrow`, as the store reads it. Taken as negative, it would seem to
   * hold every offset below its end. A row whose name tells no start is left out: what it holds
   * is unknown, so its offsets count as gone.
   */
  List<Segment> retiring(String topic) {
    List<Segment> out = new ArrayList<>();
    for (Segment s : segments(topic, Bounds.NONE, "state = 'deleting'")) {
      long start = s.startOffset() >= 0 ? s.startOffset() : nameStart(s.path());
      if (start < 0) {
        continue;
      }
      out.add(
          new Segment(
              s.id(), s.partition(), start, s.endOffset(), s.recordCount(), s.timeMin(),
              s.timeMax(), s.sizeBytes(), s.path(), s.checksums()));
    }
    out.sort(Comparator.comparingInt(Segment::partition).thenComparingLong(Segment::startOffset));
    return out;
  }

  /** The start offset a segment file's name encodes, or -1 when it is not a segment's name. */
  static long nameStart(String path) {
    String name = path.substring(path.lastIndexOf('/') + 1);
    if (!name.endsWith(SEGMENT_SUFFIX) || name.length() < 20 + SEGMENT_SUFFIX.length()) {
      return -1;
    }
    String stem = name.substring(0, name.length() - SEGMENT_SUFFIX.length());
    String start = stem.substring(0, 20);
    if (!start.chars().allMatch(c -> c >= '0' && c <= '9')
        || !(stem.length() == 20 || stem.charAt(20) == '-')) {
      return -1;
    }
    try {
      return Long.parseLong(start);
    } catch (NumberFormatException e) {
      return -1; // beyond a long: no offset
    }
  }

  /** Segments of the topic quarantined: their files are damaged, they are never read again. */
  List<Segment> quarantined(String topic) {
    return segments(topic, Bounds.NONE, "state = 'quarantined'");
  }

  private List<Segment> segments(String topic, Bounds bounds, String states) {
    StringBuilder sql =
        new StringBuilder(
            "SELECT id, partition, start_offset, end_offset, record_count, time_min, time_max,"
                + " size_bytes, path, checksums FROM segments WHERE topic = ? AND "
                + states);
    List<Object> args = new ArrayList<>();
    args.add(topic);
    if (bounds.partitions.lo != null) {
      sql.append(" AND partition >= ?");
      args.add(bounds.partitions.lo);
    }
    if (bounds.partitions.hi != null) {
      sql.append(" AND partition < ?");
      args.add(bounds.partitions.hi);
    }
    if (bounds.offsets.lo != null) {
      sql.append(" AND end_offset > ?");
      args.add(bounds.offsets.lo);
    }
    if (bounds.offsets.hi != null) {
      sql.append(" AND start_offset < ?");
      args.add(bounds.offsets.hi);
    }
    if (bounds.times.lo != null) {
      sql.append(" AND time_max >= ?");
      args.add(bounds.times.lo);
    }
    if (bounds.times.hi != null) {
      sql.append(" AND time_min < ?");
      args.add(bounds.times.hi);
    }
    sql.append(" ORDER BY partition, start_offset");
    List<Segment> segments = new ArrayList<>();
    query(
        sql.toString(),
        args,
        rs ->
            segments.add(
                new Segment(
                    rs.getLong(1),
                    rs.getInt(2),
                    rs.getLong(3),
                    rs.getLong(4),
                    rs.getLong(5),
                    rs.getLong(6),
                    rs.getLong(7),
                    rs.getLong(8),
                    rs.getString(9),
                    rs.getString(10))));
    return segments;
  }

  /**
   * The readable segments of the topic that may hold rows the bounds keep, in the order
   * `segments` gives, less those whose Bloom filters rule out every probed value: what a scan
   * plans and what an aggregate answered while planning counts.
   */
  List<Segment> admitted(String topic, Bounds bounds, BloomProbes probes) {
    List<Segment> segments = segments(topic, bounds);
    Map<Long, Map<String, Bloom>> blooms =
        probes.isEmpty() ? Map.of() : blooms(topic, probes.columns());
    List<Segment> admitted = new ArrayList<>();
    for (Segment s : segments) {
      if (bounds.admits(s) && probes.admits(blooms.get(s.id()))) {
        admitted.add(s);
      }
    }
    return admitted;
  }

  /**
   * The bloom filters of these columns in the topic's readable segments, by segment id then
   * column (schema version 6, segment_blooms). A segment or column without one is absent.
   */
  Map<Long, Map<String, Bloom>> blooms(String topic, Set<String> columns) {
    Map<Long, Map<String, Bloom>> found = new HashMap<>();
    if (columns.isEmpty()) {
      return found;
    }
    String marks = String.join(", ", Collections.nCopies(columns.size(), "?"));
    List<Object> args = new ArrayList<>();
    args.add(topic);
    args.addAll(columns);
    query(
        "SELECT b.segment_id, b.column_name, b.kind, b.hash_count, b.bits FROM segment_blooms b"
            + " JOIN segments s ON s.id = b.segment_id WHERE s.topic = ? AND s."
            + READABLE
            + " AND b.column_name IN ("
            + marks
            + ")",
        args,
        rs -> {
          String kind = rs.getString(3);
          if (kind.equals("int") || kind.equals("bytes")) { // another kind: left unused
            found
                .computeIfAbsent(rs.getLong(1), id -> new HashMap<>())
                .put(rs.getString(2), new Bloom(kind, rs.getInt(4), rs.getBytes(5)));
          }
        });
    return found;
  }

  /** Each partition's watermark: the end of its last sealed segment. */
  Map<Integer, Long> watermarks(String topic) {
    Map<Integer, Long> marks = new TreeMap<>();
    query(
        "SELECT partition, next_offset FROM partitions WHERE topic = ?",
        List.of(topic),
        rs -> marks.put(rs.getInt(1), rs.getLong(2)));
    return marks;
  }

  /** Where each partition's readable data starts (its watermark when it holds none). */
  Map<Integer, Long> starts(String topic) {
    Map<Integer, Long> starts = watermarks(topic);
    query(
        "SELECT partition, MIN(start_offset) FROM segments WHERE topic = ? AND "
            + READABLE
            + " GROUP BY partition",
        List.of(topic),
        rs -> starts.put(rs.getInt(1), rs.getLong(2)));
    return starts;
  }

  /**
   * The store's id (schema version 9, store_identity), or null for a manifest from before it:
   * a checkpoint names it, so one of another store is not read as this one's.
   */
  String storeId() {
    long[] version = {0};
    query("SELECT MAX(version) FROM schema_version", List.of(), rs -> version[0] = rs.getLong(1));
    if (version[0] < 9) {
      return null;
    }
    String[] id = {null};
    query("SELECT store_id FROM store_identity", List.of(), rs -> id[0] = rs.getString(1));
    return id[0];
  }

  private interface Row {
    void accept(ResultSet rs) throws SQLException;
  }

  private void query(String sql, List<?> args, Row row) {
    try (PreparedStatement statement = connection.prepareStatement(sql)) {
      for (int i = 0; i < args.size(); i++) {
        statement.setObject(i + 1, args.get(i));
      }
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          row.accept(rs);
        }
      }
    } catch (SQLException e) {
      throw new IllegalStateException("reading the plateau manifest failed: " + e.getMessage(), e);
    }
  }

  @Override
  public void close() {
    try {
      connection.close();
    } catch (SQLException e) {
      // a read-only connection holds nothing to lose
    }
  }
}

package org.plateau.spark;

import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The source's options, checked once, with errors that name the option. */
final class SourceOptions implements Serializable {
  static final String MANIFEST_FILE = "manifest.db";
  static final long DEFAULT_PARTITION_BYTES = 64L << 20;
  static final long DEFAULT_DRIVER_AGGREGATE_ROWS = 1_000_000;
  private static final Pattern TOPIC = Pattern.compile("[A-Za-z0-9._-]{1,249}");

  final String dataDir; // where segment paths are relative to
  final ManifestLocation manifest;
  final String topic;
  final long maxPartitionBytes;
  final String traceFile; // null: no trace
  final boolean startLatest;
  final String limitKind; // null, "rows", "files" or "bytes"
  final long limitAmount;
  final boolean pushdown;
  final long driverAggregateRows; // rows an aggregate may read while planning; 0: manifest only

  private SourceOptions(Map<String, String> raw) {
    CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(raw);
    String path = options.get("path");
    String manifest = options.get("manifest");
    if (empty(path) && empty(manifest)) {
      throw new IllegalArgumentException(
          "the plateau source needs option(\"path\", <data_dir>) or option(\"manifest\", <url>)");
    }
    if (!empty(manifest)) {
      this.manifest = ManifestLocation.parse(manifest);
      if (this.manifest.sqliteFile != null) {
        this.dataDir = empty(path) ? parentOf(this.manifest.sqliteFile) : expand(path);
      } else if (empty(path)) {
        throw new IllegalArgumentException(
            "a PostgreSQL manifest needs option(\"path\", <data_dir>) too: the segment files"
                + " are not beside it");
      } else {
        this.dataDir = expand(path);
      }
    } else {
      Path data = Paths.get(expand(path));
      if (!Files.isRegularFile(data.resolve(MANIFEST_FILE))) {
        throw new IllegalArgumentException(
            "no plateau store at '" + path + "': it has no " + MANIFEST_FILE);
      }
      this.dataDir = data.toString();
      this.manifest = ManifestLocation.sqlite(data.resolve(MANIFEST_FILE).toString());
    }
    String name = options.get("topic");
    if (empty(name)) {
      throw new IllegalArgumentException("the plateau source needs option(\"topic\", <topic>)");
    }
    if (!TOPIC.matcher(name).matches() || name.equals(".") || name.equals("..")) {
      throw new IllegalArgumentException(
          "topic name '" + name + "' may only hold the characters [A-Za-z0-9._-]");
    }
    this.topic = name;
    String starting = options.getOrDefault("startingOffsets", "earliest");
    if (!starting.equals("earliest") && !starting.equals("latest")) {
      throw new IllegalArgumentException(
          "option startingOffsets must be 'earliest' or 'latest', got '" + starting + "'");
    }
    this.startLatest = starting.equals("latest");
    String kind = null;
    long amount = 0;
    // maxOffsetsPerTrigger is the Kafka source's name for a record limit: a query moved from
    // Kafka keeps its limit instead of having it ignored.
    String[][] limits = {
      {"maxRecordsPerTrigger", "rows"},
      {"maxOffsetsPerTrigger", "rows"},
      {"maxSegmentsPerTrigger", "files"},
      {"maxBytesPerTrigger", "bytes"}
    };
    for (String[] limit : limits) {
      if (options.containsKey(limit[0])) {
        if (kind != null) {
          throw new IllegalArgumentException(
              "set at most one of maxRecordsPerTrigger (or maxOffsetsPerTrigger),"
                  + " maxSegmentsPerTrigger, maxBytesPerTrigger");
        }
        kind = limit[1];
        amount = positive(options, limit[0]);
      }
    }
    this.limitKind = kind;
    this.limitAmount = amount;
    String push = options.getOrDefault("pushdown", "true").toLowerCase();
    if (!push.equals("true") && !push.equals("false")) {
      throw new IllegalArgumentException("option pushdown must be true or false, got '" + push + "'");
    }
    this.pushdown = push.equals("true");
    this.maxPartitionBytes =
        options.containsKey("maxPartitionBytes")
            ? positive(options, "maxPartitionBytes")
            : DEFAULT_PARTITION_BYTES;
    this.driverAggregateRows =
        options.containsKey("driverAggregateRows")
            ? atLeast(options, "driverAggregateRows", 0, "0 or a positive integer")
            : DEFAULT_DRIVER_AGGREGATE_ROWS;
    String trace = options.get("traceFile");
    this.traceFile = empty(trace) ? null : trace;
  }

  static SourceOptions parse(Map<String, String> raw) {
    return new SourceOptions(raw);
  }

  ReadLimit readLimit() {
    if (limitKind == null) {
      return ReadLimit.allAvailable();
    }
    switch (limitKind) {
      case "rows":
        return ReadLimit.maxRows(limitAmount);
      case "files":
        return ReadLimit.maxFiles((int) Math.min(Integer.MAX_VALUE, limitAmount));
      default:
        return ReadLimit.maxBytes(limitAmount);
    }
  }

  Path segmentPath(String relative) {
    return Paths.get(dataDir).resolve(relative);
  }

  private static boolean empty(String value) {
    return value == null || value.isEmpty();
  }

  private static String expand(String path) {
    return path.startsWith("~") ? System.getProperty("user.home") + path.substring(1) : path;
  }

  private static String parentOf(String file) {
    Path parent = Paths.get(file).toAbsolutePath().getParent();
    return parent == null ? "." : parent.toString();
  }

  private static long positive(CaseInsensitiveStringMap options, String key) {
    return atLeast(options, key, 1, "a positive integer");
  }

  private static long atLeast(CaseInsensitiveStringMap options, String key, long least, String what) {
    String raw = options.get(key);
    String name = key.toLowerCase();
    try {
      long value = Long.parseLong(raw.trim());
      if (value >= least) {
        return value;
      }
    } catch (NumberFormatException e) {
      // reported below, with the option's name
    }
    throw new IllegalArgumentException("option " + name + " must be " + what + ", got '" + raw + "'");
  }
}

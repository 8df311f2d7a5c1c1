package org.plateau.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream position: per partition, the next offset to read. Serialized as {"0": 300, ...}
 * (partitions as text), the form checkpoints of plateau streams have always held.
 */
final class PlateauOffset extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();
  final Map<Integer, Long> next;

  PlateauOffset(Map<Integer, Long> next) {
    this.next = new TreeMap<>(next);
  }

  long of(int partition) {
    return next.getOrDefault(partition, 0L);
  }

  static PlateauOffset parse(String json) {
    try {
      Map<String, Long> raw = JSON.readValue(json, new TypeReference<Map<String, Long>>() {});
      Map<Integer, Long> next = new TreeMap<>();
      raw.forEach((k, v) -> next.put(Integer.parseInt(k), v));
      return new PlateauOffset(next);
    } catch (JsonProcessingException | NumberFormatException e) {
      throw new IllegalArgumentException("not a plateau stream offset: " + json, e);
    }
  }

  @Override
  public String json() {
    Map<String, Long> raw = new TreeMap<>();
    next.forEach((k, v) -> raw.put(Integer.toString(k), v));
    try {
      return JSON.writeValueAsString(raw);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }
}

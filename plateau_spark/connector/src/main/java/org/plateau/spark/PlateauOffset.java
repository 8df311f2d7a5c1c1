package org.plateau.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream position: per partition, the next offset to read, and the id of the store they are
 * offsets of. Serialized as {"0": 300, ..., "store": "id"} (partitions as text). Checkpoints
 * written before store ids hold no "store": such an offset is taken as one of the store read now.
 */
final class PlateauOffset extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String STORE = "store";
  final Map<Integer, Long> next;
  final String store; // null: an offset from before store ids, or a manifest without one

  PlateauOffset(Map<Integer, Long> next, String store) {
    this.next = new TreeMap<>(next);
    this.store = store;
  }

  long of(int partition) {
    return next.getOrDefault(partition, 0L);
  }

  static PlateauOffset parse(String json) {
    IllegalArgumentException bad = new IllegalArgumentException("not a plateau stream offset: " + json);
    try {
      JsonNode root = JSON.readTree(json);
      if (root == null || !root.isObject()) {
        throw bad;
      }
      Map<Integer, Long> next = new TreeMap<>();
      String store = null;
      for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> field = it.next();
        JsonNode value = field.getValue();
        if (field.getKey().equals(STORE) && value.isTextual()) {
          store = value.textValue();
        } else if (value.isIntegralNumber() && value.canConvertToLong()) {
          next.put(Integer.parseInt(field.getKey()), value.longValue());
        } else {
          throw bad;
        }
      }
      return new PlateauOffset(next, store);
    } catch (JsonProcessingException | NumberFormatException e) {
      throw (IllegalArgumentException) bad.initCause(e);
    }
  }

  @Override
  public String json() {
    Map<String, Object> raw = new TreeMap<>();
    next.forEach((k, v) -> raw.put(Integer.toString(k), v));
    if (store != null) {
      raw.put(STORE, store);
    }
    try {
      return JSON.writeValueAsString(raw);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }
}

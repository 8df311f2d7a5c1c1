package org.plateau.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The name a segment's column reads as (plateau_core/stored_names.py). A data field named like
 * plateau's own columns or like `partition`, in any case, is stored with a `_` suffix
 * (`Timestamp` as `Timestamp_`); segments sealed before that rule hold it under its own name,
 * which would make `partition` or `timestamp` ambiguous. Such a column reads as its suffixed
 * name, so the topic's old and new segments give one column. A segment holding both names
 * (no plateau writer stores that) is refused, naming them.
 */
final class StoredNames {
  /** The exact names plateau stores beside the fields; the writer checks their types. */
  static final List<String> OWN = List.of("offset", "timestamp", "key", "headers");
  /** Also taken: the column every reader adds. */
  static final List<String> TAKEN = List.of("offset", "timestamp", "key", "headers", "partition");

  private StoredNames() {}

  /** The name a segment column `name` reads as. */
  static String readName(String name) {
    if (OWN.contains(name)) {
      return name;
    }
    for (String taken : TAKEN) {
      // Spark's resolver compares so; plateau_core.names.fold_case follows it.
      if (name.equalsIgnoreCase(taken)) {
        return name + "_";
      }
    }
    return name;
  }

  /** A segment's `stored` schema with its columns named as they read (metadata kept). */
  static Schema readAs(Schema stored) {
    List<Field> fields = stored.getFields();
    Set<String> present = new HashSet<>();
    for (Field f : fields) {
      present.add(f.getName());
    }
    List<Field> read = new ArrayList<>(fields.size());
    List<String> twins = new ArrayList<>();
    boolean renamed = false;
    for (Field f : fields) {
      String name = readName(f.getName());
      if (name.equals(f.getName())) {
        read.add(f);
        continue;
      }
      renamed = true;
      if (present.contains(name)) {
        twins.add(
            "'" + f.getName() + "' and '" + name + "' ('" + f.getName() + "' was stored before "
                + "fields named like plateau's columns got a '_' suffix, and reads as '" + name
                + "')");
      }
      read.add(new Field(name, f.getFieldType(), f.getChildren()));
    }
    if (!twins.isEmpty()) {
      throw new TwinColumnsException(String.join("; ", twins), null);
    }
    return renamed ? new Schema(read, stored.getCustomMetadata()) : stored;
  }

  /** A segment schema holding a column stored before the `_` rule and its suffixed name. */
  static final class TwinColumnsException extends IllegalArgumentException {
    final String twins;
    final byte[] schema; // the manifest's schema message it was found in, or null

    TwinColumnsException(String twins, byte[] schema) {
      super(located("a segment schema", twins));
      this.twins = twins;
      this.schema = schema;
    }

    /** The message naming `where` (the topic and segment files). */
    String at(String where) {
      return located(where, twins);
    }

    private static String located(String where, String twins) {
      return where + " holds the columns " + twins + ": one column's values would hide the "
          + "other's. Rewrite the file with one of them renamed, or remove it";
    }
  }
}

package org.plateau.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The `plateau` data source: spark.read.format("plateau").option("path", dataDir)
 * .option("topic", topic).load(), and the same with readStream.
 */
public final class PlateauSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "plateau";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    SourceOptions parsed = SourceOptions.parse(options.asCaseSensitiveMap());
    try (ManifestReader manifest = new ManifestReader(parsed)) {
      List<String> topics = manifest.topics();
      if (!topics.contains(parsed.topic)) {
        throw new IllegalArgumentException(
            "topic '" + parsed.topic + "' is not in the plateau store; it has "
                + (topics.isEmpty() ? "no topics yet" : topics.toString()));
      }
      return schema(manifest, parsed.topic);
    }
  }

  /**
   * The topic's schema. A schema holding a column stored before the `_` suffix rule and its
   * suffixed name fails the load, naming the segments written with it; one only retired
   * segments had is left out, as the store's reader leaves it out (plateau_core.topic_schema).
   */
  private static StructType schema(ManifestReader manifest, String topic) {
    List<byte[]> schemas = new ArrayList<>(manifest.schemas(topic));
    while (true) { // each pass leaves out one schema, or returns or throws
      try {
        return TopicSchema.of(schemas, topic);
      } catch (StoredNames.TwinColumnsException e) {
        if (e.schema == null) {
          throw e;
        }
        List<String> holders = manifest.segmentsWithSchema(topic, e.schema);
        if (!holders.isEmpty()) {
          String noun = holders.size() == 1 ? "segment " : "segments ";
          throw new IllegalArgumentException(
              e.at("topic '" + topic + "': " + noun + String.join(", ", holders)), e);
        }
        if (!schemas.removeIf(s -> Arrays.equals(s, e.schema))) {
          throw e;
        }
      }
    }
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new PlateauTable(SourceOptions.parse(properties), schema);
  }
}

package org.plateau.spark;

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
      return TopicSchema.of(manifest.schemas(parsed.topic), parsed.topic);
    }
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new PlateauTable(SourceOptions.parse(properties), schema);
  }
}

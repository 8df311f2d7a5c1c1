package org.plateau.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A plateau topic as a table: `partition` plus the topic's merged segment schema. */
final class PlateauTable implements SupportsRead {
  private final SourceOptions options;
  private final StructType schema;

  PlateauTable(SourceOptions options, StructType schema) {
    this.options = options;
    this.schema = schema;
  }

  @Override
  public String name() {
    return "plateau:" + options.topic;
  }

  // Deprecated in favour of columns(), whose default still derives from it: one definition.
  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    return new PlateauScanBuilder(options, schema);
  }
}

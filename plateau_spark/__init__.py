"""plateau in Spark: the session helper, `query` and replication. The `plateau` data source
itself is a JVM connector (plateau_spark/connector/), built once and added by `session()`.

spark = plateau_spark.session()          # local[*] unless told otherwise
df = spark.read.format("plateau").option("path", "data").option("topic", "events").load()

Nothing in the storage engine or the consume path imports this package: it loads PySpark.
"""

from plateau_spark.session import jars, session

__all__ = ["jars", "session"]

"""plateau in Spark: the `plateau` data source, the session helper, `query` and replication.

spark = plateau_spark.session()          # local[*] unless told otherwise
df = spark.read.format("plateau").option("path", "data").option("topic", "events").load()

Nothing in the storage engine or the consume path imports this package: it loads PySpark.
"""

from plateau_spark.session import register, session

__all__ = ["register", "session"]

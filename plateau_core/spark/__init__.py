"""plateau in Spark: the `plateau` data source, the session helper and replication.

spark = plateau_core.spark.session()          # local[*] unless told otherwise
df = spark.read.format("plateau").option("path", "data").option("topic", "events").load()
"""

from plateau_core.spark.session import register, session
from plateau_core.spark.source import SOURCE_NAME, PlateauDataSource

__all__ = ["SOURCE_NAME", "PlateauDataSource", "register", "session"]

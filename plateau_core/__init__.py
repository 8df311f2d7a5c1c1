"""plateau storage engine: segments, manifest, retention and reading. Never imports Kafka."""

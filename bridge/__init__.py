"""plateau bridge: the Kafka side (config, consumer workers, CLI)."""

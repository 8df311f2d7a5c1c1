"""The consume path: workers that read the configured topics from a Kafka cluster, decode
them, append them to the store's writer, and commit offsets after the manifest."""

"""What both ingest paths share: a partition's records as one Arrow batch (the envelope:
offset, timestamp, key, headers, value), the decoders that turn it into the rows a topic
stores, and the records that do not decode (poison).

The consume path builds the envelope from the messages it polled from Kafka; the produce
endpoint from the record batches producers sent. Neither knows the other."""

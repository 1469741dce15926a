"""Kafka I/O: the offsets client, librdkafka configuration, and which Kafka errors are transient."""

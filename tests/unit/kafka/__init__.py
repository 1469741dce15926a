"""Unit tests of kafka_batch_provider.kafka (no servers)."""

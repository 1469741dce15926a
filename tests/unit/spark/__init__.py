"""Unit tests of kafka_batch_provider.spark (no servers)."""

"""Unit tests of kafka_batch_provider.output (no servers)."""

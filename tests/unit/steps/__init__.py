"""Unit tests of kafka_batch_provider.steps (no servers)."""

"""Unit tests of kafka_batch_provider.core (no servers)."""

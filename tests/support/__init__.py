"""Test-only helpers: a standalone Spark cluster and a fault proxy (not part of the kit users get)."""

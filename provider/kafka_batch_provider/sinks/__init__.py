"""Sinks: where a batch's rows land and how the batch, with its offsets, becomes visible.

Every sink keeps the offset log with its data (see :mod:`kafka_batch_provider.sinks.base`):

* :mod:`~kafka_batch_provider.sinks.parquet_layout`: Parquet files, one folder per batch, and
  ``_log/<seq>.json`` manifests created exclusively (the default, ``--format parquet``);
* :mod:`~kafka_batch_provider.sinks.delta`: a Delta Lake table; each batch is one Delta commit
  with a ``txn`` action per topic-partition (``--format delta``);
* :mod:`~kafka_batch_provider.sinks.iceberg`: an Apache Iceberg table; each batch is one
  snapshot whose summary holds the batch (``--format iceberg``).
"""

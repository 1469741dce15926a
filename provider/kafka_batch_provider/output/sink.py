"""The one interface every sink implements.

A sink is the output's data plus its offset log. The protocol (plan, write, commit) talks to
it only through these methods, so it does not care whether a batch becomes visible by
creating a manifest file, a Delta commit or an Iceberg snapshot:

* the **log**: ``entry(seq)``, ``tail_seq()``, ``tail()``, ``entries(last)`` read the batches'
  manifests (dicts built by :func:`kafka_batch_provider.core.manifest.build_manifest`), and
  ``append(manifest)`` makes one batch visible, atomically and only if its sequence number
  is still free (``False`` when another writer took it);
* the **files**: Spark tasks write each attempt into ``staging_folder(batch_id)`` of
  ``data``; ``seal`` fixes which files belong to the batch, ``publish`` makes a logged
  batch's files readable (idempotent: it also finishes a publish cut short) and
  ``check_published`` proves they are in place before the Kafka commit;
  ``drop_saved_manifest`` forgets an attempt that lost its entry to another attempt;
* the **dead letters** are published by the store, into ``dead_letter_root``
  (:mod:`kafka_batch_provider.output.dead_letter_files`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa

from kafka_batch_provider.output.location import Location

PARQUET, DELTA, ICEBERG = "parquet", "delta", "iceberg"


class Sink(Protocol):
    #: the name users choose it by (``--format``)
    format: str
    #: where the Spark tasks write the batch's files
    data: Location
    #: where the batches' dead letters are published, relative to ``data``
    dead_letter_root: str

    def entry(self, seq: int) -> dict[str, Any] | None: ...
    def tail_seq(self) -> int: ...
    def tail(self) -> dict[str, Any] | None: ...
    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]: ...
    def append(self, manifest: dict[str, Any]) -> bool: ...

    def staging_folder(self, batch_id: str) -> str: ...
    def seal(self, staging: str, names: list[str]) -> str: ...
    def batch_location(self, batch_id: str, sealed: str) -> str: ...
    def publish(self, entry: dict[str, Any]) -> None: ...
    def check_published(self, entry: dict[str, Any]) -> None: ...
    def clean_staging(self, batch_id: str, keep: str | None = None) -> None: ...
    def drop_saved_manifest(self, manifest: dict[str, Any]) -> None: ...
    def check_columns(self, schema: pa.Schema) -> None: ...

"""Apache Iceberg tables as the output (``--format iceberg``), with pyiceberg (no JVM).

Each batch is one snapshot that registers the batch's files (``add_files``: the Parquet
files the Spark tasks wrote, with no field ids, mapped by name) and whose summary holds the
batch: ``kafka_batch.batch_id``, ``kafka_batch.seq``, ``kafka_batch.offsets`` (the end offset
of every partition, JSON) and the whole manifest (``kafka_batch.manifest``). The plan step
walks the current snapshot's ancestors to the newest batch, as Iceberg's own streaming sink
finds its last epoch. The table is created on first use with the Kafka schema; a decoded
value column is added by schema evolution when a batch brings it.

Exactly one writer gets a batch in: the snapshot is committed on the table state in which
the previous batch was found to be the newest, without pyiceberg's automatic retries (they
would rebase the append over a concurrent one). Whether a table commit is atomic is the
catalog's business (SQL catalogs: one conditional UPDATE; REST catalogs: the server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from kafka_batch_provider.errors import ConfigError, ManifestError, StorageError
from kafka_batch_provider.sinks.base import ICEBERG
from kafka_batch_provider.sinks.table_support import (
    CONTROL,
    KAFKA_SCHEMA,
    MANIFEST_KEY,
    TableFiles,
    files_schema,
    manifest_text,
    parse_manifest,
)
from kafka_batch_provider.storage import Location

COMMIT_ATTEMPTS = 5
SUMMARY_PREFIX = "kafka_batch."
DAY_FIELD = "timestamp_day"


def storage_options_from_catalog(properties: Mapping[str, str]) -> dict[str, Any]:
    """fsspec (s3fs) options from pyiceberg's ``s3.*`` catalog properties, for our own file I/O."""
    options: dict[str, Any] = {}
    client: dict[str, Any] = {}
    secrets = (("s3.access-key-id", "key"), ("s3.secret-access-key", "secret"), ("s3.session-token", "token"))
    for theirs, ours in secrets:
        if properties.get(theirs):
            options[ours] = properties[theirs]
    if properties.get("s3.endpoint"):
        client["endpoint_url"] = properties["s3.endpoint"]
    if properties.get("s3.region"):
        client["region_name"] = properties["s3.region"]
    if client:
        options["client_kwargs"] = client
    return options


def load_catalog(properties: Mapping[str, str]):
    from pyiceberg.catalog import load_catalog as pyiceberg_catalog

    try:
        return pyiceberg_catalog("kafka_batch", **dict(properties))
    except (ValueError, NotImplementedError, ImportError) as exc:
        raise ConfigError(f"the Iceberg catalog cannot be opened: {exc}") from None


def open_iceberg_store(spec: Any, create: bool = True):
    """The store of ``spec.table``: the table is loaded, or created with the Kafka schema."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from kafka_batch_provider.batch_store import BatchStore

    catalog = load_catalog(spec.catalog_properties)
    identifier = spec.table.strip()
    namespace = identifier.rsplit(".", 1)[0]
    try:
        if not create:
            try:
                catalog.load_table(identifier)
            except (NoSuchTableError, NoSuchNamespaceError):
                raise ConfigError(f"the catalog has no Iceberg table {identifier}") from None
        catalog.create_namespace_if_not_exists(namespace)
        table = catalog.create_table_if_not_exists(identifier, schema=KAFKA_SCHEMA)
        if spec.partition_by and not table.spec().fields and table.current_snapshot() is None:
            from pyiceberg.transforms import DayTransform

            with table.update_spec() as update:
                update.add_field("timestamp", DayTransform(), DAY_FIELD)
    except (OSError, ValueError) as exc:
        raise StorageError(f"Iceberg table {identifier}: {exc}") from None
    storage = dict(spec.storage_options) or storage_options_from_catalog(spec.catalog_properties)
    data = Location(table.location(), storage)
    sink = IcebergSink(catalog, identifier, data, spec.partition_by, table.location())
    sink.check_partitioning(catalog.load_table(identifier))
    return BatchStore(data.uri_of(CONTROL), storage, sink)


class IcebergSink(TableFiles):
    """An Iceberg table as output and offset log.

    :param catalog: the pyiceberg catalog.
    :param identifier: ``namespace.name``.
    :param data: the table's location.
    """

    format = ICEBERG

    def __init__(
        self,
        catalog: Any,
        identifier: str,
        data: Location,
        partition_by: str | None = None,
        table_location: str | None = None,
    ) -> None:
        self.catalog = catalog
        # The location exactly as the catalog spells it (pyiceberg does not percent-decode URIs).
        self.table_location = (table_location or data.uri).rstrip("/")
        self.identifier = identifier
        self.data = data
        self.partition_by = partition_by
        self.name = f"Iceberg table {identifier}"
        self._by_seq: dict[int, dict[str, Any]] = {}

    def table(self):
        try:
            return self.catalog.load_table(self.identifier)
        except OSError as exc:
            raise StorageError(f"cannot load {self.name}: {exc}") from None

    def batches(self, table: Any) -> Iterator[dict[str, Any]]:
        """The batches in the current snapshot's ancestry, newest first."""
        from pyiceberg.table.snapshots import ancestors_of

        for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if MANIFEST_KEY not in summary:
                continue
            manifest = parse_manifest(summary[MANIFEST_KEY], f"{self.name} snapshot {snapshot.snapshot_id}")
            manifest["snapshot_id"] = snapshot.snapshot_id
            manifest["committed_at"] = snapshot.timestamp_ms
            self._by_seq[int(manifest["seq"])] = manifest
            yield manifest

    def entry(self, seq: int) -> dict[str, Any] | None:
        if seq < 1:
            return None
        if seq in self._by_seq:
            return self._by_seq[seq]
        for manifest in self.batches(self.table()):
            if int(manifest["seq"]) <= seq:
                return manifest if int(manifest["seq"]) == seq else None
        return None

    def tail(self) -> dict[str, Any] | None:
        """The newest batch, its offsets as the snapshot summary holds them."""
        table = self.table()
        newest = next(self.batches(table), None)
        if newest is None:
            return None
        snapshot = table.snapshot_by_id(newest["snapshot_id"])
        text = snapshot.summary.additional_properties.get(f"{SUMMARY_PREFIX}offsets", "{}")
        try:
            offsets = {str(k): int(v) for k, v in json.loads(text).items()}
        except (ValueError, AttributeError) as exc:
            raise ManifestError(f"{self.name} snapshot {newest['snapshot_id']}: bad offsets ({exc})") from None
        return {**newest, "offsets": offsets}

    def tail_seq(self) -> int:
        newest = next(self.batches(self.table()), None)
        return int(newest["seq"]) if newest else 0

    def entries(self) -> Iterator[dict[str, Any]]:
        return iter(sorted(self.batches(self.table()), key=lambda m: m["seq"]))

    # -- committing a batch ------------------------------------------------------------------

    def append(self, manifest: dict[str, Any]) -> bool:
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

        seq = int(manifest["seq"])
        for _ in range(COMMIT_ATTEMPTS):
            table = self.table()
            newest = next(self.batches(table), None)
            newest_seq = int(newest["seq"]) if newest else 0
            if newest_seq >= seq:
                return False
            if newest_seq != seq - 1:
                raise ManifestError(f"{self.name} holds batch {newest_seq} as its newest: cannot add {seq}")
            if self.evolve_schema(table, manifest):
                continue
            try:
                self._commit(table, manifest)
                self._by_seq.pop(seq, None)
                return True
            except (CommitFailedException, CommitStateUnknownException):
                continue  # the table moved (or we cannot tell): look again
        raise StorageError(f"{self.name} kept changing during {COMMIT_ATTEMPTS} commit attempts")

    def evolve_schema(self, table: Any, manifest: Mapping[str, Any]) -> bool:
        """Add the columns the batch's files bring (e.g. the decoded value); ``True`` if it did."""
        schema = files_schema(self.data, manifest)
        known = {f.name for f in table.schema().fields}
        if all(name in known for name in schema.names):
            return False
        with table.update_schema() as update:
            update.union_by_name(schema)
        return True

    def _commit(self, table: Any, manifest: Mapping[str, Any]) -> None:
        properties = {
            MANIFEST_KEY: manifest_text(manifest),
            f"{SUMMARY_PREFIX}batch_id": str(manifest["batch_id"]),
            f"{SUMMARY_PREFIX}seq": str(manifest["seq"]),
            f"{SUMMARY_PREFIX}offsets": json.dumps(manifest.get("offsets", {}), sort_keys=True),
        }
        transaction = without_retries(table).transaction()
        paths = [f"{self.table_location}/{manifest['location']}/{f['name']}" for f in manifest.get("files", [])]
        if paths:
            transaction.add_files(paths, snapshot_properties=properties, check_duplicate_files=False)
        else:  # an offsets-only batch: an empty append still records where the output stands
            with transaction.update_snapshot(snapshot_properties=properties).fast_append():
                pass
        transaction.commit_transaction()

    def check_partitioning(self, table: Any) -> None:
        found = [f.name for f in table.spec().fields]
        wanted = [DAY_FIELD] if self.partition_by else []
        if found != wanted:
            raise ConfigError(
                f"{self.name} is partitioned by {found or 'nothing'}, this run asks for {wanted or 'no partitioning'} "
                "(--partition-by): use the table's partitioning"
            )


def without_retries(table: Any):
    """The same table, but pyiceberg will not retry (and so rebase) a failed commit.

    pyiceberg reads its retry count from the table's properties when committing; this copy's
    in-memory metadata says 0. Nothing of it is written to the table.
    """
    from pyiceberg.table import Table

    metadata = table.metadata.model_copy(
        update={"properties": {**table.metadata.properties, "commit.retry.num-retries": "0"}}
    )
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)

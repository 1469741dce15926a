"""Apache Iceberg tables as the output (``--format iceberg``), with pyiceberg (no JVM).

Each batch is one snapshot that registers the batch's files (``add_files``: the Parquet
files the Spark tasks wrote, with no field ids, mapped by name) and whose summary holds the
batch id, its entry number and a SHA-256 of its offsets (``kafka_batch.batch_id``,
``kafka_batch.seq``, ``kafka_batch.offsets_sha256``, ``kafka_batch.partitions``); its full
manifest (ranges, offsets, files, counts) is saved in ``_kafka_batch/_batches/`` before the
commit. The summary stays small because every snapshot's summary stays in the table's metadata
file, which each commit rewrites: the offsets of 2,000 partitions made it grow by 32-57 KiB per
batch. (Snapshots of earlier versions hold ``kafka_batch.offsets``, the offsets as JSON.)
The plan step walks the current snapshot's ancestors to the newest batch, as Iceberg's own
streaming sink finds its last epoch. The same commit sets the table properties
``kafka_batch.seq`` and ``kafka_batch.batch_id``: they outlive snapshot expiry, so the
newest batch is known (and its entry number never given twice) after its snapshot expired.
The table is created on first use with the Kafka schema; new columns (a decoded value,
nested fields) are added by schema evolution when a batch brings them.

Exactly one writer gets a batch in: the snapshot is committed on the table state in which
the previous batch was found to be the newest, without pyiceberg's automatic retries (they
would rebase the append over a concurrent one). Whether a table commit is atomic is the
catalog's business (SQL catalogs: one conditional UPDATE; REST catalogs: the server).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.merge_schema import conform
from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, ManifestError, StorageError
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.merge_source import MergeSource, merge_batch, rows_by_key
from kafka_batch_provider.output.sink import ICEBERG
from kafka_batch_provider.output.tables import (
    CONTROL,
    KAFKA_SCHEMA,
    TableFiles,
    attempt_of,
    files_schema,
    one_line,
    same_type,
    schema_change,
)

#: In a batch's snapshot summary and (for the newest batch) the table's properties.
SEQ_KEY, BATCH_ID_KEY, ATTEMPT_KEY = "kafka_batch.seq", "kafka_batch.batch_id", "kafka_batch.attempt"
#: In the table's properties: the newest batch snapshot's sequence number (tells expiry from a rollback).
SNAPSHOT_NUMBER_KEY = "kafka_batch.snapshot_sequence_number"
#: In a batch's snapshot summary: the SHA-256 of its offsets (:func:`offsets_digest`) and their count.
OFFSETS_DIGEST_KEY, PARTITIONS_KEY = "kafka_batch.offsets_sha256", "kafka_batch.partitions"
#: In the summary of snapshots written by earlier versions: ``{"topic:partition": end offset}`` as JSON.
OFFSETS_KEY = "kafka_batch.offsets"
DAY_FIELD = "timestamp_day"
#: Every commit writes a new metadata.json: keep the newest 100 and delete older ones as it
#: commits (pyiceberg honours both), or a year of batches leaves 35,000+ of them.
METADATA_UPKEEP = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


def offsets_digest(offsets: Mapping[str, Any]) -> str:
    """The SHA-256 of ``{"topic:partition": end offset}``, independent of order and number types."""
    canonical = json.dumps({str(k): int(v) for k, v in offsets.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


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


#: The catalog's name when the properties give none (``name``): a SQL catalog files its tables
#: under it, so readers load the catalog by the same name.
DEFAULT_CATALOG_NAME = "kafka_batch"


def load_catalog(properties: Mapping[str, str]):
    from pyiceberg.catalog import load_catalog as pyiceberg_catalog

    settings = dict(properties)
    name = str(settings.pop("name", None) or DEFAULT_CATALOG_NAME)
    try:
        return pyiceberg_catalog(name, **settings)
    except (ValueError, NotImplementedError, ImportError) as exc:
        raise ConfigError(f"the Iceberg catalog cannot be opened: {exc}") from None


def open_iceberg_store(spec: Any, create: bool = True):
    """The store of ``spec.table``: the table is loaded, or (``create``) created with the Kafka schema."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from kafka_batch_provider.output.store import BatchStore

    catalog = load_catalog(spec.catalog_properties)
    identifier = spec.table.strip()
    try:
        try:
            table = catalog.load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            if not create:
                raise ConfigError(f"the catalog has no Iceberg table {identifier}") from None
            table = create_table(catalog, identifier, spec.partition_by)
    except KafkaBatchError:
        raise
    except Exception as exc:  # noqa: BLE001 - catalogs raise their own (SQLAlchemy, HTTP, OS) errors
        raise StorageError(f"Iceberg table {identifier}: {one_line(exc)}") from None
    storage = dict(spec.storage_options) or storage_options_from_catalog(spec.catalog_properties)
    data = Location(table.location(), storage)
    sink = IcebergSink(catalog, identifier, data, spec.partition_by, table.location(), spec.merge)
    sink.adopt_partitioning(table)
    sink.adopt_merge(sink.newest(table))
    return BatchStore(data.uri_of(CONTROL), storage, sink)


def create_table(catalog: Any, identifier: str, partition_by: str | None) -> Any:
    """A new table with the Kafka schema (partitioned by day of ``timestamp`` for ``date``)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.transforms import DayTransform

    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    table = catalog.create_table_if_not_exists(identifier, schema=KAFKA_SCHEMA, properties=METADATA_UPKEEP)
    if partition_by and not table.spec().fields and table.current_snapshot() is None:
        try:
            with table.update_spec() as update:
                update.add_field("timestamp", DayTransform(), DAY_FIELD)
        except CommitFailedException:
            pass  # another writer created and partitioned it first: adopt_partitioning checks it
        table = catalog.load_table(identifier)
    return table


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
        merge: MergeSpec | None = None,
    ) -> None:
        self.catalog = catalog
        self.merge = merge
        # The location exactly as the catalog spells it (pyiceberg does not percent-decode URIs).
        self.table_location = (table_location or data.uri).rstrip("/")
        self.identifier = identifier
        self.data = data
        self.partition_by = partition_by
        self.name = f"Iceberg table {identifier}"
        self.label = self.name
        self._by_seq: dict[int, dict[str, Any]] = {}

    def table(self):
        try:
            return self.catalog.load_table(self.identifier)
        except Exception as exc:  # noqa: BLE001 - catalogs raise their own (SQLAlchemy, HTTP, OS) errors
            raise StorageError(f"cannot load {self.name}: {one_line(exc)}") from None

    def batches(self, table: Any) -> Iterator[tuple[int, dict[str, str], Any]]:
        """``(seq, summary, snapshot)`` of the batches in the current snapshot's ancestry, newest first."""
        from pyiceberg.table.snapshots import ancestors_of

        for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if SEQ_KEY in summary and BATCH_ID_KEY in summary:
                yield int(summary[SEQ_KEY]), summary, snapshot

    def manifest(self, seq: int, names: Mapping[str, str], snapshot: Any = None) -> dict[str, Any]:
        """The committed attempt's saved manifest (``names``: a batch snapshot's summary or the
        table's properties), checked against the snapshot's offsets."""
        if seq not in self._by_seq:
            manifest = self.saved_manifest(seq, str(names[BATCH_ID_KEY]), str(names.get(ATTEMPT_KEY, "none")))
            if snapshot is not None:
                summary = snapshot.summary.additional_properties
                if OFFSETS_DIGEST_KEY in summary:
                    digest = summary[OFFSETS_DIGEST_KEY]
                else:
                    try:
                        digest = offsets_digest(json.loads(summary.get(OFFSETS_KEY, "{}")))
                    except (ValueError, AttributeError, TypeError) as exc:
                        raise ManifestError(
                            f"{self.name} snapshot {snapshot.snapshot_id}: bad offsets ({exc})"
                        ) from None
                if digest != offsets_digest(manifest.get("offsets", {})):
                    raise ManifestError(
                        f"{self.name} snapshot {snapshot.snapshot_id}: its offsets differ from batch "
                        f"{names[BATCH_ID_KEY]}'s saved manifest; was the table written by another tool?"
                    )
                manifest["snapshot_id"] = snapshot.snapshot_id
                manifest["committed_at"] = snapshot.timestamp_ms
            self._by_seq[seq] = manifest
        return self._by_seq[seq]

    def newest(self, table: Any) -> dict[str, Any] | None:
        """The newest batch in the ancestry; the one the table's properties name if its snapshot expired."""
        found = next(self.batches(table), None)
        committed = table.properties.get(SEQ_KEY)
        if committed is not None and (found is None or found[0] < int(committed)) and self._expired(table):
            return {**self.manifest(int(committed), table.properties), "forgotten_by_table": True}
        return self.manifest(*found) if found else None

    def _expired(self, table: Any) -> bool:
        """Whether the batch the table's properties name is in the current state's lineage, its
        snapshot expired, rather than rolled back (its data is then not in the table).

        Snapshot sequence numbers only grow: walking the ancestry from the current snapshot,
        one below the batch's number means the lineage passed it by (a rollback); a chain that
        ends above it lost its older snapshots to expiry, the batch's among them. What no
        metadata can tell: a rollback, then another tool's commit, then expiry of the
        rolled-back snapshot and of every snapshot below that commit reads as expiry.
        """
        from pyiceberg.table.snapshots import ancestors_of

        number = int(table.properties.get(SNAPSHOT_NUMBER_KEY, 0))
        current = table.current_snapshot()
        if current is None:
            return False
        if number <= 0:  # a format-version 1 table has no sequence numbers: is the batch's snapshot gone?
            committed = table.properties.get(SEQ_KEY)
            return not any(
                s.summary is not None and s.summary.additional_properties.get(SEQ_KEY) == committed
                for s in table.metadata.snapshots
            )
        for snapshot in ancestors_of(current, table.metadata):
            if (snapshot.sequence_number or 0) < number:
                return False
        return True

    def look_up(self, seq: int) -> dict[str, Any] | None:
        table = self.table()
        passed_below = False  # the ancestry holds an older batch, so ``seq`` is not in this lineage
        for found_seq, summary, snapshot in self.batches(table):
            if found_seq <= seq:
                if found_seq == seq:
                    return self.manifest(found_seq, summary, snapshot)
                passed_below = True
                break
        newest = self.newest(table)
        if newest is not None and seq == int(newest["seq"]):
            return newest
        if newest is not None and seq < int(newest["seq"]) and not passed_below:
            return self.forgotten_entry(seq)  # committed, then its snapshot expired (the chain ends above it)
        return None

    def tail(self) -> dict[str, Any] | None:
        return self.newest(self.table())

    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]:
        table = self.table()
        found = islice(self.batches(table), last)  # newest first: with ``last``, only as many as needed
        return iter(self.log_entries(table, [self.manifest(*f) for f in found], last))

    # -- committing a batch ------------------------------------------------------------------

    def commit_once(self, table: Any, manifest: dict[str, Any]) -> bool:
        from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

        try:
            if self.merging:  # the schema-only commits first, then the batch on the new state
                merged = merge_batch(self, manifest, table)
                for _ in range(3):  # unused columns dropped, columns added or widened
                    if not self.evolve_schema(table, merged.row_schema):
                        break
                    table = self.table()
                if self.newest_seq(table) != int(manifest["seq"]) - 1:
                    return False  # another writer committed a batch since: look again (this entry may be taken)
            else:
                merged = None
                if self.evolve_schema(table, files_schema(self.data, manifest)):
                    return False  # a schema-only commit first: the batch goes on the new state
            self.save_manifest(manifest)
            if merged is not None:
                self._merge(table, manifest, merged)
            else:
                self._commit(table, manifest)
            return True
        except (CommitFailedException, CommitStateUnknownException):
            return False  # the table moved (or we cannot tell): look again
        except KafkaBatchError:
            raise
        except ValueError as exc:  # pyiceberg's schema check of the files: no retry makes them fit
            raise ConfigError(
                f"{self.name}: batch {manifest['batch_id']}'s files do not fit the table's schema: {one_line(exc)}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - catalogs raise their own (SQLAlchemy, HTTP, OS) errors
            raise StorageError(f"{self.name}: batch {manifest['batch_id']} not committed: {one_line(exc)}") from None

    def evolve_schema(self, table: Any, schema: pa.Schema) -> bool:
        """Add the columns (nested ones too) the batch's files bring, make optional those they hold
        as nullable, and widen the numbers they promote (int to long, float to double: Iceberg's
        type promotions); pyiceberg's union by name does all three. ``True`` if it changed the table.

        The table is created with the Kafka columns before its first batch is read: that batch
        decides its columns (typed values without ``--keep-raw-value`` have no ``value``, and a
        value field named ``value`` takes its own type; a merged table, its rows' columns)."""
        current = table.schema().as_arrow()
        unused = []
        if table.current_snapshot() is None:
            unused = [f.name for f in current if f.name not in schema.names or not same_type(f, schema.field(f.name))]
            current = pa.schema([f for f in current if f.name not in unused])
        if not schema_change(current, schema, self.name, promotions=True) and not unused:
            return False
        with without_retries(table).update_schema() as update:
            if unused:  # first, in a commit of its own: a column cannot be dropped and added at once
                for name in unused:
                    update.delete_column(name)
            else:
                update.union_by_name(schema)
        return True

    def _transaction(self, table: Any, manifest: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
        """A transaction on ``table`` (no retries) and the batch's snapshot summary."""
        names = {
            SEQ_KEY: str(manifest["seq"]),
            BATCH_ID_KEY: str(manifest["batch_id"]),
            ATTEMPT_KEY: attempt_of(manifest),
        }
        offsets = manifest.get("offsets", {})
        summary = {**names, OFFSETS_DIGEST_KEY: offsets_digest(offsets), PARTITIONS_KEY: str(len(offsets))}
        return without_retries(table).transaction(), summary

    @staticmethod
    def _name_batch(transaction: Any, summary: Mapping[str, str]) -> None:
        """The batch in the table's properties, in the same commit as its snapshot (added next:
        it takes the transaction's next sequence number)."""
        names = {key: summary[key] for key in (SEQ_KEY, BATCH_ID_KEY, ATTEMPT_KEY)}
        number = transaction.table_metadata.next_sequence_number()
        transaction.set_properties({**names, SNAPSHOT_NUMBER_KEY: str(number)})

    def rows_at(
        self,
        table: Any,
        key_columns: Sequence[str],
        keys: Collection[tuple],
        columns: Sequence[str],
        snapshot_id: int | None = None,
    ) -> dict:
        """The rows of ``table`` (its current snapshot, or ``snapshot_id``) at ``keys``: their key and
        ``columns`` (those it has)."""
        from functools import reduce

        from pyiceberg.expressions import And, In

        if table.current_snapshot() is None:
            return {}
        names = table.schema().as_arrow().names
        wanted = [c for c in columns if c in names and c not in key_columns]
        match = reduce(And, [In(k, {key[i] for key in keys}) for i, k in enumerate(key_columns)])
        scan = table.scan(row_filter=match, selected_fields=(*key_columns, *wanted), snapshot_id=snapshot_id)
        return rows_by_key(scan.to_arrow(), key_columns, keys)

    def rows_before(
        self, seq: int, key_columns: Sequence[str], keys: Collection[tuple], columns: Sequence[str]
    ) -> dict:
        """:meth:`rows_at` on the table as it was before batch ``seq``'s snapshot (``{}`` once expired)."""
        snapshot_id = (self.look_up(seq) or {}).get("snapshot_id")
        table = self.table()
        snapshot = table.snapshot_by_id(int(snapshot_id)) if snapshot_id is not None else None
        if snapshot is None or snapshot.parent_snapshot_id is None:
            return {}
        return self.rows_at(table, key_columns, keys, columns, snapshot.parent_snapshot_id)

    def _merge(self, table: Any, manifest: dict[str, Any], merged: MergeSource) -> None:
        """The batch as one copy-on-write snapshot carrying its summary
        (:mod:`kafka_batch_provider.output.iceberg_merge`)."""
        from kafka_batch_provider.output.iceberg_merge import merge_into

        transaction, summary = self._transaction(table, manifest)
        source = conform(merged.source, table.schema().as_arrow(), self.name)
        self._name_batch(transaction, summary)
        merge_into(table, transaction, merged, source, summary)
        transaction.commit_transaction()

    def _commit(self, table: Any, manifest: Mapping[str, Any]) -> None:
        transaction, summary = self._transaction(table, manifest)
        self._name_batch(transaction, summary)
        paths = [f"{self.table_location}/{manifest['location']}/{f['name']}" for f in manifest.get("files", [])]
        if paths:
            transaction.add_files(paths, snapshot_properties=summary, check_duplicate_files=False)
        else:  # an offsets-only batch: an empty append still records where the output stands
            with transaction.update_snapshot(snapshot_properties=summary).fast_append():
                pass
        transaction.commit_transaction()

    def adopt_partitioning(self, table: Any) -> None:
        """Follow the existing table's partitioning; refuse a different explicit ``--partition-by``."""
        if self.partition_by is None and [f.name for f in table.spec().fields] == [DAY_FIELD]:
            self.partition_by = "date"
        self.check_partitioning(table)

    def check_partitioning(self, table: Any) -> None:
        self.keep_partitioning([f.name for f in table.spec().fields], [DAY_FIELD])


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

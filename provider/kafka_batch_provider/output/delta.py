"""Delta Lake tables as the output (``--format delta``), with delta-rs (no JVM).

Each batch is one Delta commit that adds the batch's files and carries its offsets, the way
kafka-delta-ingest does: one ``txn`` action per topic-partition (app id
``kafka-batch/<group>/<topic>:<partition>``, version = the batch's end offset), one more
each for the batch's entry number, id and attempt (app ids ``kafka-batch/seq``,
``kafka-batch/batch``, ``kafka-batch/attempt``) and the batch's manifest in the commit info
(``kafka_batch.manifest``).
The table is the offset log: the plan step reads the newest batch back from the table's
history and its offsets from the ``txn`` actions (``DeltaTable.transaction_version``).
``txn`` actions outlive log cleanup (checkpoints keep them); when the history no longer
holds the newest batch's commit, its saved manifest (``_kafka_batch/_batches/``) stands in,
so an entry number is never given twice.

Exactly one writer gets a batch in: the commit is made from the snapshot in which the
previous batch was found to be the newest, with ``max_commit_retries=0``, so delta-rs never
rebases it over a concurrent commit (it would: appends do not conflict, and delta-rs does
not check ``txn`` app ids of concurrent commits). A lost race is re-checked from the new
snapshot: another batch took the slot (refused), or a commit that is not a batch (e.g. an
``optimize``) came between (committed again from the new snapshot).

Object stores: local disks, GCS and Azure make Delta commits atomic by themselves; on S3 a
Delta commit needs conditional writes (``conditional_put=etag``, set by default here: AWS S3,
MinIO and R2 support it) or delta-rs's DynamoDB locking provider
(``AWS_S3_LOCKING_PROVIDER=dynamodb`` in ``delta_options``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import pyarrow as pa

from kafka_batch_provider.core.merge_schema import conform, map_children, union_schema
from kafka_batch_provider.core.merging import DELETE_OP, OP_COLUMN, ORDER_COLUMN, UPSERT_OP, MergeSpec
from kafka_batch_provider.errors import ConfigError, ManifestError, StorageError
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.merge_source import MergeSource, merge_batch, rows_by_key
from kafka_batch_provider.output.sink import DELTA
from kafka_batch_provider.output.tables import (
    CONTROL,
    MANIFEST_KEY,
    TableFiles,
    attempt_of,
    files_schema,
    leaf_types,
    manifest_text,
    one_line,
    parse_manifest,
    relaxed_schema,
    s3_settings,
    schema_change,
)

#: How many partitions' ``txn`` actions the plan step checks against the newest batch's manifest.
TXN_CHECKS = 16
#: History read per step when looking for batches (most lookups need the newest one or two).
HISTORY_STEP = 20
DATE_COLUMN = "date"
#: ``txn`` app ids naming the newest batch: its entry number, its id and its attempt (as numbers).
SEQ_APP_ID, BATCH_APP_ID, ATTEMPT_APP_ID = "kafka-batch/seq", "kafka-batch/batch", "kafka-batch/attempt"


def as_number(hex_id: str) -> int:
    """A batch id (``b-<hex>``) or an attempt (hex) as a ``txn`` version: its first 60 bits; -1 for others."""
    digits = hex_id.removeprefix("b-")[:15]
    try:
        return int(digits, 16)
    except ValueError:
        return -1


def app_id(group_id: str | None, key: str) -> str:
    """The ``txn`` app id of one topic-partition (``key`` is ``topic:partition``)."""
    return f"kafka-batch/{group_id or '-'}/{key}"


def delta_storage_options(location: Location) -> dict[str, str]:
    """delta-rs (object_store) options from our fsspec storage options (s3fs, gcsfs, adlfs).

    ``delta_options`` inside the storage options passes delta-rs settings through as they are.
    """
    options = dict(location.storage_options)
    extra = {str(k): str(v) for k, v in dict(options.pop("delta_options", None) or {}).items()}
    if location.protocol == "s3":
        return {**s3_object_store_options(options), **extra}
    if location.protocol in ("gs", "gcs"):
        return {**gcs_object_store_options(options), **extra}
    if location.protocol in ("abfs", "abfss", "az", "adl"):
        return {**azure_object_store_options(options), **extra}
    return extra


def s3_object_store_options(options: Mapping[str, Any]) -> dict[str, str]:
    s3 = s3_settings(options)
    result = {"conditional_put": "etag"}
    for ours, theirs in (
        ("key", "AWS_ACCESS_KEY_ID"),
        ("secret", "AWS_SECRET_ACCESS_KEY"),
        ("token", "AWS_SESSION_TOKEN"),
        ("endpoint_url", "AWS_ENDPOINT_URL"),
        ("region", "AWS_REGION"),
    ):
        if s3[ours]:
            result[theirs] = str(s3[ours])
    if str(s3["endpoint_url"] or "").startswith("http://"):
        result["AWS_ALLOW_HTTP"] = "true"
    return result


def gcs_object_store_options(options: Mapping[str, Any]) -> dict[str, str]:
    """gcsfs's ``token`` (a service account key as a dict, or a key file's path)."""
    token = options.get("token")
    if isinstance(token, Mapping):
        return {"google_service_account_key": json.dumps(dict(token))}
    if isinstance(token, str) and token not in ("google_default", "cloud", "anon", "browser", "cache"):
        return {"google_service_account": token}
    return {}


def azure_object_store_options(options: Mapping[str, Any]) -> dict[str, str]:
    """adlfs's account name and key, SAS token, service principal or connection string."""
    settings = dict(options)
    if settings.get("connection_string"):  # AccountName=...;AccountKey=...;...
        parts = dict(p.split("=", 1) for p in str(settings["connection_string"]).split(";") if "=" in p)
        settings.setdefault("account_name", parts.get("AccountName"))
        settings.setdefault("account_key", parts.get("AccountKey"))
        settings.setdefault("sas_token", parts.get("SharedAccessSignature"))
        # A non-default endpoint (Azurite, a sovereign cloud) is part of the string for adlfs.
        settings.setdefault("blob_endpoint", parts.get("BlobEndpoint"))
    result = {}
    if settings.get("blob_endpoint"):
        result["azure_storage_endpoint"] = str(settings["blob_endpoint"]).rstrip("/")
        if result["azure_storage_endpoint"].startswith("http://"):
            result["allow_http"] = "true"
    for ours, theirs in (
        ("account_name", "azure_storage_account_name"),
        ("account_key", "azure_storage_account_key"),
        ("sas_token", "azure_storage_sas_key"),
        ("tenant_id", "azure_storage_tenant_id"),
        ("client_id", "azure_storage_client_id"),
        ("client_secret", "azure_storage_client_secret"),
    ):
        if settings.get(ours):
            result[theirs] = str(settings[ours])
    return result


def open_delta_store(spec: Any):
    """The store of the Delta table at ``spec.output`` (created by its first batch's commit);
    plans and commit records in its ``_kafka_batch/`` folder."""
    from kafka_batch_provider.output.store import BatchStore

    data = Location(str(spec.output), dict(spec.storage_options))
    sink = DeltaSink(data, spec.partition_by, spec.merge)
    existing = sink.table()
    if existing is not None:
        sink.adopt_partitioning(existing)
        sink.adopt_merge(sink.newest(existing))
    return BatchStore(data.uri_of(CONTROL), dict(spec.storage_options), sink)


class DeltaSink(TableFiles):
    """A Delta table as output and offset log.

    :param location: the table's location (its root folder, holding ``_delta_log/``).
    :param partition_by: ``"date"``: partition by the UTC date of the Kafka timestamp.
    """

    format = DELTA

    def __init__(self, location: Location, partition_by: str | None = None, merge: MergeSpec | None = None) -> None:
        self.data = location
        self.partition_by = partition_by
        self.merge = merge
        self.name = location.uri
        self.label = f"Delta table {self.name}"
        self._table_uri = location.root if location.is_local else location.uri
        self._options = delta_storage_options(location)
        self._by_seq: dict[int, dict[str, Any]] = {}  # batches never change once committed
        self._table: Any = None

    # -- reading the table -------------------------------------------------------------------

    def table(self):
        """The Delta table at its newest version, or ``None`` while it does not exist.

        One ``DeltaTable`` is kept and brought up to date (reading only the new commits)
        rather than loaded from its last checkpoint on every call.
        """
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            if self._table is None:
                self._table = DeltaTable(self._table_uri, storage_options=self._options)
            else:
                self._table.update_incremental()
            return self._table
        except TableNotFoundError:
            return None
        except (OSError, DeltaError) as exc:
            raise StorageError(f"cannot read the Delta table {self.name}: {one_line(exc)}") from None

    def table_at(self, version: int):
        """The table as of ``version`` (a reader's own copy: the sink's stays at the newest)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        try:
            return DeltaTable(self._table_uri, version=version, storage_options=self._options)
        except (OSError, DeltaError) as exc:
            raise StorageError(
                f"cannot read version {version} of the Delta table {self.name}: {one_line(exc)}"
            ) from None

    def batches(self, table: Any) -> Iterator[dict[str, Any]]:
        """The batches' manifests in the table's history up to its loaded version, newest first."""
        limit = HISTORY_STEP
        seen = 0
        loaded = table.version()
        restored: tuple[int, str, int] | None = None  # the newest RESTORE: its version, and restore_target()
        while True:
            history = table.history(limit)
            for info in history[seen:]:
                version = int(info["version"])
                if version > loaded:
                    continue  # history() lists the log as it is now, maybe past the version ``table`` holds
                if info.get("operation") == "RESTORE" and restored is None:
                    restored = (version, *restore_target(info))
                if MANIFEST_KEY in info and restored is not None and restored_away(info, restored[1], restored[2]):
                    # The batch's files left the table, its txn offsets did not: nothing here can say
                    # where the output stands.
                    raise ManifestError(
                        f"Delta table {self.name} was restored (version {restored[0]}) to before a batch's commit "
                        f"(version {version}): its offsets would count without its data; restoring a table this "
                        "provider writes is not supported: restore it forward, or ingest into a new table"
                    )
                if MANIFEST_KEY in info:
                    where = f"Delta table {self.name} version {info['version']}"
                    manifest = parse_manifest(str(info[MANIFEST_KEY]), where)
                    manifest["table_version"] = int(info["version"])
                    manifest["committed_at"] = info.get("timestamp")
                    self._by_seq[int(manifest["seq"])] = manifest
                    yield manifest
            if len(history) < limit:
                return
            seen, limit = len(history), limit * 4

    def newest(self, table: Any) -> dict[str, Any] | None:
        """The newest batch; its saved manifest when the history no longer holds its commit."""
        if table is None:
            return None
        found = next(self.batches(table), None)
        committed = table.transaction_version(SEQ_APP_ID)
        if committed is None or (found is not None and int(found["seq"]) >= int(committed)):
            return found
        return self._forgotten(table, int(committed))

    def _forgotten(self, table: Any, seq: int) -> dict[str, Any]:
        def is_committed(manifest: Mapping[str, Any]) -> bool:
            """The newest batch's txn actions name its id and attempt."""
            return table.transaction_version(BATCH_APP_ID) == as_number(str(manifest["batch_id"])) and (
                table.transaction_version(ATTEMPT_APP_ID) == as_number(attempt_of(manifest))
            )

        newest = table.transaction_version(SEQ_APP_ID) == seq
        manifest = self.forgotten_entry(seq, is_committed if newest else None)
        self._by_seq[seq] = manifest
        return manifest

    def look_up(self, seq: int) -> dict[str, Any] | None:
        table = self.table()
        if table is None:
            return None
        for manifest in self.batches(table):
            if int(manifest["seq"]) <= seq:
                if int(manifest["seq"]) == seq:
                    return manifest
                break
        committed = table.transaction_version(SEQ_APP_ID)
        if committed is not None and seq <= int(committed):
            return self._forgotten(table, seq)  # committed, then dropped from the history
        return None

    def tail(self) -> dict[str, Any] | None:
        """The newest batch, its offsets checked against the table's ``txn`` actions.

        The batch's commit wrote its manifest and every partition's ``txn`` at once, so they
        agree unless another tool wrote ``txn`` actions with our app ids. delta-rs looks an app
        id up by scanning every ``txn`` of the table (3 ms each at 2,000 partitions): checking
        all of them made the plan step grow with the partitions squared (6.8 s at 2,000), so
        :data:`TXN_CHECKS` of them, spread over the partitions, are checked.
        """
        table = self.table()
        newest = self.newest(table)
        if newest is None:
            return None
        offsets = {key: int(offset) for key, offset in newest.get("offsets", {}).items()}
        keys = sorted(offsets)
        for key in keys[:: max(1, -(-len(keys) // TXN_CHECKS))]:
            version = table.transaction_version(app_id(newest.get("group_id"), key))
            if version is not None and int(version) != offsets[key]:
                raise ManifestError(
                    f"Delta table {self.name}: the txn of {key} says {version}, batch {newest['batch_id']} ended at "
                    f"{offsets[key]}; was the table written by another tool with our app ids?"
                )
        return {**newest, "offsets": offsets}

    def entries(self, last: int | None = None) -> Iterator[dict[str, Any]]:
        table = self.table()
        if table is None:
            return iter(())
        # Newest first: with ``last``, only as many as needed (older ones come as the walk needs them).
        return iter(self.log_entries(table, list(islice(self.batches(table), last)), last))

    def replaced_since(self, entry: Mapping[str, Any], names: list[str]) -> bool:
        """A later commit that is not a batch (``optimize``, which may replace only some of a
        batch's files) took ``names`` out of the table, and ``vacuum`` may then delete them:
        none of them is still named by the table, which moved on after the batch's commit."""
        table = self.table()
        if table is None or int(entry.get("table_version", table.version())) >= table.version():
            return False
        current = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())  # arro3 -> pyarrow
        return not {f"{entry['location']}/{name}" for name in names} & current

    # -- committing a batch ------------------------------------------------------------------

    def commit_once(self, table: Any, manifest: dict[str, Any]) -> bool:
        """One Delta commit: the batch's files, a ``txn`` per partition and the manifest."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        if int(manifest["seq"]) == 1:
            self.refuse_unconditional_store()
        try:
            merged = merge_batch(self, manifest, table) if self.merging else None
            self.save_manifest(manifest)
            self._commit(table, manifest, merged)
            return True
        except CommitFailedError:
            return False  # the table moved: look again
        except DeltaError as exc:
            if "already exists" in str(exc):
                return False  # another writer created the table first
            raise StorageError(f"Delta commit to {self.name} failed: {one_line(exc)}") from None

    def refuse_unconditional_store(self) -> None:
        """Before the table's first batch: a Delta commit is "create ``_delta_log/<version>.json``
        unless it exists". A store that ignores that condition (some S3-compatible stores ignore
        ``If-None-Match``) would let two attempts of one batch both commit, each then deleting the
        other's files, and the table would point at missing files for good."""
        if any(key.upper() == "AWS_S3_LOCKING_PROVIDER" for key in self._options):
            return  # delta-rs's locking provider makes its commits exclusive without the store's help
        self.data.require_exclusive_create("_delta_log", f"the commits of {self.label}")

    def _commit(self, table: Any, manifest: dict[str, Any], merged: MergeSource | None = None) -> None:
        from deltalake import CommitProperties, Schema, Transaction
        from deltalake.transaction import create_table_with_add_actions

        now = int(time.time() * 1000)
        properties = CommitProperties(
            custom_metadata={MANIFEST_KEY: manifest_text(manifest)},
            max_commit_retries=0,
            app_transactions=[
                Transaction(SEQ_APP_ID, int(manifest["seq"]), now),
                Transaction(BATCH_APP_ID, as_number(str(manifest["batch_id"])), now),
                Transaction(ATTEMPT_APP_ID, as_number(attempt_of(manifest)), now),
                *(
                    Transaction(app_id(manifest.get("group_id"), f"{r['topic']}:{r['partition']}"), int(r["end"]), now)
                    for r in manifest["ranges"]
                ),
            ],
        )
        if merged is not None:
            self._merge(table, merged, properties, int(manifest["seq"]))
            return
        schema = self.table_schema(files_schema(self.data, manifest))
        actions = self.add_actions(manifest, now)
        partition_by = [DATE_COLUMN] if self.partition_by else None
        if table is None:
            create_table_with_add_actions(
                self._table_uri,
                Schema.from_arrow(schema),
                actions,
                mode="error",
                partition_by=partition_by,
                storage_options=self._options,
                commit_properties=properties,
            )
            return
        current = pa.schema(table.schema().to_arrow())
        self.check_partitioning(table)
        change = schema_change(current, schema, f"Delta table {self.name}")
        if change.added:
            # e.g. the decoded value asked for after the first batch: a schema-only commit first
            self.evolve_schema(schema)
            raise_commit_retry()
        if change.relaxed:
            self.relax_schema(relaxed_schema(current, schema))
            raise_commit_retry()
        table.create_write_transaction(
            actions, "append", schema=current, partition_by=partition_by, commit_properties=properties
        )

    def _merge(self, table: Any, merged: MergeSource, properties: Any, seq: int) -> None:
        """The batch as one MERGE commit carrying its offsets (the ``txn`` actions and manifest of
        ``properties``): each key's newest change, applied only where newer than the row. An
        upsert replaces the whole row (a column the change does not carry becomes null), except a
        column the change left unavailable (TOAST), which keeps the row's value."""
        from deltalake import write_deltalake

        if table is None:
            # The table's first commit holds only its schema; the batch merges into it next (on
            # that version: a concurrent commit still fails ours, and the batch is planned again).
            write_deltalake(
                self._table_uri, merged.row_schema.empty_table(), mode="append", storage_options=self._options
            )
            table = self.table()
        target = pa.schema(table.schema().to_arrow())
        for _ in range(2):  # columns added, then made nullable
            if not self.follow_schema(target, merged.row_schema):
                break
            table = self.table()
            target = pa.schema(table.schema().to_arrow())
        if self.newest_seq(table) != seq - 1:
            raise_commit_retry()  # another writer committed a batch since: look again (this entry may be taken)
        if not merged.source.num_rows and merged.truncated_at is None:
            table.create_write_transaction([], "append", schema=target, commit_properties=properties)
            return
        source = conform(merged.source, target, self.label)
        merger = table.merge(
            source,
            # (a batch of truncates only has no key: every row is then "not matched by source")
            " AND ".join(f"t.{quoted(k)} = s.{quoted(k)}" for k in merged.key_columns) or "false",
            source_alias="s",
            target_alias="t",
            # (the source is in memory already; not streamed, delta-rs prunes the table's files by the
            # source keys' range, so a snapshot's new keys scan none: the join's memory grew with the table)
            streamed_exec=False,
            commit_properties=properties,
        )
        newer = f"s.{ORDER_COLUMN} > t.{ORDER_COLUMN}"
        upsert = f"s.{OP_COLUMN} = '{UPSERT_OP}'"
        merger = merger.when_matched_delete(predicate=f"s.{OP_COLUMN} = '{DELETE_OP}' AND {newer}")
        columns = merged.row_columns
        updates = {c: f"s.{quoted(c)}" for c in columns}
        updates.update({c: "NULL" for c in target.names if c not in updates})  # the whole row is replaced
        for column, flag in merged.keep.items():
            updates[column] = f"CASE WHEN s.{quoted(flag)} THEN t.{quoted(column)} ELSE s.{quoted(column)} END"
        merger = merger.when_matched_update(
            updates={quoted(c): e for c, e in updates.items()}, predicate=f"{upsert} AND {newer}"
        )
        merger = merger.when_not_matched_insert(
            updates={quoted(c): f"s.{quoted(c)}" for c in columns}, predicate=upsert
        )
        if merged.truncated_at is not None:
            merger = merger.when_not_matched_by_source_delete(predicate=f"t.{ORDER_COLUMN} < '{merged.truncated_at}'")
        version = table.version()
        merger.execute()
        if table.version() == version:  # a merge that changed nothing commits nothing: record the batch
            table.create_write_transaction([], "append", schema=target, commit_properties=properties)

    def rows_at(self, table: Any, key_columns: Sequence[str], keys: Collection[tuple], columns: Sequence[str]) -> dict:
        """The rows of ``table`` (this version) at ``keys``: their key and ``columns`` (those it has).
        File by file, the key columns first, then the columns of the files holding a wanted key. Read
        without a filter and cast to plain types: delta-rs's merge writes strings as views, which
        pyarrow's filter and ``is_in`` do not take."""
        import pyarrow.compute as pc

        found = {}
        candidates = files_holding(table, key_columns[0], [key[0] for key in keys]) if key_columns else None
        for fragment in table.to_pyarrow_dataset().get_fragments():
            if candidates is not None and fragment.path in candidates[1] and fragment.path not in candidates[0]:
                continue  # its first key column's range holds none of the keys
            names = fragment.physical_schema.names
            key_table = plain(fragment.to_table(columns=list(key_columns)))
            match = None
            for i, k in enumerate(key_columns):
                one = pc.field(k).isin(pa.array(list({key[i] for key in keys}), key_table.schema.field(k).type))
                match = one if match is None else match & one
            if not key_table.filter(match).num_rows:
                continue
            wanted = [c for c in columns if c in names and c not in key_columns]
            rows = plain(fragment.to_table(columns=[*key_columns, *wanted])).filter(match)
            found.update(rows_by_key(rows, key_columns, keys))
        return found

    def rows_before(
        self, seq: int, key_columns: Sequence[str], keys: Collection[tuple], columns: Sequence[str]
    ) -> dict:
        """:meth:`rows_at` on the table as it was before batch ``seq``'s commit (``{}`` once vacuumed away)."""
        entry = self.look_up(seq)
        version = (entry or {}).get("table_version")
        if version is None or int(version) < 1:
            return {}
        try:
            return self.rows_at(self.table_at(int(version) - 1), key_columns, keys, columns)
        except (StorageError, FileNotFoundError, OSError):
            return {}  # (that version's files are gone: the value is unknown, counted as unresolved)

    def follow_schema(self, target: pa.Schema, batch: pa.Schema) -> bool:
        """Before a merge: the columns and nested fields the batch brings added to the table, or
        the columns it holds as nullable made so, in a commit without files (``True``: then the
        batch is merged on the new state). Numbers are not widened: merged tables hold them wide from the
        start (:mod:`kafka_batch_provider.core.merge_schema`), and delta-rs cannot widen a column."""
        change = schema_change(target, batch, f"Delta table {self.name}", promotions=True)
        if change.added:
            self.evolve_schema(union_schema(target, batch))
        elif change.relaxed:
            self.relax_schema(relaxed_schema(target, batch))
        return bool(change.added or change.relaxed)

    def evolve_schema(self, schema: pa.Schema) -> None:
        """Merge ``schema`` (new columns, nested ones too) into the table's, in a commit without files."""
        from deltalake import write_deltalake

        write_deltalake(
            self._table_uri,
            schema.empty_table(),
            mode="append",
            schema_mode="merge",
            partition_by=[DATE_COLUMN] if self.partition_by else None,
            storage_options=self._options,
        )

    def relax_schema(self, schema: pa.Schema) -> None:
        """Make the table's schema ``schema`` (the same columns, more of them nullable) in a commit
        without files. Delta's schema merge keeps a column's "never null" and delta-rs can drop it
        only from a top-level column, so this replaces the schema in an overwrite of no rows (the
        predicate matches none: nothing is removed, only the schema is written)."""
        from deltalake import write_deltalake

        write_deltalake(
            self._table_uri,
            schema.empty_table(),
            mode="overwrite",
            predicate="false",
            schema_mode="overwrite",
            partition_by=[DATE_COLUMN] if self.partition_by else None,
            storage_options=self._options,
        )

    def table_schema(self, files: pa.Schema) -> pa.Schema:
        return files.append(pa.field(DATE_COLUMN, pa.date32())) if self.partition_by else files

    def check_columns(self, schema: pa.Schema) -> None:
        """Delta has no time-of-day type and no column of nulls only: refused before anything is read."""
        TableFiles.check_columns(self, schema)  # the decimals both table formats refuse
        for path, kind in leaf_types(schema):
            if pa.types.is_time(kind) or pa.types.is_null(kind):
                raise ConfigError(
                    f"Delta table {self.name}: column {path} would be {kind}, which Delta tables cannot hold "
                    "(no time-of-day type, no null-only column); write this topic to Parquet or Iceberg, or "
                    "change the field's type"
                )

    def adopt_partitioning(self, table: Any) -> None:
        """Follow the existing table's partitioning; refuse a different explicit ``--partition-by``."""
        found = list(table.metadata().partition_columns)
        if self.partition_by is None and found == [DATE_COLUMN]:
            self.partition_by = "date"
        self.check_partitioning(table)

    def check_partitioning(self, table: Any) -> None:
        self.keep_partitioning(list(table.metadata().partition_columns), [DATE_COLUMN])

    def add_actions(self, manifest: Mapping[str, Any], now: int) -> list[Any]:
        from deltalake.transaction import AddAction

        return [
            AddAction(
                f"{manifest['location']}/{f['name']}",
                int(f["bytes"]),
                {DATE_COLUMN: (f.get("partition") or {}).get("date")} if self.partition_by else {},
                now,
                True,
                json.dumps({"numRecords": int(f["rows"])}),
            )
            for f in manifest.get("files", [])
        ]


def restore_target(info: Mapping[str, Any]) -> tuple[str, int]:
    """What a RESTORE commit went back to: ``("version", n)`` or ``("time", epoch ms)``;
    ``("unknown", -1)`` when its parameters do not say (every earlier batch then counts as undone)."""
    from datetime import datetime

    parameters = info.get("operationParameters") or {}
    for key, kind in (("version", "version"), ("datetime", "time"), ("timestamp", "time")):
        value = parameters.get(key)
        if value in (None, "", "null"):
            continue
        try:
            return kind, int(value)
        except (TypeError, ValueError):
            try:
                return kind, int(datetime.fromisoformat(str(value)).timestamp() * 1000)
            except ValueError:
                continue
    return "unknown", -1


def restored_away(info: Mapping[str, Any], kind: str, target: int) -> bool:
    """Whether the commit ``info`` lies after the point a RESTORE went back to."""
    if kind == "version":
        return int(info["version"]) > target
    if kind == "time":
        return int(info.get("timestamp") or 0) > target
    return True


def files_holding(table: Any, column: str, values: list[Any]) -> tuple[set[str], set[str]] | None:
    """The table's files whose ``column`` statistics may hold one of ``values``, and all files with
    statistics (``None``: no pruning). Integer keys only: a text column's statistics may be cut short."""
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    actions = pa.table(table.get_add_actions(flatten=True))  # (arro3 -> pyarrow)
    if f"min.{column}" not in actions.column_names or f"max.{column}" not in actions.column_names:
        return None
    low, high = min(values), max(values)
    paths = actions.column("path").to_pylist()
    ranges = zip(paths, actions.column(f"min.{column}").to_pylist(), actions.column(f"max.{column}").to_pylist())
    holding = {
        path for path, least, most in ranges if not isinstance(least, int) or not isinstance(most, int)
        or not (most < low or least > high)
    }  # fmt: skip
    return holding, set(paths)


def plain(table: pa.Table) -> pa.Table:
    """``table`` with string and binary views as plain strings and binaries (at any depth)."""

    def unviewed(kind: pa.DataType) -> pa.DataType:
        views = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
        return views.get(kind) or map_children(kind, unviewed)

    schema = pa.schema([f.with_type(unviewed(f.type)) for f in table.schema])
    return table if schema == table.schema else table.cast(schema)


def quoted(column: str) -> str:
    """A column name in a merge's SQL (keeps its case and odd characters)."""
    return '"' + column.replace('"', '""') + '"'


def raise_commit_retry() -> None:
    """After a schema change the table has a new version: commit the batch from it."""
    from deltalake.exceptions import CommitFailedError

    raise CommitFailedError("the table's schema changed; committing from the new version")

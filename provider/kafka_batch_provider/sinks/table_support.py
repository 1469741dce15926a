"""What the Delta and Iceberg sinks share: the Kafka schema, file layout, saved manifests,
schema checks and option mapping.

Both table sinks register Parquet files that the Spark tasks wrote with pyarrow into
``<table>/data/<batch id>/<attempt>/`` (names are unique per attempt, so a file is written
once). A table commit names exactly the files the successful tasks reported: files of failed
or superseded attempts are never referenced, and are removed by the write step (and, in the
end, by the table's own ``vacuum`` / orphan-file removal).

A batch's full manifest is saved as ``<table>/_kafka_batch/_batches/<seq>-<batch id>.json``
before its table commit; the commit itself carries only what finds it (sequence number,
batch id, offsets). A saved manifest means nothing until a commit names it, and it outlives
the table's own history (Delta log cleanup, Iceberg snapshot expiry), so the newest batch
is still known after the table forgot its commit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.errors import ConfigError, ManifestError
from kafka_batch_provider.storage import Location

#: Where the Spark tasks write the tables' files, relative to the table's location.
DATA = "data"
#: The control folder (plans, Kafka commit records) inside the table's location.
CONTROL = "_kafka_batch"
#: The key holding a batch's manifest in a Delta commit's info.
MANIFEST_KEY = "kafka_batch.manifest"
#: Saved manifests, one per planned batch that reached its table commit (winners and losers).
BATCHES = f"{CONTROL}/_batches"

#: Spark's Kafka source schema, as Arrow (what the Spark tasks hand to pyarrow).
KAFKA_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


class TableFiles:
    """The file side of the sink interface, the same for Delta and Iceberg.

    Files stay where the tasks wrote them: the table commit names exactly the reported ones,
    so a file a lingering task writes late is never referenced, and nothing is moved.
    """

    data: Location
    name: str

    def staging_folder(self, batch_id: str) -> str:
        return f"{DATA}/{batch_id}/{uuid.uuid4().hex[:8]}"

    def seal(self, staging: str, names: list[str]) -> str:
        return staging

    def batch_location(self, batch_id: str, sealed: str) -> str:
        return sealed

    def publish(self, entry: dict[str, Any]) -> None:
        """Nothing to do: the table commit made the batch visible."""

    def check_published(self, entry: Mapping[str, Any]) -> None:
        """Every file the batch's commit references is in place with its size."""
        if not entry.get("files"):
            return
        found = self.data.file_sizes(entry["location"])
        wrong = sorted(f["name"] for f in entry["files"] if found.get(f["name"]) != int(f["bytes"]))
        if wrong:
            raise ManifestError(
                f"batch {entry['batch_id']}: {len(wrong)} of its {len(entry['files'])} file(s) are missing or "
                f"changed in {self.data.uri_of(entry['location'])} (e.g. {wrong[0]}); its offsets are not committed"
            )

    def clean_staging(self, batch_id: str, keep: str | None = None) -> None:
        """Remove the folders of ``batch_id``'s attempts other than ``keep`` (never another batch's)."""
        if keep is None:
            self.data.delete_tree(f"{DATA}/{batch_id}")
            return
        for attempt in self.data.list_names(f"{DATA}/{batch_id}"):
            if f"{DATA}/{batch_id}/{attempt}" != keep:
                self.data.delete_tree(f"{DATA}/{batch_id}/{attempt}")

    # -- saved manifests ---------------------------------------------------------------------

    def save_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Save the batch's manifest before its commit (rewriting it is harmless: same batch, same content)."""
        from kafka_batch_provider.batch_store import numbered_name

        name = numbered_name(BATCHES, int(manifest["seq"]), str(manifest["batch_id"]))
        self.data.put_atomic(name, manifest_text(manifest).encode())

    def saved_manifest(self, seq: int, batch_id: str) -> dict[str, Any]:
        from kafka_batch_provider.batch_store import numbered_name

        name = numbered_name(BATCHES, seq, batch_id)
        try:
            text = self.data.read_bytes(name).decode()
        except FileNotFoundError:
            raise ManifestError(
                f"{self.name}: batch {batch_id} (entry {seq}) is committed but its manifest "
                f"{self.data.uri_of(name)} is gone; restore it from a backup"
            ) from None
        return parse_manifest(text, self.data.uri_of(name))

    def saved_manifests(self, seq: int) -> list[dict[str, Any]]:
        """Every saved manifest of entry ``seq`` (the committed batch's, and those of writers that lost it)."""
        from kafka_batch_provider.batch_store import parse_numbered

        found = [p for p in map(parse_numbered, self.data.list_names(BATCHES)) if p and p[0] == seq]
        return [self.saved_manifest(s, b) for s, b in found]

    def forgotten_entry(self, seq: int, is_winner: Any = None) -> dict[str, Any]:
        """Entry ``seq``, committed but no longer in the table's history: its saved manifest.

        :param is_winner: tells the committed manifest from those of writers that lost the
            entry, when several were saved.
        """
        candidates = self.saved_manifests(seq)
        if len(candidates) > 1 and is_winner is not None:
            candidates = [m for m in candidates if is_winner(m)]
        if len(candidates) != 1:
            raise ManifestError(
                f"{self.name}: entry {seq} is committed but no longer in the table's history (log cleanup or "
                f"snapshot expiry), and {len(candidates)} saved manifests in {self.data.uri_of(BATCHES)} could be "
                "it: cannot tell where the output stands"
            )
        return {**candidates[0], "forgotten_by_table": True}


def files_schema(data: Location, entry: Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema of the batch's files (all written from one DataFrame), or the Kafka schema."""
    if not entry.get("files"):
        return KAFKA_SCHEMA
    with data.open_input(f"{entry['location']}/{entry['files'][0]['name']}") as f:
        return pq.read_schema(f)


def _plain(kind: pa.DataType) -> pa.DataType:
    """The type with Arrow's encodings of the same values made alike (large, view, dictionary, UTC)."""
    if pa.types.is_dictionary(kind):
        return _plain(kind.value_type)
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return pa.binary()
    if pa.types.is_timestamp(kind) and kind.tz in ("+00:00", "Etc/UTC", "utc"):
        return pa.timestamp(kind.unit, tz="UTC")
    return kind


def _children(kind: pa.DataType) -> list[pa.Field] | None:
    """A struct's fields, or a list's element as a one-field list; ``None`` for other types."""
    if pa.types.is_struct(kind):
        return [kind.field(i) for i in range(kind.num_fields)]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return [pa.field("element", kind.value_type)]
    return None


def new_columns(
    table: list[pa.Field] | pa.Schema, files: list[pa.Field] | pa.Schema, where: str, prefix: str = ""
) -> list[str]:
    """Columns (nested ones as ``a.b``) the batch's files have and the table has not.

    :raises ConfigError: when a column the table has is of another type in the files: a
        table's column keeps its type, so the batch is refused (nothing is committed).
    """
    known = {f.name: f for f in table}
    added = []
    for field in files:
        path = f"{prefix}{field.name}"
        if field.name not in known:
            added.append(path)
            continue
        theirs, ours = _plain(known[field.name].type), _plain(field.type)
        inner_theirs, inner_ours = _children(theirs), _children(ours)
        alike = pa.types.is_struct(theirs) == pa.types.is_struct(ours)
        if inner_theirs is not None and inner_ours is not None and alike:
            added += new_columns(inner_theirs, inner_ours, where, f"{path}.")
        elif theirs != ours:
            raise ConfigError(
                f"{where}: column {path} is {theirs} in the table but {ours} in this batch: a table's column keeps "
                "its type; write to a new table, or decode the value as before (--value-format/--value-schema)"
            )
    return added


def manifest_text(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"))


def parse_manifest(text: str, where: str) -> dict[str, Any]:
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{where}: the batch manifest is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or "seq" not in manifest or "batch_id" not in manifest:
        raise ManifestError(f"{where}: the batch manifest is damaged (no seq or batch_id)")
    return manifest


def s3_settings(storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """The S3 settings inside fsspec/s3fs storage options: key, secret, token, endpoint, region."""
    client = dict(storage_options.get("client_kwargs") or {})
    return {
        "key": storage_options.get("key"),
        "secret": storage_options.get("secret"),
        "token": storage_options.get("token"),
        "endpoint_url": storage_options.get("endpoint_url") or client.get("endpoint_url"),
        "region": client.get("region_name") or storage_options.get("region_name"),
    }

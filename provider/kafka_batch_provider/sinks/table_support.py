"""What the Delta and Iceberg sinks share: the Kafka schema, file layout and option mapping.

Both table sinks register Parquet files that the Spark tasks wrote with pyarrow into
``<table>/data/<batch id>.<attempt>/`` (names are unique per attempt, so a file is written
once). A table commit names exactly the files the successful tasks reported: files of failed
or superseded attempts are never referenced, and are removed by the write step (and, in the
end, by the table's own ``vacuum`` / orphan-file removal).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.errors import ManifestError
from kafka_batch_provider.storage import Location

#: Where the Spark tasks write the tables' files, relative to the table's location.
DATA = "data"
#: The control folder (plans, Kafka commit records) inside the table's location.
CONTROL = "_kafka_batch"
#: The key holding a batch's manifest in a Delta commit's info and an Iceberg snapshot's summary.
MANIFEST_KEY = "kafka_batch.manifest"

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

    def staging_folder(self, batch_id: str) -> str:
        return f"{DATA}/{batch_id}.{uuid.uuid4().hex[:8]}"

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
        for name in self.data.list_names(DATA):
            if name.startswith(f"{batch_id}.") and f"{DATA}/{name}" != keep:
                self.data.delete_tree(f"{DATA}/{name}")


def files_schema(data: Location, entry: Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema of the batch's files (all written from one DataFrame), or the Kafka schema."""
    if not entry.get("files"):
        return KAFKA_SCHEMA
    with data.open_input(f"{entry['location']}/{entry['files'][0]['name']}") as f:
        return pq.read_schema(f)


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

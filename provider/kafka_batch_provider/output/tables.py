"""What the Delta and Iceberg sinks share: the Kafka schema, file layout, saved manifests,
schema checks and option mapping.

Both table sinks register Parquet files that the Spark tasks wrote with pyarrow into
``<table>/data/<batch id>/<attempt>/`` (names are unique per attempt, so a file is written
once). A table commit names exactly the files the successful tasks reported: files of failed
or superseded attempts are never referenced, and are removed by the write step (and, in the
end, by the table's own ``vacuum`` / orphan-file removal).

A batch's full manifest is saved as ``<table>/_kafka_batch/_batches/<seq>-<batch id>-<attempt>.json``
before its table commit; the commit itself carries only what finds it (sequence number,
batch id, offsets). A saved manifest means nothing until a commit names it, and it outlives
the table's own history (Delta log cleanup, Iceberg snapshot expiry), so the newest batch
is still known after the table forgot its commit, and so is every older one (replays check
what an output already holds against all of them).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import MergeSpec
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ColumnTypeError, ConfigError, ManifestError, StorageError
from kafka_batch_provider.output.dead_letter_files import attempt_staging
from kafka_batch_provider.output.location import Location

#: Where the Spark tasks write the tables' files, relative to the table's location.
DATA = "data"
#: The control folder (plans, Kafka commit records) inside the table's location.
CONTROL = "_kafka_batch"
#: The key holding a batch's manifest in a Delta commit's info.
MANIFEST_KEY = "kafka_batch.manifest"
#: Saved manifests, one per planned batch that reached its table commit (winners and losers).
BATCHES = f"{CONTROL}/_batches"
#: The batches' published dead letters (Delta's vacuum skips ``_`` folders; no table names them).
DEAD_LETTERS = f"{CONTROL}/_dead_letters"

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


#: Commits that are not batches (optimize, compaction) moving the table while we commit: retry this often.
COMMIT_ATTEMPTS = 5


class StagedInPlace:
    """The file side of a sink whose commit names the tasks' files where they are (a table's, a
    database's): each attempt stages into ``data/<batch id>/<attempt>/``, sealed as it is."""

    data: Location

    def staging_folder(self, batch_id: str) -> str:
        return f"{DATA}/{batch_id}/{uuid.uuid4().hex[:8]}"

    def seal(self, staging: str, names: list[str]) -> str:
        return staging

    def batch_location(self, batch_id: str, sealed: str) -> str:
        return sealed

    def clean_staging(self, batch_id: str, keep: str | None = None) -> None:
        clean_attempts(self.data, batch_id, keep)


class TableFiles(StagedInPlace):
    """What the Delta and Iceberg sinks share: the file side of the sink interface, saved
    manifests, and the append loop around each format's own commit.

    Files stay where the tasks wrote them: the table commit names exactly the reported ones,
    so a file a lingering task writes late is never referenced, and nothing is moved.
    """

    data: Location
    name: str
    dead_letter_root = DEAD_LETTERS
    #: how messages name the table
    label: str
    _by_seq: dict[int, dict[str, Any]]
    #: "date" when the table is partitioned by the UTC date of the Kafka timestamp
    partition_by: str | None
    #: how batches become rows (``None``: appended, or the table's own mode once adopted)
    merge: MergeSpec | None = None

    def table(self) -> Any:
        """The table at its newest state, or ``None`` while it does not exist."""
        raise NotImplementedError

    def newest(self, table: Any) -> dict[str, Any] | None:
        """The newest batch's manifest in ``table``."""
        raise NotImplementedError

    def newest_seq(self, table: Any) -> int:
        """The newest batch's entry number in ``table`` (0 before the first)."""
        newest = self.newest(table)
        return int(newest["seq"]) if newest else 0

    def tail_seq(self) -> int:
        return self.newest_seq(self.table())

    def keep_partitioning(self, found: list[str], by_date: list[str]) -> None:
        """Refuse a run that asks for other partitioning than the table has (``by_date``: the
        table's partition fields when partitioned by date)."""
        wanted = by_date if self.partition_by else []
        if found != wanted:
            raise ConfigError(
                f"{self.label} is partitioned by {found or 'nothing'}, this run asks for "
                f"{wanted or 'no partitioning'} ({Setting('partition_by')}): a table keeps its partitioning",
                setting=Setting("partition_by", "date" if found == by_date else None),
            )

    @property
    def merging(self) -> bool:
        return self.merge is not None and self.merge.merges

    def adopt_merge(self, newest: Mapping[str, Any] | None) -> None:
        """Follow the table's merge mode; refuse a run that asks for another mode, key or ordering.

        What a truncate does is the run's choice, never adopted: ``apply`` holds for the run that
        says so; a run that does not say refuses truncates."""
        self.merge = table_merge(self.label, newest, self.merge)

    def look_up(self, seq: int) -> dict[str, Any] | None:
        """The batch ``seq`` from the table (its history, or a forgotten entry), ``None`` if absent."""
        raise NotImplementedError

    def entry(self, seq: int) -> dict[str, Any] | None:
        """The log entry ``seq``: a batch never changes once committed, so one found is kept."""
        if seq < 1:
            return None
        if seq in self._by_seq:
            return self._by_seq[seq]
        return self.look_up(seq)

    def commit_once(self, table: Any, manifest: dict[str, Any]) -> bool:
        """Commit the batch on ``table`` as loaded; ``False`` when the table moved meanwhile (look again)."""
        raise NotImplementedError

    def append(self, manifest: dict[str, Any]) -> bool:
        """One table commit holding the batch, only while its entry number is the next free one.

        The commit is made on the table state in which the previous batch was found to be the
        newest; ``False`` when another batch took the entry.
        """
        seq = int(manifest["seq"])
        for _ in range(COMMIT_ATTEMPTS):
            table = self.table()
            newest_seq = self.newest_seq(table)
            if newest_seq >= seq:
                return False
            if newest_seq != seq - 1:
                raise ManifestError(f"{self.label} holds batch {newest_seq} as its newest: cannot add {seq}")
            if self.commit_once(table, manifest):
                self._by_seq.pop(seq, None)
                return True
        raise StorageError(f"{self.label} kept changing during {COMMIT_ATTEMPTS} commit attempts")

    def publish(self, entry: dict[str, Any]) -> None:
        """Nothing to do: the table commit made the batch visible."""

    def check_published(self, entry: Mapping[str, Any]) -> None:
        """Every file the batch's commit references is in place with its size.

        Not for a batch the table's history forgot: upkeep may have compacted its files since.
        """
        if not entry.get("files") or entry.get("forgotten_by_table") or entry.get("merged"):
            return  # (a merged batch's rows are in the files its MERGE commit wrote, not its own)
        found = self.data.file_sizes(entry["location"])
        wrong = sorted(f["name"] for f in entry["files"] if found.get(f["name"]) != int(f["bytes"]))
        if wrong and not self.replaced_since(entry, wrong):
            raise ManifestError(
                f"batch {entry['batch_id']}: {len(wrong)} of its {len(entry['files'])} file(s) are missing or "
                f"changed in {self.data.uri_of(entry['location'])} (e.g. {wrong[0]}); its offsets are not committed"
            )

    def replaced_since(self, entry: Mapping[str, Any], names: list[str]) -> bool:
        """Whether a later commit that is not a batch took the batch's files ``names`` out of the
        table (their rows then live in the files that replaced them); no, unless a format says so."""
        return False

    # -- saved manifests ---------------------------------------------------------------------

    def save_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Save the attempt's manifest before its commit (one file per attempt: attempts differ in their files)."""
        self.data.put_atomic(saved_name(manifest), manifest_text(manifest).encode())

    def drop_saved_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Forget an attempt that lost its entry: its saved manifest can never be the committed one."""
        self.data.delete([saved_name(manifest)])

    def check_columns(self, schema: pa.Schema) -> None:
        """Refuse, before anything is read, columns of a type the table format has not: Delta and
        Iceberg decimals have at most 38 digits."""
        for path, kind in leaf_types(schema):
            if pa.types.is_decimal(kind) and kind.precision > 38:
                raise ConfigError(
                    f"{self.name}: column {path} would be {kind}, but table decimals have at most 38 digits; "
                    "write this topic to Parquet, or narrow the field's precision"
                )

    def saved_manifest(self, seq: int, batch_id: str, attempt: str) -> dict[str, Any]:
        name = saved_name({"seq": seq, "batch_id": batch_id, "attempt": attempt})
        try:
            text = self.data.read_bytes(name).decode()
        except FileNotFoundError:
            raise ManifestError(
                f"{self.name}: batch {batch_id} (entry {seq}) is committed but its manifest "
                f"{self.data.uri_of(name)} is gone; restore it from a backup"
            ) from None
        return parse_manifest(text, self.data.uri_of(name))

    def saved_by_seq(self) -> dict[int, list[tuple[int, str, str]]]:
        """``(seq, batch id, attempt)`` of every saved manifest, by entry number (one listing)."""
        index: dict[int, list[tuple[int, str, str]]] = {}
        for name in filter(None, map(parse_saved_name, self.data.list_names(BATCHES))):
            index.setdefault(name[0], []).append(name)
        return index

    def saved_manifests(self, seq: int) -> list[dict[str, Any]]:
        """Every saved manifest of entry ``seq``: the committed attempt's, and maybe some that lost it."""
        return [self.saved_manifest(*name) for name in self.saved_by_seq().get(seq, [])]

    def log_entries(self, table: Any, history: list[dict[str, Any]], last: int | None = None) -> list[dict[str, Any]]:
        """Every batch of the table's current state (``last``: only the newest ones), oldest first.

        ``history`` holds the batches whose commits the table still has; older ones (gone by
        Delta log cleanup or Iceberg snapshot expiry) are read from their saved manifests. Each
        entry names its predecessor (``previous``), so the chain from the newest batch down to
        the first tells the committed batch of an entry number from losers' leftovers.
        """
        newest = self.newest(table)
        if newest is None:
            return []
        by_seq = {int(m["seq"]): m for m in history}
        saved: dict[int, list[tuple[int, str, str]]] | None = None  # listed once, when the history forgot some
        chain = [newest]
        while int(chain[-1]["seq"]) > 1 and (last is None or len(chain) < last):
            seq = int(chain[-1]["seq"]) - 1
            link = chain[-1].get("previous")
            batch_id = link.get("batch_id") if isinstance(link, Mapping) else link
            found = by_seq.get(seq)
            if found is None or (batch_id and found["batch_id"] != batch_id):
                saved = self.saved_by_seq() if saved is None else saved
                found = self.forgotten_by_name(seq, batch_id, saved.get(seq, []))
            chain.append(found)
        return chain[::-1]

    def forgotten_by_name(self, seq: int, batch_id: str | None, saved: list[tuple[int, str, str]]) -> dict[str, Any]:
        """Entry ``seq`` (batch ``batch_id`` when its successor names it) from its saved manifest.

        :param saved: the saved manifests' ``(seq, batch id, attempt)`` for ``seq``. Several
            attempts of one batch may have left one: they read the same offsets, so any of them
            tells the entry's ranges (its files may since have been compacted anyway).
        """
        candidates = sorted(n for n in saved if n[0] == seq and (not batch_id or n[1] == batch_id))
        if not candidates or len({n[1] for n in candidates}) > 1:
            raise ManifestError(
                f"{self.name}: entry {seq} is no longer in the table's history (log cleanup or snapshot expiry) "
                f"and {len(candidates)} saved manifests in {self.data.uri_of(BATCHES)} match it: "
                "cannot tell which batch it was"
            )
        return {**self.saved_manifest(*candidates[0]), "forgotten_by_table": True}

    def forgotten_entry(self, seq: int, is_committed: Any = None) -> dict[str, Any]:
        """Entry ``seq``, committed but no longer in the table's history: its saved manifest.

        :param is_committed: tells the committed attempt's manifest from others saved for ``seq``.
        """
        candidates = self.saved_manifests(seq)
        if is_committed is not None:
            candidates = [m for m in candidates if is_committed(m)]
        if len(candidates) != 1:
            raise ManifestError(
                f"{self.name}: entry {seq} is committed but no longer in the table's history (log cleanup or "
                f"snapshot expiry), and {len(candidates)} saved manifests in {self.data.uri_of(BATCHES)} match "
                "its commit: cannot tell where the output stands"
            )
        return {**candidates[0], "forgotten_by_table": True}


def clean_attempts(data: Location, batch_id: str, keep: str | None = None) -> None:
    """Remove the folders of ``batch_id``'s attempts (``data/<batch id>/<attempt>``) other than
    ``keep`` (never another batch's)."""
    if keep is None:
        data.delete_tree(f"{DATA}/{batch_id}")
        return
    for attempt in data.list_names(f"{DATA}/{batch_id}"):
        if f"{DATA}/{batch_id}/{attempt}" != keep:
            data.delete_tree(f"{DATA}/{batch_id}/{attempt}")


def table_merge(label: str, newest: Mapping[str, Any] | None, asked: MergeSpec | None) -> MergeSpec | None:
    """How a table merges its batches: as its newest batch did, unless this run asks otherwise,
    which is refused (``None`` for a table without batches that asks nothing)."""
    if newest is None:
        return asked
    found = MergeSpec.from_description((newest.get("options") or {}).get("merge"))
    if asked is None:
        return replace(found, on_truncate="refuse") if found.merges else found
    if not found.keeps(asked):
        raise ConfigError(
            f"{label} is merged as {found.describe()}, this run asks for {asked.describe()}: "
            "a table keeps its mode, merge key and ordering (ingest into a new table to change them)",
            setting=Setting("mode", found.mode),
        )
    return asked


def attempt_of(manifest: Mapping[str, Any]) -> str:
    """The attempt whose files the manifest lists (``data/<batch>/<attempt>``, where a batch of only
    dead letters staged those); ``none`` when it staged nothing."""
    if manifest.get("attempt"):
        return str(manifest["attempt"])
    location = str(manifest.get("location") or attempt_staging(manifest) or "")
    return location.rstrip("/").rpartition("/")[2] or "none"


def of_batches(name: str, batch_ids: set[str]) -> bool:
    """Whether ``name`` (relative to the table) is a file a Spark task wrote for one of
    ``batch_ids``: ``data/<batch id>/<attempt>/...``."""
    folder, _, rest = name.partition("/")
    return folder == DATA and rest.split("/", 1)[0] in batch_ids


def saved_name(manifest: Mapping[str, Any]) -> str:
    """``_kafka_batch/_batches/<seq>-<batch id>-<attempt>.json``."""
    return f"{BATCHES}/{int(manifest['seq']):020d}-{manifest['batch_id']}-{attempt_of(manifest)}.json"


def parse_saved_name(name: str) -> tuple[int, str, str] | None:
    stem, _, rest = name.removesuffix(".json").partition("-")
    batch_id, _, attempt = rest.rpartition("-")
    return (int(stem), batch_id, attempt) if name.endswith(".json") and stem.isdigit() and batch_id else None


#: The columns every batch has, whatever its value and key formats: a batch without files (nothing
#: to read, or only dead letters) brings only these, so the first batch with data decides the types
#: of ``key`` and ``value`` (raw bytes, a decoded key, or no ``value`` beside typed fields).
METADATA_SCHEMA = pa.schema([f for f in KAFKA_SCHEMA if f.name not in ("key", "value")])


def files_schema(data: Location, entry: Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema of the batch's files (all written from one DataFrame), or :data:`METADATA_SCHEMA`."""
    if not entry.get("files"):
        return METADATA_SCHEMA
    with data.open_input(f"{entry['location']}/{entry['files'][0]['name']}") as f:
        return pq.read_schema(f)


def _plain(kind: pa.DataType) -> pa.DataType:
    """A leaf type with Arrow's encodings of the same values made alike (large, view, dictionary, UTC)."""
    if pa.types.is_dictionary(kind):
        return _plain(kind.value_type)
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return pa.binary()
    if pa.types.is_timestamp(kind) and kind.tz in ("+00:00", "Etc/UTC", "utc"):
        return pa.timestamp(kind.unit, tz="UTC")
    return kind


def _nested(kind: pa.DataType) -> tuple[str, list[pa.Field]] | None:
    """``(kind, children)`` of a struct, list or map (a list's element and a map's key and value as
    fields, with their nullability); ``None`` for a leaf."""
    if pa.types.is_struct(kind):
        return "struct", [kind.field(i) for i in range(kind.num_fields)]
    if pa.types.is_map(kind):
        return "map", [kind.key_field.with_name("key"), kind.item_field.with_name("value")]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return "list", [kind.value_field.with_name("element")]
    if pa.types.is_large_list_view(kind) or pa.types.is_fixed_size_list(kind):
        return "list", [kind.value_field.with_name("element")]
    return None


def leaf_types(fields: list[pa.Field] | pa.Schema, prefix: str = "") -> list[tuple[str, pa.DataType]]:
    """Every leaf column with its path (``a.b``, ``a.element.b``, ``a.value``), as :func:`schema_change` names them."""
    found = []
    for column in fields:
        path = f"{prefix}{column.name}"
        nested = _nested(column.type)
        found += leaf_types(nested[1], f"{path}.") if nested else [(path, column.type)]
    return found


def same_type(ours: pa.Field, theirs: pa.Field) -> bool:
    """Whether two columns of one name have the same type, as :func:`schema_change` compares them."""
    try:
        schema_change([ours], [theirs], "")
    except ColumnTypeError:
        return False
    return True


@dataclass
class SchemaChange:
    """How a batch's files differ from its table, in columns the table must change to hold them
    (nested ones as ``a.b``, inside lists ``a.element.b``, maps ``a.value.b``)."""

    #: columns (nested ones too) the files have and the table has not
    added: list[str] = field(default_factory=list)
    #: columns (nested fields, list elements, map values) the table holds as never null and the
    #: files as nullable: a later schema version made them optional, so the table must too, or its
    #: readers refuse the first null
    relaxed: list[str] = field(default_factory=list)
    #: columns the files hold in a wider number type than the table (a promotion, int to long or
    #: float to double), where the format widens a column (``promotions``)
    promoted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.relaxed or self.promoted)


#: Number types a table format may widen a column to (Iceberg's type promotions; Delta has none
#: in delta-rs): (the narrower, the wider).
WIDENINGS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}


def schema_change(
    table: list[pa.Field] | pa.Schema,
    files: list[pa.Field] | pa.Schema,
    where: str,
    prefix: str = "",
    promotions: bool = False,
) -> SchemaChange:
    """What the table must change to hold the batch's files: the columns they add, those they make
    nullable and, with ``promotions``, those they widen (:data:`WIDENINGS`). Names and Arrow's
    encodings of the same values (large, view, dictionary) do not count as changes; a column the
    files hold as never null in a nullable table is no change, nor (with ``promotions``) a number
    narrower than its column (the format's readers widen it).

    :raises ConfigError: when a column the table has is of another type in the files: a
        table's column keeps its type, so the batch is refused (nothing is committed).
    """
    known = {f.name: f for f in table}
    change = SchemaChange()
    for found in files:
        path = f"{prefix}{found.name}"
        if found.name not in known:
            change.added.append(path)
            continue
        if found.nullable and not known[found.name].nullable:
            change.relaxed.append(path)
        theirs, ours = _nested(known[found.name].type), _nested(found.type)
        table_type, file_type = _plain(known[found.name].type), _plain(found.type)
        if theirs is not None and ours is not None and theirs[0] == ours[0]:
            inner = schema_change(theirs[1], ours[1], where, f"{path}.", promotions)
            change.added += inner.added
            change.relaxed += inner.relaxed
            change.promoted += inner.promoted
        elif promotions and (table_type, file_type) in WIDENINGS:
            change.promoted.append(path)
        elif promotions and (file_type, table_type) in WIDENINGS:
            pass  # a narrower number: read as the column's type
        elif theirs is not None or ours is not None or table_type != file_type:
            raise ColumnTypeError(
                f"{where}: column {path} is {table_type} in the table but {file_type} in this batch: a table's "
                f"column keeps its type; write to a new table, or {as_before(path)}",
                where,
                path,
                str(table_type),
                str(file_type),
                setting=Setting("value_schema"),
            )
    return change


def relaxed_schema(table: pa.Schema, files: pa.Schema) -> pa.Schema:
    """The table's schema with every column the files hold as nullable made nullable too (at any
    depth); nothing else changes (:attr:`SchemaChange.relaxed`)."""
    by_name = {f.name: f for f in files}
    return pa.schema([relaxed_field(f, by_name.get(f.name)) for f in table], metadata=table.metadata)


def relaxed_field(ours: pa.Field, theirs: pa.Field | None) -> pa.Field:
    if theirs is None:
        return ours
    kind, nested, other = ours.type, _nested(ours.type), _nested(theirs.type)
    if nested is not None and other is not None and nested[0] == other[0]:
        if nested[0] == "struct":
            by_name = {f.name: f for f in other[1]}
            kind = pa.struct([relaxed_field(f, by_name.get(f.name)) for f in nested[1]])
        elif nested[0] == "map":
            key, value = (relaxed_field(f, g) for f, g in zip(nested[1], other[1]))
            kind = pa.map_(key.with_name(kind.key_field.name), value.with_name(kind.item_field.name), kind.keys_sorted)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            element = relaxed_field(nested[1][0], other[1][0]).with_name(kind.value_field.name)
            kind = pa.list_(element) if pa.types.is_list(kind) else pa.large_list(element)
    return ours.with_type(kind).with_nullable(ours.nullable or theirs.nullable)


def as_before(path: str) -> str:
    """How to write a column as the table holds it: the key's format for ``key``, else the value's."""
    if path == "key" or path.startswith("key."):
        return f"read the keys as before ({Setting('key_format')})"
    return f"decode the value as before ({Setting('value_format')}, {Setting('value_schema')})"


def one_line(exc: Exception) -> str:
    """A library's message that may span lines (a schema diff): the first line plus a count of the rest."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] + (f" (+{len(lines) - 1} more line(s))" if len(lines) > 1 else "")


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

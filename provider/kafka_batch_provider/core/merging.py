"""Tables, not changelogs: how a batch of keyed records or change events becomes one MERGE. Pure.

``--mode append`` (the default) adds every record as a row. ``--mode upsert`` keeps the newest
record per key (a tombstone, a record whose value is null, deletes the key). ``--mode changes``
with ``--change-format debezium`` applies Debezium change events (``op`` c/r/u/d/t, ``before``,
``after``, ``source``).

**The ordering rule, decided once and kept.** Every change gets an *ordering value*, a string
whose byte order is the change's order (:func:`order_text`), stored in the table's
:data:`ORDER_COLUMN`:

* Debezium Postgres: ``(source.sequence[0], phase, source.sequence[1])``: the last commit's LSN
  before the event (the event's own LSN when there is none: snapshot rows, the first events after
  a start), then snapshot rows (``op=r``, phase 0) before streamed ones (phase 1), then the
  event's own LSN (DBZ-2911: the LSN alone misorders concurrent transactions);
* Debezium MySQL: ``(binlog file number, position, row)``;
* other Debezium connectors and plain upserts: the Kafka offset (a key stays in one partition),
  after the ``--order-by`` timestamp column when one is named (then keys may move between
  partitions; a tombstone, which has no columns, is ordered by its Kafka timestamp);
* the Kafka offset always last, so two events of one key never tie.

Within a batch each key reduces to its newest change (:func:`reduce_changes`). Across batches
the merge applies a change only where it is newer than the row (``s.order > t.order``), and
deleted keys are remembered with their ordering value (:mod:`kafka_batch_provider.output.deleted_keys`),
so a replay, a late partition or a redelivery never overwrites a newer row and never brings a
deleted key back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

APPEND, UPSERT, CHANGES = "append", "upsert", "changes"
MODES = (APPEND, UPSERT, CHANGES)
DEBEZIUM = "debezium"
CHANGE_FORMATS = (DEBEZIUM,)
ON_TRUNCATE = ("refuse", "apply")
#: Where a plan records how its batch becomes rows (the plan's ``extra``).
MERGE_PLAN_KEY = "merge"
#: At most this many records in one merged batch unless ``--max-records`` says otherwise: a batch
#: is read back and reduced in the driver's memory, so its size bounds that memory (measured in
#: docs/performance.md: the driver's peak RSS for batches of this size, bench/merge_snapshot.py).
MERGED_BATCH_RECORDS = 500_000
#: The table's column holding each row's ordering value.
ORDER_COLUMN = "_kafka_order"
#: The merge source's column saying what a change does (never a table column).
OP_COLUMN = "_kafka_op"
UPSERT_OP, DELETE_OP, TRUNCATE_OP = "u", "d", "t"
#: What Debezium sends for a TOASTed column an update left unchanged (REPLICA IDENTITY DEFAULT).
UNAVAILABLE = "__debezium_unavailable_value"
#: The origin of a placeholder whose row is unknown (a key change whose old key the merge cannot
#: read): no key is empty, so the value is null, counted as ``unresolved`` in the batch's counts.
UNKNOWN_ORIGIN: tuple[Any, ...] = ()
#: Each component of an ordering value: 17 hex digits of the value plus 2**64 (so negatives sort first).
WIDTH, BIAS = 17, 1 << 64
MODE, MERGE_KEY, ORDER_BY = Setting("mode"), Setting("merge_key"), Setting("order_by")
CHANGE_FORMAT, ON_TRUNCATE_SETTING = Setting("change_format"), Setting("on_truncate")


@dataclass(frozen=True)
class MergeSpec:
    """How batches become rows of a table.

    :param mode: ``append``, ``upsert`` or ``changes``.
    :param merge_key: value columns forming the key; empty: the Kafka key (its fields when it
        is a struct, else the column ``key``), or for Debezium its key struct.
    :param order_by: (upsert) a timestamp value column ordering records of one key across
        partitions, before the Kafka offset.
    :param change_format: ``debezium`` (``changes`` only).
    :param on_truncate: ``refuse`` (a truncate event fails the batch in one line) or ``apply``
        (empty the table in the batch's commit).
    """

    mode: str = APPEND
    merge_key: tuple[str, ...] = ()
    order_by: str | None = None
    change_format: str | None = None
    on_truncate: str = "refuse"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown {MODE} {self.mode!r}; choose one of {', '.join(MODES)}", setting=MODE)
        if any(not isinstance(k, str) or not k.strip() for k in self.merge_key):
            raise ConfigError(f"{MERGE_KEY} names value columns; got {list(self.merge_key)!r}", setting=MERGE_KEY)
        if len(set(self.merge_key)) != len(self.merge_key):
            raise ConfigError(f"{MERGE_KEY} names a column twice: {list(self.merge_key)!r}", setting=MERGE_KEY)
        if self.on_truncate not in ON_TRUNCATE:
            raise ConfigError(
                f"unknown {ON_TRUNCATE_SETTING} {self.on_truncate!r}; choose one of {', '.join(ON_TRUNCATE)}",
                setting=ON_TRUNCATE_SETTING,
            )
        if self.mode == CHANGES:
            if self.change_format not in CHANGE_FORMATS:
                raise ConfigError(
                    f"{Setting('mode', CHANGES)} needs {CHANGE_FORMAT} ({', '.join(CHANGE_FORMATS)}), "
                    f"got {self.change_format!r}",
                    setting=CHANGE_FORMAT,
                )
            if self.order_by:
                raise ConfigError(
                    f"{ORDER_BY} is for {Setting('mode', UPSERT)}: change events are ordered by their source position",
                    setting=ORDER_BY,
                )
        elif self.change_format:
            raise ConfigError(f"{CHANGE_FORMAT} goes with {Setting('mode', CHANGES)}", setting=MODE)
        if self.mode == APPEND and (self.merge_key or self.order_by):
            raise ConfigError(
                f"{MERGE_KEY} and {ORDER_BY} are for {Setting('mode', UPSERT)} or {Setting('mode', CHANGES)}",
                setting=MODE,
            )

    @property
    def merges(self) -> bool:
        return self.mode != APPEND

    def describe(self) -> dict[str, Any]:
        """What the table records and a plan shows (no secrets here)."""
        if not self.merges:
            return {"mode": APPEND}
        return {
            "mode": self.mode,
            "merge_key": list(self.merge_key),
            "order_by": self.order_by,
            "change_format": self.change_format,
            "on_truncate": self.on_truncate,
        }

    @classmethod
    def from_description(cls, found: Mapping[str, Any] | None) -> MergeSpec:
        found = dict(found or {})
        return cls(
            mode=str(found.get("mode") or APPEND),
            merge_key=tuple(found.get("merge_key") or ()),
            order_by=found.get("order_by") or None,
            change_format=found.get("change_format") or None,
            on_truncate=str(found.get("on_truncate") or "refuse"),
        )

    def keeps(self, other: MergeSpec) -> bool:
        """Whether a table written with ``self`` may take batches merged with ``other``: the
        mode, key and ordering are the table's for good (``on_truncate`` may change per run)."""
        return (self.mode, self.merge_key, self.order_by, self.change_format) == (
            other.mode,
            other.merge_key,
            other.order_by,
            other.change_format,
        )


def planned_merge(extra: Mapping[str, Any], asked: MergeSpec | None, batch_id: str) -> MergeSpec | None:
    """How a planned batch becomes rows: as its plan recorded, unless the run asks otherwise
    (then refused: the plan's batch id names one batch, written one way)."""
    recorded = extra.get(MERGE_PLAN_KEY)
    if recorded is None:
        return asked
    planned = MergeSpec.from_description(recorded)
    if asked is None or asked.keeps(planned):
        return replace(planned, on_truncate=asked.on_truncate) if asked is not None else planned
    raise ConfigError(
        f"batch {batch_id} was planned to merge as {planned.describe()}, this run asks for {asked.describe()}: "
        "finish it as planned, or discard it first (kafka-batch discard --plan ...)",
        setting=MODE,
    )


def merge_spec(
    mode: str | None = None,
    merge_key: str | Sequence[str] | None = None,
    order_by: str | None = None,
    change_format: str | None = None,
    on_truncate: str | None = None,
) -> MergeSpec | None:
    """The spec from loose settings (``"a,b"`` or a list for the key); ``None`` when no mode is given."""
    if not mode:
        if merge_key or order_by or change_format:
            raise ConfigError(f"{MERGE_KEY}, {ORDER_BY} and {CHANGE_FORMAT} need {MODE}", setting=MODE)
        return None
    keys = merge_key.split(",") if isinstance(merge_key, str) else list(merge_key or ())
    return MergeSpec(
        mode=mode,
        merge_key=tuple(k.strip() for k in keys if k.strip()),
        order_by=order_by or None,
        change_format=change_format or None,
        on_truncate=on_truncate or "refuse",
    )


# -- ordering values ------------------------------------------------------------------------------


def order_text(*components: int) -> str:
    """Ordering components as one string whose byte order is theirs (``a < b`` as tuples ⇔ as text)."""
    return ".".join(format(int(c) + BIAS, f"0{WIDTH}x") for c in components)


def order_texts(*components: Any) -> Any:
    """:func:`order_text` of whole columns at once (numpy arrays of int64, one per component): a
    pyarrow string array, in a millisecond for a 10,000-record batch instead of fifteen."""
    import numpy as np
    import pyarrow as pa

    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    parts = []
    for values in components:
        values = np.asarray(values, dtype=np.int64)
        high = np.where(values < 0, ord("0"), ord("1")).astype(np.uint8)  # the 2**64 bias: 1 unless negative
        low = values.view(np.uint64)  # two's complement: exactly value + 2**64 modulo 2**64
        shifts = np.arange(60, -1, -4, dtype=np.uint64)
        nibbles = digits[((low[:, None] >> shifts) & np.uint64(0xF)).astype(np.intp)]
        parts.append(np.concatenate([high[:, None], nibbles], axis=1))
        parts.append(np.full((len(values), 1), ord("."), dtype=np.uint8))
    joined = np.ascontiguousarray(np.concatenate(parts[:-1], axis=1)) if parts else np.zeros((0, 0), np.uint8)
    width = joined.shape[1]
    offsets = pa.array(np.arange(0, (len(joined) + 1) * width, width, dtype=np.int32))
    return pa.StringArray.from_buffers(len(joined), offsets.buffers()[1], pa.py_buffer(joined.tobytes()))


def debezium_order(source: Mapping[str, Any] | None, op: str, offset: int) -> str:
    """A Debezium event's ordering value from its ``source`` block (see the module's rule)."""
    import json

    source = source or {}
    connector = str(source.get("connector") or "")
    snapshot = str(source.get("snapshot") or "false").lower()
    phase = 0 if op == "r" or snapshot not in ("false", "") else 1
    if connector == "postgresql":
        sequence = source.get("sequence")
        pair = json.loads(sequence) if isinstance(sequence, str) and sequence else [None, source.get("lsn")]
        last_commit, lsn = (pair + [None, None])[:2]
        lsn = int(lsn or source.get("lsn") or 0)
        # Without a last commit (snapshot rows, the first events after the connector starts) the
        # event's own LSN stands in: a later snapshot (snapshot.mode=always, a lost slot) then
        # ranks after what was streamed before it, not before everything.
        return order_text(int(last_commit or lsn), phase, lsn, offset)
    if connector == "mysql":
        name = str(source.get("file") or "")
        number = int("".join(ch for ch in name.rpartition(".")[2] if ch.isdigit()) or 0)
        return order_text(number, int(source.get("pos") or 0), int(source.get("row") or 0), offset)
    return order_text(offset)


def ordered_by_offset(source: Mapping[str, Any] | None) -> bool:
    """Whether :func:`debezium_order` orders this connector's events by their Kafka offset alone."""
    return str((source or {}).get("connector") or "") not in ("postgresql", "mysql")


def order_by_component(value: Any, column: str) -> int:
    """An ``--order-by`` column's value (a timestamp) as microseconds since the epoch."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return int(aware.timestamp() * 1_000_000)
    raise ConfigError(
        f"{ORDER_BY} column {column!r} holds {type(value).__name__} values; name a timestamp column",
        setting=ORDER_BY,
    )


def upsert_order(
    row: Mapping[str, Any] | None, order_by: str | None, offset: int, where: str, kafka_timestamp: Any = None
) -> str:
    """A keyed record's ordering value: its offset, after its ``--order-by`` timestamp when named.
    A tombstone has no columns: it is ordered by its Kafka timestamp instead."""
    if not order_by:
        return order_text(offset)
    value = kafka_timestamp if row is None else row.get(order_by)
    if value is None:
        what = "Kafka timestamp of the tombstone" if row is None else f"{ORDER_BY} column {order_by!r}"
        raise ConfigError(f"{where}: the {what} is null or missing; every record needs it to be ordered")
    return order_text(order_by_component(value, order_by), offset)


# -- reducing a batch -----------------------------------------------------------------------------


@dataclass
class Change:
    """One record's effect on the table: ``op`` upsert, delete or truncate; ``row`` for upserts."""

    key: tuple[Any, ...]
    op: str
    order: str
    row: dict[str, Any] | None = None
    where: str = ""
    #: a primary-key change's create: the key the row had before (Debezium's ``__debezium.oldkey``)
    moved_from: tuple[Any, ...] | None = None
    #: ``{column: key}``: a column still holding the placeholder takes the value of the table's row at
    #: ``key`` as the batch found it (a moved row's unchanged TOASTed column is its old key's)
    origins: dict[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass
class Reduced:
    """A batch's changes, one per key (its newest), after the newest truncate if any."""

    changes: list[Change] = field(default_factory=list)
    #: the ordering value of the newest truncate in the batch
    truncated_at: str | None = None
    #: columns where some kept change still holds Debezium's placeholder (the table's value stays)
    unavailable: set[str] = field(default_factory=set)
    #: events before the newest truncate, and events a newer one of the same key replaced
    superseded: int = 0


def reduce_changes(changes: Iterable[Change]) -> Reduced:
    """Each key's newest change. A placeholder column takes the value the row had before the change:
    the one an older change of the key in the same batch gave it (an insert then an update that left
    a TOASTed column alone), or for a moved row (a primary-key change) the one its old key's row had,
    in the batch or else in the table (:attr:`Change.origins`), never the one at its new key."""
    ordered = sorted(changes, key=lambda c: c.order)
    truncates = [c for c in ordered if c.op == TRUNCATE_OP]
    result = Reduced(truncated_at=truncates[-1].order if truncates else None)
    if result.truncated_at is not None:
        result.superseded = sum(1 for c in ordered if c.order < result.truncated_at and c.op != TRUNCATE_OP)
        ordered = [c for c in ordered if c.order > result.truncated_at]
    newest: dict[tuple[Any, ...], Change] = {}
    #: each key's newest upsert so far, kept past its delete (a moved row's state before the move)
    upserted: dict[tuple[Any, ...], Change] = {}
    for change in ordered:
        older = newest.get(change.key)
        if older is not None:
            result.superseded += 1
        if change.op == UPSERT_OP and change.row is not None:
            if change.moved_from is not None:
                fill_placeholders(change, upserted.get(change.moved_from), change.moved_from)
            elif older is not None and older.op == UPSERT_OP:
                fill_placeholders(change, older, change.key)
            upserted[change.key] = change
        newest[change.key] = change
    result.changes = list(newest.values())
    result.unavailable = {
        column
        for change in result.changes
        if change.row
        for column, value in change.row.items()
        if is_unavailable(value)
    }
    return result


def fill_placeholders(change: Change, before: Change | None, key: tuple[Any, ...]) -> None:
    """``change``'s placeholder columns from ``before``, the row ``key`` held before it (``None``: the
    table's row at ``key``): its value where it had one, else the same origin as its placeholder."""
    for column, value in (change.row or {}).items():
        if not is_unavailable(value):
            continue
        earlier = UNAVAILABLE if before is None or before.row is None else before.row.get(column, UNAVAILABLE)
        if not is_unavailable(earlier):
            change.row[column] = earlier  # type: ignore[index]
            change.origins.pop(column, None)
            continue
        origin = before.origins.get(column, key) if before is not None else key
        if origin != change.key:
            change.origins[column] = origin


def is_unavailable(value: Any) -> bool:
    """Debezium's placeholder, as text, as bytes (``bytea``) or inside a list (an array column)."""
    if isinstance(value, list):
        return any(is_unavailable(item) for item in value)
    return value == UNAVAILABLE or value == UNAVAILABLE.encode()

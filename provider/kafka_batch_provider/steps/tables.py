"""One table per topic: many topics (a list or a pattern), each into its own output, in one batch.

An output template (``s3://lake/{topic}``, an Iceberg ``lake.{topic}``:
:mod:`kafka_batch_provider.core.table_names`) names each topic's output. Each output is an
ordinary one, with its own offset log, plans and commit records, so the protocol of
:mod:`kafka_batch_provider.steps.plan`, :mod:`~kafka_batch_provider.steps.write` and
:mod:`~kafka_batch_provider.steps.commit` holds table by table; what this module adds is doing
it for all of them at once:

* plan: the topics' offsets are asked for once (:mod:`kafka_batch_provider.kafka.prefetched`),
  then each topic is planned against its own output;
* write: one Spark job reads every table's ranges and writes each topic's records into its own
  table's staging folder (``stage_tables``); then each table is checked and published on its
  own. A table that fails does not stop the others: they are published, and the step fails
  afterwards naming the tables that did not make it;
* commit: once every table was written, each is checked on its own and their offsets are
  committed in one compare-and-set request.

When some tables were published and others not, the group is not committed. The next run's plan
step finds each published table's batch uncommitted and commits it without reading again (the
repair of :mod:`~kafka_batch_provider.steps.plan`), and plans the others' pending batches again:
nothing is lost and nothing lands twice.

A table that cannot be planned (its group offsets disagree with its log, a pending plan whose
offsets retention deleted, a registry subject missing) or committed (its group offsets moved) is
left out and reported (:attr:`TablesPlan.failures`, :attr:`TablesCommitted.failures`); the others
go on. The callers report them all in one line at the end (:func:`tables_failed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.core.topic_patterns import PATTERN_PLAN_KEY, compile_pattern, topics_or_pattern
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, PlanError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.kafka.prefetched import PrefetchedOffsets
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.store import BatchStore, load_plan_file
from kafka_batch_provider.steps.commit import CommitReady, ready_to_commit, record_committed
from kafka_batch_provider.steps.guards import changed_topics, group_moved
from kafka_batch_provider.steps.lag import topics_to_watch
from kafka_batch_provider.steps.plan import PlanOutcome, ReaderSchemaPin, plan_batch
from kafka_batch_provider.steps.write import StagedBatch, write_batch

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
#: Steps 1-2 for several outputs in one Spark job (:func:`kafka_batch_provider.spark.ingest.stage_tables`).
StageTables = Callable[
    [Sequence[tuple[Any, BatchStore]], Mapping[str, Any], WriteOptions], list["StagedBatch | KafkaBatchError"]
]


@dataclass
class TableBatch:
    """One topic's batch into its own output (``outcome``: what its plan step did, in that step)."""

    topic: str
    spec: OutputSpec
    store: BatchStore
    plan: Any
    outcome: PlanOutcome | None = None

    @property
    def name(self) -> str:
        return str(self.spec.table or self.spec.output)


@dataclass
class TablesPlan:
    """What the plan step did for every topic's table."""

    tables: list[TableBatch]
    pattern: str | None = None
    notes: list[str] = field(default_factory=list)
    #: topics whose table could not be planned, with why (the others go on)
    failures: dict[str, KafkaBatchError] = field(default_factory=dict)

    @property
    def with_work(self) -> list[TableBatch]:
        return [t for t in self.tables if t.plan.ranges]

    def summary(self) -> dict[str, Any]:
        """Small enough for an XCom at hundreds of tables: per table with a batch (or a repaired one)
        its batch, records and plan; the idle ones counted."""
        return {
            "per_topic": True,
            "pattern": self.pattern,
            "tables": {
                t.topic: {
                    "table": t.name,
                    "batch_id": t.plan.batch_id,
                    "seq": t.plan.seq,
                    "records": t.plan.planned_offsets,
                    "plan_path": t.outcome.plan_path if t.outcome else None,
                    "reused": bool(t.outcome and t.outcome.reused),
                    "repaired": t.outcome.repaired if t.outcome else [],
                }
                for t in self.tables
                if t.plan.ranges or (t.outcome and t.outcome.repaired)  # idle ones are only counted
            },
            "idle_tables": len(self.tables) - len(self.with_work),
            "records": sum(t.plan.planned_offsets for t in self.tables),
            "notes": self.notes,
            "failed": {topic: failure_of(exc) for topic, exc in self.failures.items()},
        }


def plan_tables(
    kafka: KafkaOffsets,
    spec: OutputSpec,
    group_id: str,
    topics: Sequence[str],
    policy: PlanPolicy,
    progress: Progress = log.info,
    on_group_mismatch: GroupMismatchPolicy = GroupMismatchPolicy.FAIL,
    reader_schema: ReaderSchemaPin | None = None,
    adopt_group: bool = False,
    topic_pattern: str | None = None,
    partitions: Sequence[int] | None = None,
) -> TablesPlan:
    """Plan step for every topic's table: each reconciled and planned against its own output.

    Each table is an output of its own, so a topic's first batch starts where
    ``policy.new_partitions`` says, whether the topic is new or its table's first batch failed
    before (nothing outside a table says which: ``new_topic_start`` is the one-output pattern's,
    whose log knows the previous batch's topics). A table that cannot be planned is left out, its
    error in :attr:`TablesPlan.failures`.
    """
    topics_or_pattern(list(topics) or None, topic_pattern)
    pattern = compile_pattern(topic_pattern) if topic_pattern is not None else None
    if partitions:
        raise ConfigError(
            f"{Setting('partitions')} chooses partitions of one output; a table per topic ingests every partition",
            setting=Setting("partitions"),
        )
    names = topics_to_watch(kafka, topics, topic_pattern)
    specs = spec.for_topics(names)  # two topics on one table: refused before anything is opened
    prefetched = PrefetchedOffsets(kafka, group_id, names)
    planned = TablesPlan([], pattern.pattern if pattern else None)
    stores: dict[str, BatchStore] = {}
    for topic in names:
        try:
            stores[topic] = open_store(specs[topic])
        except KafkaBatchError as exc:  # an unreachable catalog, a table of another partitioning
            planned.failures[topic] = exc
    recorded = {PATTERN_PLAN_KEY: {"pattern": pattern.pattern}} if pattern is not None else {}
    for number, (topic, store) in enumerate(stores.items(), 1):
        try:
            outcome = plan_batch(
                prefetched,  # type: ignore[arg-type]  # the client's interface, answered from one fetch
                store,
                group_id,
                [topic],
                policy,
                progress=prefixed(progress, str(specs[topic].table or specs[topic].output)),
                on_group_mismatch=on_group_mismatch,
                reader_schema=reader_schema,
                adopt_group=adopt_group,
                recorded=recorded,
            )
        except KafkaBatchError as exc:
            planned.failures[topic] = exc
            progress(f"{specs[topic].table or specs[topic].output}: not planned: {exc}")
            continue
        planned.tables.append(TableBatch(topic, specs[topic], store, outcome.plan, outcome))
        if number % 100 == 0:
            progress(f"planned {number} of {len(names)} tables")
    if not names:
        planned.notes.append(f"{topic_pattern!r} matches no topic on {kafka.bootstrap_servers}")
    for table in planned.tables:
        planned.notes += [f"{table.name}: {note}" for note in (table.outcome.notes if table.outcome else [])]
    busy = planned.with_work
    progress(
        f"planned {len(planned.tables)} table(s): {len(busy)} with a batch "
        f"({sum(t.plan.planned_offsets for t in busy)} offsets), {len(planned.tables) - len(busy)} with nothing new"
        + (f", {len(planned.failures)} not planned" if planned.failures else "")
    )
    return planned


def write_tables(
    tables: Sequence[TableBatch],
    kafka_config: Mapping[str, Any],
    stage_tables: StageTables,
    options: WriteOptions = WriteOptions(),
    progress: Progress = log.info,
) -> dict[str, dict[str, Any]]:
    """Write step for every table with a batch: one Spark job, then each table checked and published.

    :returns: each topic's log entry.
    :raises KafkaBatchError: after every other table was published, the first failure (a terminal
        one first) naming all tables that failed; those keep their plans for the next run.
    """
    tables = [t for t in tables if t.plan.ranges]
    to_read = [t for t in tables if t.plan.has_data and t.store.entry_of(t.plan) is None]
    staged: dict[str, StagedBatch | KafkaBatchError] = {}
    if to_read:  # one Spark job for every table
        found = stage_tables([(t.plan, t.store) for t in to_read], kafka_config, options)
        staged = {table.topic: batch for table, batch in zip(to_read, found)}
    entries: dict[str, dict[str, Any]] = {}
    failures: dict[str, KafkaBatchError] = {}
    for number, table in enumerate(tables):
        if number:
            fail_point("between-tables")
        ready = staged.get(table.topic)
        if isinstance(ready, KafkaBatchError):  # refused before the job: nothing of it was read
            failures[table.topic] = ready
            progress(f"{table.name}: {ready}")
            continue
        try:
            entries[table.topic] = write_batch(
                table.plan,
                table.store,
                kafka_config,
                lambda *_, ready=ready: ready,  # staged above (a batch already logged is not read again)
                options,
                prefixed(progress, table.name),
            )
        except KafkaBatchError as exc:
            failures[table.topic] = exc
            progress(f"{table.name}: {exc}")
    if failures:
        raise tables_failed(failures, len(tables))
    rows = sum(int(e.get("rows", 0)) for e in entries.values())
    progress(f"wrote {len(entries)} table(s), {rows} rows, in one Spark job")
    return entries


@dataclass
class TablesCommitted:
    """What the commit step did: each committed topic's offsets, and the topics it could not commit."""

    committed: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: dict[str, KafkaBatchError] = field(default_factory=dict)


def commit_tables(kafka: KafkaOffsets, tables: Sequence[TableBatch], progress: Progress = log.info) -> TablesCommitted:
    """Commit step for every table with a batch, after all were written: each checked on its own
    (its entry and files, its topic not recreated, its group offsets unmoved), then one
    compare-and-set commit of the partitions of all that passed (each naming its table), then
    each recorded. A table that did not pass is left uncommitted, its error in the result.
    """
    done = TablesCommitted()
    ready: dict[str, CommitReady] = {}
    busy = [t for t in tables if t.plan.ranges]
    for table in busy:
        try:
            found = ready_to_commit(kafka, table.store, table.plan, prefixed(progress, table.name))
        except KafkaBatchError as exc:
            done.failures[table.topic] = exc
            continue
        if isinstance(found, CommitReady):
            ready[table.topic] = found
        else:  # committed already (an earlier attempt)
            done.committed[table.topic] = found
    for plan in changed_topics(kafka, [r.plan for r in ready.values()], raises=False):
        topic = plan.topics[0]
        done.failures[topic] = PlanError(f"topic {topic!r} was deleted and recreated since it was planned")
        ready.pop(topic)
    for topic, conflict in moved_groups(kafka, ready).items():  # one table's moved group must not stop the rest
        done.failures[topic] = conflict
        ready.pop(topic)
    if not ready:
        return done
    group_id = next(iter(ready.values())).plan.group_id
    expected = {tp: o for r in ready.values() for tp, o in r.plan.expected_committed().items()}
    ends = {tp: o for r in ready.values() for tp, o in r.plan.end_offsets().items()}
    metadata = {tp: r.metadata for r in ready.values() for tp in r.plan.end_offsets()}
    try:
        offsets = kafka.commit(group_id, expected, ends, metadata=metadata)
    except KafkaBatchError as exc:  # the one request failed: none of these tables is committed
        done.failures.update(dict.fromkeys(ready, exc))
        return done
    for topic, found in ready.items():
        done.committed[topic] = record_committed(found, offsets, prefixed(progress, found.store.root))
    return done


def moved_groups(kafka: KafkaOffsets, ready: Mapping[str, CommitReady]) -> dict[str, KafkaBatchError]:
    """The tables whose group offsets moved since they were planned (asked for all in one request)."""
    if not ready:
        return {}
    group_id = next(iter(ready.values())).plan.group_id
    current = kafka.committed_offsets(group_id, [r.tp for found in ready.values() for r in found.plan.ranges])
    conflicts = {topic: group_moved(found.plan, current) for topic, found in ready.items()}
    return {topic: conflict for topic, conflict in conflicts.items() if conflict is not None}


def prefixed(progress: Progress, name: str) -> Progress:
    return lambda line: progress(f"{name}: {line}")


def tables_failed(failures: Mapping[str, KafkaBatchError], of: int, step: str = "ingested") -> KafkaBatchError:
    """One line for the tables a run could not ingest (or a plan could not plan: ``step``): the
    first failure (a terminal one before a transient one) keeps its class, so retries decide as for
    that table alone."""
    topic, first = sorted(failures.items(), key=lambda item: (item[1].transient, item[0]))[0]
    others = sorted(set(failures) - {topic})
    also = f"; also {', '.join(map(repr, others[:5]))}{' ...' if len(others) > 5 else ''}" if others else ""
    first.args = (f"{len(failures)} of {of} table(s) not {step} (the others were): topic {topic!r}: {first}{also}",)
    return first


def failure_of(exc: KafkaBatchError) -> dict[str, str]:
    """A table's failure as an XCom holds it: its class (the retry decision) and its line."""
    return {"error": type(exc).__name__, "message": str(exc)}


def tables_of_plan_files(spec: OutputSpec, paths: Sequence[str]) -> list[TableBatch]:
    """The tables of saved plans, one topic each (the Spark step of a per-topic batch)."""
    plans = [load_plan_file(path, spec.storage_options) for path in paths]
    for plan in plans:
        if len(plan.topics) != 1:
            raise ConfigError(f"batch {plan.batch_id} reads {len(plan.topics)} topics; a table per topic reads one")
    specs = spec.for_topics([plan.topics[0] for plan in plans])
    return [TableBatch(p.topics[0], specs[p.topics[0]], open_store(specs[p.topics[0]]), p) for p in plans]

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
* commit: each table's offsets are committed (compare-and-set) once every table was written.

When some tables were published and others not, the group is not committed. The next run's plan
step finds each published table's batch uncommitted and commits it without reading again (the
repair of :mod:`~kafka_batch_provider.steps.plan`), and plans the others' pending batches again:
nothing is lost and nothing lands twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kafka_batch_provider.core.planning import PlanPolicy
from kafka_batch_provider.core.reconcile import GroupMismatchPolicy
from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.core.topic_patterns import PATTERN_PLAN_KEY, compile_pattern, matching
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, PlanError
from kafka_batch_provider.fail_points import fail_point
from kafka_batch_provider.kafka.client import KafkaOffsets
from kafka_batch_provider.kafka.prefetched import PrefetchedOffsets
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.store import BatchStore, load_plan_file
from kafka_batch_provider.steps.commit import CommitReady, ready_to_commit, record_committed
from kafka_batch_provider.steps.guards import changed_topics
from kafka_batch_provider.steps.plan import PlanOutcome, ReaderSchemaPin, plan_batch
from kafka_batch_provider.steps.write import StagedBatch, write_batch

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
#: Steps 1-2 for several outputs in one Spark job (:func:`kafka_batch_provider.spark.ingest.stage_tables`).
StageTables = Callable[[Sequence[tuple[Any, BatchStore]], Mapping[str, Any], WriteOptions], list[StagedBatch]]


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
) -> TablesPlan:
    """Plan step for every topic's table: each reconciled and planned against its own output.

    A topic the pattern meets once some table of the template holds a batch starts as
    ``policy.new_topic_start`` says, and its first log entry records it.
    """
    pattern = compile_pattern(topic_pattern) if topic_pattern is not None else None
    if bool(topics) == (pattern is not None):
        raise ConfigError(
            f"give topics ({Setting('topics')}) or a pattern ({Setting('topic_pattern')}), one of the two",
            setting=Setting("topics"),
        )
    names = list(topics) if pattern is None else matching(pattern, kafka.topic_names())
    specs = spec.for_topics(names)  # two topics on one table: refused before anything is opened
    stores = {topic: open_store(specs[topic]) for topic in names}
    tails = {topic: store.log.tail_seq() for topic, store in stores.items()}
    started = any(tails.values())  # the template's first batch has no new topics: all start alike
    prefetched = PrefetchedOffsets(kafka, group_id, names)
    tables: list[TableBatch] = []
    for number, topic in enumerate(names, 1):
        new = started and not tails[topic]
        recorded = {}
        if pattern is not None:
            facts = {"pattern": pattern.pattern, "new": {topic: policy.new_topic_start.value} if new else {}}
            recorded = {PATTERN_PLAN_KEY: {**facts, "left": {}}}
        outcome = plan_batch(
            prefetched,  # type: ignore[arg-type]  # the client's interface, answered from one fetch
            stores[topic],
            group_id,
            [topic],
            replace(policy, new_partitions=policy.new_topic_start) if new else policy,
            progress=lambda line, t=topic: progress(f"{specs[t].table or specs[t].output}: {line}"),
            on_group_mismatch=on_group_mismatch,
            reader_schema=reader_schema,
            adopt_group=adopt_group,
            recorded=recorded,
        )
        tables.append(TableBatch(topic, specs[topic], stores[topic], outcome.plan, outcome))
        if number % 100 == 0:
            progress(f"planned {number} of {len(names)} tables")
    planned = TablesPlan(tables, pattern.pattern if pattern else None)
    if not names:
        planned.notes.append(f"{topic_pattern!r} matches no topic on {kafka.bootstrap_servers}")
    for table in tables:
        planned.notes += [f"{table.name}: {note}" for note in (table.outcome.notes if table.outcome else [])]
    busy = planned.with_work
    progress(
        f"planned {len(tables)} table(s): {len(busy)} with a batch ({sum(t.plan.planned_offsets for t in busy)} "
        f"offsets), {len(tables) - len(busy)} with nothing new"
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
    staged: dict[str, StagedBatch] = {}
    if to_read:  # one Spark job for every table
        found = stage_tables([(t.plan, t.store) for t in to_read], kafka_config, options)
        staged = {table.topic: batch for table, batch in zip(to_read, found)}
    entries: dict[str, dict[str, Any]] = {}
    failures: dict[str, KafkaBatchError] = {}
    for number, table in enumerate(tables):
        if number:
            fail_point("between-tables")
        ready = staged.get(table.topic)
        try:
            entries[table.topic] = write_batch(
                table.plan,
                table.store,
                kafka_config,
                lambda *_, ready=ready: ready,  # staged above (a batch already logged is not read again)
                options,
                lambda line, name=table.name: progress(f"{name}: {line}"),
            )
        except KafkaBatchError as exc:
            failures[table.topic] = exc
            progress(f"{table.name}: {exc}")
    if failures:
        raise tables_failed(failures, "written", len(tables))
    rows = sum(int(e.get("rows", 0)) for e in entries.values())
    progress(f"wrote {len(entries)} table(s), {rows} rows, in one Spark job")
    return entries


def commit_tables(
    kafka: KafkaOffsets, tables: Sequence[TableBatch], progress: Progress = log.info
) -> dict[str, dict[str, int]]:
    """Commit step for every table with a batch, after all were written: each checked on its own,
    then one compare-and-set commit of all their partitions (each naming its table), then each
    recorded.

    :returns: each topic's committed offsets.
    """
    committed: dict[str, dict[str, int]] = {}
    failures: dict[str, KafkaBatchError] = {}
    ready: dict[str, CommitReady] = {}
    busy = [t for t in tables if t.plan.ranges]
    for table in busy:
        try:
            found = ready_to_commit(kafka, table.store, table.plan, prefixed(progress, table.name))
        except KafkaBatchError as exc:
            failures[table.topic] = exc
            continue
        if isinstance(found, CommitReady):
            ready[table.topic] = found
        else:  # committed already (an earlier attempt)
            committed[table.topic] = found
    for plan in changed_topics(kafka, [r.plan for r in ready.values()], raises=False):
        failures[plan.topics[0]] = PlanError(f"topic {plan.topics[0]!r} was deleted and recreated since it was planned")
        ready.pop(plan.topics[0])
    if ready:
        group_id = next(iter(ready.values())).plan.group_id
        expected = {tp: o for r in ready.values() for tp, o in r.plan.expected_committed().items()}
        ends = {tp: o for r in ready.values() for tp, o in r.plan.end_offsets().items()}
        metadata = {tp: r.metadata for r in ready.values() for tp in r.plan.end_offsets()}
        done = kafka.commit(group_id, expected, ends, metadata=metadata)
        for topic, found in ready.items():
            committed[topic] = record_committed(found, done, prefixed(progress, found.store.root))
    if failures:
        raise tables_failed(failures, "committed", len(busy))
    return committed


def prefixed(progress: Progress, name: str) -> Progress:
    return lambda line: progress(f"{name}: {line}")


def tables_failed(failures: Mapping[str, KafkaBatchError], step: str, of: int) -> KafkaBatchError:
    """The first failure (a terminal one before a transient one), its class kept so retries decide
    as for that table alone, worded for all the tables that were not ``step``."""
    topic, first = sorted(failures.items(), key=lambda item: (item[1].transient, item[0]))[0]
    others = sorted(set(failures) - {topic})
    also = f"; also {', '.join(map(repr, others[:5]))}{' ...' if len(others) > 5 else ''}" if others else ""
    first.args = (f"{len(failures)} of {of} table(s) not {step} (the others were): topic {topic!r}: {first}{also}",)
    return first


def tables_of_plan_files(spec: OutputSpec, paths: Sequence[str]) -> list[TableBatch]:
    """The tables of saved plans, one topic each (the Spark step of a per-topic batch)."""
    plans = [load_plan_file(path, spec.storage_options) for path in paths]
    for plan in plans:
        if len(plan.topics) != 1:
            raise ConfigError(f"batch {plan.batch_id} reads {len(plan.topics)} topics; a table per topic reads one")
    specs = spec.for_topics([plan.topics[0] for plan in plans])
    return [TableBatch(p.topics[0], specs[p.topics[0]], open_store(specs[p.topics[0]]), p) for p in plans]

"""A Debezium snapshot at the scale of a real database, merged (``--mode changes``): events/s and the
driver's peak RSS, Delta and Iceberg.

``--rows`` snapshot events (``op=r``) of a PostgreSQL table, then ``--batches`` batches of
``--changes`` streamed changes each (80 % updates, 10 % inserts, 10 % deletes), as Kafka Connect's
JsonConverter writes them with ``schemas.enable=true`` (~2.3 KB an event, the schema in every one;
``--schemaless``: ``false``, ~0.5 KB):
staged as the Spark tasks stage a merged batch (one Parquet file of Kafka columns per 100,000
records), in batches of at most ``--batch-records`` (default: the product's bound for merged
batches, ``MERGED_BATCH_RECORDS``), and committed by the product (``BatchStore.log.append``: read
back, columns, reduced, guarded, one MERGE with the offsets) in a process of its own per format,
whose peak RSS is the driver's. The table is checked against the source after the last batch.

``python bench/merge_snapshot.py [--rows N] [--changes N] [--batches N] [--batch-records N] [--schemaless]``
prints one JSON line; bench.py runs it as its ``merge_snapshot_*`` keys. Goals (issue 47): at least
150,000 events/s for the snapshot, a driver peak RSS under 1 GB whatever the batch size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import MERGED_BATCH_RECORDS, MergeSpec
from kafka_batch_provider.output.formats import OutputSpec, open_store
from kafka_batch_provider.output.tables import KAFKA_SCHEMA

FILE_RECORDS = 100_000
CHANGES = MergeSpec(mode="changes", change_format="debezium")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def field(kind: str, name: str, optional: bool = True, logical: str | None = None) -> dict[str, Any]:
    found = {"type": kind, "optional": optional, "field": name}
    return {**found, "name": logical, "version": 1} if logical else found


ROW = [field("int32", "id", False), field("string", "name"), field("double", "amount"),
       field("int64", "updated_at", logical="io.debezium.time.MicroTimestamp"), field("string", "note")]  # fmt: skip
SOURCE = [field("string", "version", False), field("string", "connector", False), field("string", "name", False),
          field("int64", "ts_ms", False), field("string", "snapshot", logical="io.debezium.data.Enum"),
          field("string", "db", False), field("string", "sequence"), field("string", "schema", False),
          field("string", "table", False), field("int64", "txId"), field("int64", "lsn"),
          field("int64", "xmin")]  # fmt: skip
VALUE_SCHEMA = {
    "type": "struct", "optional": False, "name": "db.public.t.Envelope", "version": 2,
    "fields": [
        {"type": "struct", "fields": ROW, "optional": True, "name": "db.public.t.Value", "field": "before"},
        {"type": "struct", "fields": ROW, "optional": True, "name": "db.public.t.Value", "field": "after"},
        {"type": "struct", "fields": SOURCE, "optional": False, "name": "io.debezium.connector.postgresql.Source",
         "field": "source"},
        field("string", "op", False), field("int64", "ts_ms"),
    ],
}  # fmt: skip
KEY_SCHEMA = {"type": "struct", "fields": [field("int32", "id", False)], "optional": False, "name": "db.public.t.Key"}
VALUE_PREFIX = '{"schema":' + json.dumps(VALUE_SCHEMA, separators=(",", ":")) + ',"payload":'
KEY_PREFIX = '{"schema":' + json.dumps(KEY_SCHEMA, separators=(",", ":")) + ',"payload":{"id":'
SOURCE_TEXT = (
    '"source":{{"version":"3.6.1.Final","connector":"postgresql","name":"db","ts_ms":1700000000000,'
    '"snapshot":"{snapshot}","db":"db","sequence":"[\\"{last}\\",\\"{lsn}\\"]","schema":"public","table":"t",'
    '"txId":780,"lsn":{lsn},"xmin":null}}'
)


def row_text(key: int, version: int) -> str:
    return (
        f'{{"id":{key},"name":"name-{key}-{version}","amount":{key * 1.5 + version},'
        f'"updated_at":{1700000000000000 + version},"note":"v{version}"}}'
    )


def debezium_event(op: str, key: int, version: int, lsn: int, schemas: bool = True) -> tuple[bytes, bytes | None]:
    """A Debezium event's key and value (a delete's value has the before row, its key only);
    ``schemas``: with Connect's embedded schema (``schemas.enable``), or without."""
    snapshot = "true" if op == "r" else "false"
    after = "null" if op == "d" else row_text(key, version)
    before = f'{{"id":{key},"name":null,"amount":null,"updated_at":null,"note":null}}' if op == "d" else "null"
    source = SOURCE_TEXT.format(snapshot=snapshot, last=lsn, lsn=lsn)
    payload = f'{{"before":{before},"after":{after},{source},"op":"{op}","ts_ms":1700000000001}}'
    if not schemas:
        return f'{{"id":{key}}}'.encode(), payload.encode()
    return (KEY_PREFIX + f"{key}}}}}").encode(), f"{VALUE_PREFIX}{payload}}}".encode()


def stage(root: Path, batch_id: str, events: list[tuple[bytes, bytes | None]], first_offset: int) -> list[dict]:
    """The batch's records as the Spark tasks stage them: files of FILE_RECORDS Kafka records."""
    folder = root / "data" / batch_id / "a"
    folder.mkdir(parents=True)
    files = []
    for number, start in enumerate(range(0, len(events), FILE_RECORDS)):
        part = events[start : start + FILE_RECORDS]
        columns = {f.name: pa.nulls(len(part), f.type) for f in KAFKA_SCHEMA}
        columns["key"] = pa.array([k for k, _ in part], pa.binary())
        columns["value"] = pa.array([v for _, v in part], pa.binary())
        columns["topic"] = pa.array(["db.public.t"] * len(part))
        columns["partition"] = pa.array([0] * len(part), pa.int32())
        columns["offset"] = pa.array(range(first_offset + start, first_offset + start + len(part)), pa.int64())
        name = f"part-{number}.parquet"
        pq.write_table(pa.table(columns, schema=KAFKA_SCHEMA), folder / name)
        files.append({"name": name, "bytes": (folder / name).stat().st_size, "rows": len(part)})
    return files


def manifest(seq: int, files: list[dict], start: int, end: int) -> dict[str, Any]:
    previous = {"seq": seq - 1, "batch_id": f"b-{seq - 1:04d}"} if seq > 1 else None
    return {
        "format_version": 2, "seq": seq, "batch_id": f"b-{seq:04d}", "previous": previous, "mode": "incremental",
        "group_id": "bench", "offsets": {"db.public.t:0": end}, "topic_ids": {}, "rows": end - start,
        "ranges": [{"topic": "db.public.t", "partition": 0, "start": start, "end": end, "rows": end - start}],
        "location": f"data/b-{seq:04d}/a", "staging": f"data/b-{seq:04d}/a", "files": files,
        "options": {"value_format": "bytes", "merge": CHANGES.describe()},
    }  # fmt: skip


def workload(rows: int, changes: int, batches: int, bound: int, schemas: bool = True, seed: int = 7):
    """``(kind, events)`` batches: the snapshot cut at ``bound``, then the streamed changes; and the
    source table at the end (``{id: version}``)."""
    rng = random.Random(seed)

    def event(*args: Any) -> tuple[bytes, bytes | None]:
        return debezium_event(*args, schemas=schemas)

    state = {k: 0 for k in range(rows)}
    snapshot = [event("r", k, 0, 1000) for k in range(rows)]
    found = [("snapshot", snapshot[i : i + bound]) for i in range(0, rows, bound)]
    lsn, next_key = 2000, rows
    for batch in range(1, batches + 1):
        events = []
        for _ in range(changes):
            lsn += 1
            roll = rng.random()
            if roll < 0.1 or not state:
                state[next_key] = batch
                events.append(event("c", next_key, batch, lsn))
                next_key += 1
            else:
                key = rng.randrange(next_key)
                while key not in state:
                    key = rng.randrange(next_key)
                if roll < 0.2:
                    del state[key]
                    events.append(event("d", key, batch, lsn))
                    events.append((event("d", key, batch, lsn)[0], None))  # its tombstone
                else:
                    state[key] = batch * 1000 + lsn
                    events.append(event("u", key, batch * 1000 + lsn, lsn))
        found += [("changes", events[i : i + bound]) for i in range(0, len(events), bound)]
    return found, state


def commit(spec_json: str, manifests_path: str) -> None:
    """The child: commit every staged batch, print seconds per batch and the peak RSS."""
    spec = OutputSpec(**json.loads(spec_json), merge=CHANGES)
    manifests = json.loads(Path(manifests_path).read_text())
    seconds = []
    for entry in manifests:
        store = open_store(spec)
        started = time.perf_counter()
        assert store.log.append(entry), f"batch {entry['seq']} lost its entry"
        seconds.append(time.perf_counter() - started)
        peak = peak_rss_mb()
        say(f"  batch {entry['seq']}: {entry['rows']:,} records in {seconds[-1]:.1f} s (peak RSS so far {peak} MB)")
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> int:
    """This process's peak RSS (VmHWM: getrusage's ru_maxrss keeps the forking parent's across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def measure(rows: int, changes: int, batches: int, bound: int, schemas: bool = True) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="merge-snapshot-"))
    try:
        say(
            f"merge snapshot: {rows:,} snapshot events, {batches} x {changes:,} changes, batches of {bound:,}, "
            f"{'with' if schemas else 'without'} schemas ..."
        )
        plan, source = workload(rows, changes, batches, bound, schemas)
        staged_root = work / "staged"
        manifests, offset = [], 0
        for seq, (kind, events) in enumerate(plan, start=1):
            files = stage(staged_root, f"b-{seq:04d}", events, offset)
            manifests.append({**manifest(seq, files, offset, offset + len(events)), "kind": kind})
            offset += len(events)
        del plan
        found: dict[str, Any] = {"records": offset}
        catalog = {"type": "sql", "uri": f"sqlite:///{work}/catalog.db", "warehouse": f"file://{work}/wh"}
        specs = {
            "delta": {"format": "delta", "output": str(work / "delta")},
            "iceberg": {"format": "iceberg", "table": "lake.t", "catalog_properties": catalog},
        }
        for fmt, spec in specs.items():
            store = open_store(OutputSpec(**spec, merge=CHANGES))  # the table, then its staged files
            table_root = Path(store.data.root)
            shutil.copytree(staged_root / "data", table_root / "data", dirs_exist_ok=True, copy_function=os.link)
            path = work / f"{fmt}.json"
            path.write_text(json.dumps([{k: v for k, v in m.items() if k != "kind"} for m in manifests]))
            say(f"{fmt}:")
            spec_json = json.dumps(spec)
            child = subprocess.run(
                [sys.executable, __file__, "--commit", spec_json, str(path)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            sys.stderr.write(child.stderr)
            if child.returncode != 0:
                raise SystemExit(f"{fmt}: the commits failed: {child.stderr.strip().splitlines()[-1:]}")
            result = json.loads(child.stdout.strip().splitlines()[-1])
            snap = [s for s, m in zip(result["seconds"], manifests) if m["kind"] == "snapshot"]
            later = [s for s, m in zip(result["seconds"], manifests) if m["kind"] == "changes"]
            later_events = sum(m["rows"] for m in manifests if m["kind"] == "changes")
            found[f"merge_snapshot_{fmt}_eps"] = round(rows / sum(snap))
            found[f"merge_changes_{fmt}_eps"] = round(later_events / sum(later)) if later else None
            found[f"merge_snapshot_{fmt}_driver_rss_mb"] = result["peak_rss_mb"]
            check_table(OutputSpec(**spec, merge=CHANGES), source)
        found["merge_snapshot_eps"] = min(found[f"merge_snapshot_{f}_eps"] for f in specs)
        found["merge_snapshot_driver_rss_mb"] = max(found[f"merge_snapshot_{f}_driver_rss_mb"] for f in specs)
        found["merge_snapshot_batch_records"] = bound
        return found
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_table(spec: OutputSpec, source: dict[int, int]) -> None:
    """The table holds exactly the source's rows, each at its last version."""
    store = open_store(spec)
    if spec.format == "delta":
        table = store.sink.table().to_pyarrow_dataset().to_table(columns=["id", "note"])
    else:
        table = store.sink.table().scan(selected_fields=("id", "note")).to_arrow()
    found = dict(zip(table.column("id").to_pylist(), table.column("note").to_pylist()))
    expected = {k: f"v{v}" for k, v in source.items()}
    if found != expected:
        wrong = sorted(k for k in expected.keys() | found.keys() if found.get(k) != expected.get(k))[:5]
        raise SystemExit(f"{spec.format}: the table differs from the source at ids {wrong} (of {len(expected)} rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--batch-records", type=int, default=MERGED_BATCH_RECORDS)
    parser.add_argument("--schemaless", action="store_true", help="Connect JSON with schemas.enable=false")
    parser.add_argument("--commit", nargs=2, metavar=("SPEC", "MANIFESTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.commit:
        commit(*args.commit)
        return
    print(json.dumps(measure(args.rows, args.changes, args.batches, args.batch_records, not args.schemaless)))


if __name__ == "__main__":
    main()

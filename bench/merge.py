"""Merged batches (``--mode upsert``): seconds per batch and files rewritten, against the bare
libraries doing the same changes, in the same run.

A table of ``--rows`` rows (ids 0..rows-1, written sorted by id in files of 100,000 rows), then
``--batches`` batches of ``--changes`` changes each: 70 % updates, 20 % inserts (new ids), 10 %
deletes, and 5 % of the batch's keys changed twice in it. Each batch goes through the product's
commit (``BatchStore.log.append``: the staged rows read back, reduced, guarded, one MERGE with the
offsets), and the same changes through:

* Delta: a bare delta-rs ``merge`` (the keys deduplicated first, which delta-rs needs: a key twice
  in a MERGE's source fails it) on a copy of the same table;
* Iceberg: pyiceberg's ``upsert`` (it has no delete clause and refuses a key twice: deduplicated,
  deletes by a ``delete`` after it) on a copy of the same table.

Then the same with changes confined to the newest 1 % of keys (``recent``): a table sorted by id
should rewrite only the files holding them. Goals: Delta ≤ 1.2× the bare merge, Iceberg ≤ 0.5×
pyiceberg's upsert. The peak RSS of this process is reported.

``python bench/merge.py [--rows N] [--changes N] [--batches N]`` prints one JSON line; bench.py
runs it as its ``merge_*`` keys.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kafka_batch_provider.core.merging import ORDER_COLUMN, MergeSpec, order_text
from kafka_batch_provider.output.formats import OutputSpec, open_store

FILE_ROWS = 100_000
KEY_TYPE = pa.struct([("id", pa.int64())])
ROW_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def base_rows(rows: int) -> pa.Table:
    ids = pa.array(range(rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise(pa.scalar("name-"), pc.cast(ids, pa.string()), ""),
            "amount": pc.cast(ids, pa.float64()),
            ORDER_COLUMN: pa.array([order_text(-1)] * rows, pa.string()),  # older than any offset
        }
    )


def changes(rng: random.Random, rows: int, count: int, first_new: int, recent: bool) -> list[tuple[int, str]]:
    """``(id, op)``: 70 % updates, 20 % inserts, 10 % deletes, then 5 % of them again (changed twice)."""
    low = int(rows * 0.99) if recent else 0
    existing = rng.sample(range(low, rows), int(count * 0.8))
    updates, deletes = existing[: int(count * 0.7)], existing[int(count * 0.7) :]
    inserts = range(first_new, first_new + count - len(existing))
    found = [(k, "u") for k in updates] + [(k, "u") for k in inserts] + [(k, "d") for k in deletes]
    rng.shuffle(found)
    again = [(k, "u") for k, op in rng.sample(found, int(count * 0.05)) if op == "u"]
    return found + again


def staged_batch(changed: list[tuple[int, str]], first_offset: int, batch: int) -> pa.Table:
    """The batch's records as the Spark tasks stage typed (registry) values: key struct, Kafka columns, fields."""
    n = len(changed)
    alive = [op == "u" for _, op in changed]
    return pa.table(
        {
            "key": pa.array([{"id": k} for k, _ in changed], KEY_TYPE),
            "topic": pa.array(["bench"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
            "id": pa.array([k if a else None for (k, _), a in zip(changed, alive)], pa.int64()),
            "name": pa.array([f"b{batch}-{k}" if a else None for (k, _), a in zip(changed, alive)]),
            "amount": pa.array([float(k + batch) if a else None for (k, _), a in zip(changed, alive)]),
        }
    )


def reduced_source(changed: list[tuple[int, str]], batch: int) -> tuple[pa.Table, list[int]]:
    """What the bare libraries get: each key's last change (they cannot take a key twice)."""
    last = dict(changed)
    upserts = sorted(k for k, op in last.items() if op == "u")
    rows = pa.table(
        {
            "id": pa.array(upserts, pa.int64()),
            "name": pa.array([f"b{batch}-{k}" for k in upserts]),
            "amount": pa.array([float(k + batch) for k in upserts]),
        }
    )
    return rows, sorted(k for k, op in last.items() if op == "d")


def manifest(seq: int, batch_id: str, location: str, size: int, rows: int, end: int) -> dict[str, Any]:
    previous = {"seq": seq - 1, "batch_id": f"b-{seq - 1:04d}"} if seq > 1 else None
    return {
        "format_version": 2, "seq": seq, "batch_id": batch_id, "previous": previous, "mode": "incremental",
        "group_id": "bench", "offsets": {"bench:0": end}, "rows": rows,
        "ranges": [{"topic": "bench", "partition": 0, "start": end - rows, "end": end}],
        "location": location, "staging": location, "files": [{"name": "part-0.parquet", "bytes": size, "rows": rows}],
        "options": {"value_format": "avro", "merge": MergeSpec(mode="upsert").describe()},
    }  # fmt: skip


class Product:
    """The product's commit of a staged batch into a merged table."""

    def __init__(self, spec: OutputSpec) -> None:
        self.spec = spec
        self.seq = 0
        self.offset = 0

    def apply(self, changed: list[tuple[int, str]], batch: int) -> dict[str, Any]:
        store = open_store(self.spec)
        self.seq += 1
        batch_id = f"b-{self.seq:04d}"
        staged = staged_batch(changed, self.offset, batch)
        self.offset += staged.num_rows
        folder = f"data/{batch_id}/a"
        sink = io.BytesIO()
        pq.write_table(staged, sink)
        store.data.put_atomic(f"{folder}/part-0.parquet", sink.getvalue())
        entry = manifest(self.seq, batch_id, folder, len(sink.getvalue()), staged.num_rows, self.offset)
        started = time.perf_counter()
        assert store.log.append(entry), f"batch {self.seq} lost its entry"
        return {"seconds": time.perf_counter() - started}


def delta_files_rewritten(path: Path) -> int:
    from deltalake import DeltaTable

    metrics = DeltaTable(str(path)).history(1)[0].get("operationMetrics", {})
    return int(metrics.get("num_target_files_removed", 0))


def bare_delta(path: Path, changed: list[tuple[int, str]], batch: int) -> float:
    from deltalake import DeltaTable

    started = time.perf_counter()
    upserts, deletes = reduced_source(changed, batch)
    source = pa.concat_tables(
        [
            upserts.append_column("op", pa.array(["u"] * upserts.num_rows)),
            pa.table(
                {
                    "id": pa.array(deletes, pa.int64()),
                    "name": pa.nulls(len(deletes), pa.string()),
                    "amount": pa.nulls(len(deletes), pa.float64()),
                    "op": pa.array(["d"] * len(deletes)),
                }
            ),  # fmt: skip
        ]
    )
    (
        DeltaTable(str(path))
        .merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete(predicate="s.op = 'd'")
        .when_matched_update(updates={"name": "s.name", "amount": "s.amount"})
        .when_not_matched_insert(updates={"id": "s.id", "name": "s.name", "amount": "s.amount"}, predicate="s.op = 'u'")
        .execute()
    )
    return time.perf_counter() - started


def bare_iceberg(catalog: Any, identifier: str, changed: list[tuple[int, str]], batch: int) -> float:
    from pyiceberg.expressions import In

    table = catalog.load_table(identifier)
    started = time.perf_counter()
    upserts, deletes = reduced_source(changed, batch)
    upserts = upserts.append_column(ORDER_COLUMN, pa.array([order_text(batch)] * upserts.num_rows))
    table.upsert(upserts, join_cols=["id"])
    if deletes:
        table.delete(In("id", deletes))
    return time.perf_counter() - started


def iceberg_files_rewritten(catalog: Any, identifier: str, before: int | None) -> int:
    """Data files the commits after snapshot ``before`` deleted (rewritten or dropped)."""
    table = catalog.load_table(identifier)
    removed, snapshot = 0, table.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != before:
        removed += int(
            (snapshot.summary.additional_properties if snapshot.summary else {}).get("deleted-data-files", 0)
        )
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return removed


def measure(rows: int, count: int, batches: int, work: Path) -> dict[str, Any]:
    from deltalake import write_deltalake

    from kafka_batch_provider.output.iceberg import load_catalog

    say(f"merge: a {rows:,}-row table, {batches} batch(es) of {count:,} changes each ...")
    base = base_rows(rows)
    rng = random.Random(11)
    result: dict[str, Any] = {"merge_table_rows": rows, "merge_batch_changes": count}
    properties = {"type": "sql", "uri": f"sqlite:///{work}/merge-catalog.db", "warehouse": f"file://{work}/merge-wh"}
    catalog = load_catalog(properties)  # as the product opens it (a SQL catalog keys its tables by its name)
    catalog.create_namespace_if_not_exists("bench")
    for scenario in ("spread", "recent"):
        recent = scenario == "recent"
        plans = [changes(rng, rows, count, rows + b * count, recent) for b in range(batches)]
        # Delta: the product and the bare merge on two copies of one table
        ours_path, bare_path = work / f"delta-ours-{scenario}", work / f"delta-bare-{scenario}"
        for start in range(0, rows, FILE_ROWS):  # one file per append: files of FILE_ROWS rows, sorted by id
            write_deltalake(str(ours_path), base.slice(start, FILE_ROWS), mode="append")
        shutil.copytree(ours_path, bare_path)
        product = Product(OutputSpec(format="delta", output=str(ours_path), merge=MergeSpec(mode="upsert")))
        ours, bare, rewritten = [], [], []
        for b, changed in enumerate(plans):
            ours.append(product.apply(changed, b)["seconds"])
            rewritten.append(delta_files_rewritten(ours_path))
            bare.append(bare_delta(bare_path, changed, b))
        check_equal(read_delta(ours_path), read_delta(bare_path), f"delta {scenario}")
        result[f"merge_delta_{scenario}_seconds"] = round(sum(ours) / len(ours), 3)
        result[f"merge_delta_bare_{scenario}_seconds"] = round(sum(bare) / len(bare), 3)
        result[f"merge_delta_{scenario}_over_bare"] = round(sum(ours) / sum(bare), 3)
        result[f"merge_delta_{scenario}_files_rewritten"] = round(sum(rewritten) / len(rewritten), 1)
        say(f"merge delta ({scenario}): ours {sum(ours) / len(ours):.2f}s, bare {sum(bare) / len(bare):.2f}s per batch")
        # Iceberg: the product and pyiceberg's upsert on two tables of the same rows
        for name in (f"ours_{scenario}", f"bare_{scenario}"):
            table = catalog.create_table(f"bench.{name}", schema=base.schema)
            for start in range(0, rows, FILE_ROWS):
                table.append(base.slice(start, FILE_ROWS))
        spec = OutputSpec(
            format="iceberg",
            table=f"bench.ours_{scenario}",
            merge=MergeSpec(mode="upsert"),
            catalog_properties=properties,
        )
        product = Product(spec)
        ours, bare, rewritten = [], [], []
        for b, changed in enumerate(plans):
            before = catalog.load_table(f"bench.ours_{scenario}").current_snapshot().snapshot_id
            ours.append(product.apply(changed, b)["seconds"])
            rewritten.append(iceberg_files_rewritten(catalog, f"bench.ours_{scenario}", before))
            bare.append(bare_iceberg(catalog, f"bench.bare_{scenario}", changed, b))
        check_equal(
            catalog.load_table(f"bench.ours_{scenario}").scan().to_arrow(),
            catalog.load_table(f"bench.bare_{scenario}").scan().to_arrow(),
            f"iceberg {scenario}",
        )
        result[f"merge_iceberg_{scenario}_seconds"] = round(sum(ours) / len(ours), 3)
        result[f"merge_iceberg_upsert_{scenario}_seconds"] = round(sum(bare) / len(bare), 3)
        result[f"merge_iceberg_{scenario}_over_upsert"] = round(sum(ours) / sum(bare), 3)
        result[f"merge_iceberg_{scenario}_files_rewritten"] = round(sum(rewritten) / len(rewritten), 1)
        say(
            f"merge iceberg ({scenario}): ours {sum(ours) / len(ours):.2f}s, pyiceberg upsert "
            f"{sum(bare) / len(bare):.2f}s per batch"
        )
    result["merge_table_files"] = -(-rows // FILE_ROWS)
    result["merge_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return result


def read_delta(path: Path) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()


def check_equal(ours: pa.Table, bare: pa.Table, what: str) -> None:
    """The product's table and the bare library's hold the same rows (the ordering value aside)."""
    columns = ["id", "name", "amount"]
    a = ours.select(columns).sort_by("id")
    b = bare.select(columns).sort_by("id")
    if a.to_pylist() != b.to_pylist():  # the values (Iceberg's readers differ in nullability)
        differs = next((i for i, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist())) if x != y), None)
        if differs is not None:
            say(f"{what}: first difference: {a.slice(differs, 1).to_pylist()} != {b.slice(differs, 1).to_pylist()}")
        raise AssertionError(
            f"{what}: the product's table ({a.num_rows} rows) differs from the bare one ({b.num_rows})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kafka-batch-bench-merge-"))
    try:
        print(json.dumps(measure(args.rows, args.changes, args.batches, work)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

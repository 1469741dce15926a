"""Where a command's CPU goes, by kind of process: ``python scripts/cpu_by_process.py [--json F] -- CMD...``.

The suite's cost on two cores is CPU, and most of it is spent in processes the tests start (JVMs,
CLI runs, Airflow, Spark's Python workers), which pytest's durations cannot see. This runs CMD and
samples ``/proc`` every 0.2 s: each process's CPU time (user + system, as of its last sample),
its command line and its start, grouped by the kinds below. A process that lives less than one
sample is missed; the line ``unseen`` is the machine's CPU time during the run that no sampled
process accounts for (those, the kernel, anything else running).

Written for issue 46 (docs/testing.md, "Where the time goes"); not part of the package.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")

#: (kind, pattern on the NUL-joined command line), first match wins.
KINDS = [
    ("spark-connect server", r"SparkConnectServer"),
    ("spark cluster master/worker", r"deploy\.master\.Master|deploy\.worker\.Worker"),
    ("spark cluster executor", r"CoarseGrainedExecutorBackend"),
    ("spark-submit driver JVM", r"org\.apache\.spark\.deploy\.SparkSubmit"),
    ("kafka connect", r"ConnectDistributed|connect\.cli"),
    ("kafka broker", r"kafka\.Kafka\b|KafkaRaftServer|kafka\.tools|kafka_batch_kafka"),
    ("other java", r"(^|/)java\x00"),
    ("spark python worker", r"pyspark\.daemon|pyspark\.worker|pyspark/daemon|worker\.py"),
    ("kafka-batch cli", r"bin/kafka-batch\x00|kafka_batch_provider\.cli|tests\.support\.cli_runner"),  # forked runs too
    ("airflow", r"bin/airflow\x00|airflow (scheduler|api-server|dag-processor|triggerer|tasks|dags)"),
    ("airflow task (supervisor)", r"airflow.*supervisor|task_runner"),
    ("spark-submit python", r"spark_apps/|spark-submit|pyspark-shell"),
    ("postgres", r"^postgres|/postgres\x00|postgres:"),
    ("s3/registry/emulators", r"dev\.s3_server|schema_registry|gcp-storage-emulator|gcp_storage_emulator|azurite"),
    ("chromium", r"chrom"),
    ("node", r"(^|/)node\x00"),
    ("pytest worker", r"execnet|-c\x00import sys;exec"),
    ("pytest", r"pytest"),
    ("build (uv/pip/mvn/npm)", r"(^|/)(uv|pip|mvn|npm)\b|maven"),
    ("tansu", r"tansu"),
    ("rclone", r"rclone"),
]


def kind_of(cmdline: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, cmdline):
            return kind
    first = cmdline.split("\x00")[0]
    return f"other: {Path(first).name[:20]}" if first else "other: (kernel)"


def machine_cpu() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores)."""
    fields = Path("/proc/stat").read_text().split("\n")[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICK


def sample(seen: dict[tuple[int, int], dict]) -> None:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        utime, stime, start = int(rest[11]), int(rest[12]), int(rest[19])
        key = (int(entry.name), start)
        record = seen.get(key)
        if record is None:
            seen[key] = record = {"cmd": cmdline, "base": (utime + stime) / TICK, "cpu": 0.0}
        if not record["cmd"] and cmdline:
            record["cmd"] = cmdline
        record["cpu"] = (utime + stime) / TICK


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the table as JSON here")
    parser.add_argument("--processes", help="also write every process (kind, CPU s, command line) as JSON lines here")
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    seen: dict[tuple[int, int], dict] = {}
    sample(seen)
    before = set(seen)  # processes already running: only their CPU during the run counts
    busy0, wall0 = machine_cpu(), time.monotonic()
    process = subprocess.Popen(command)
    while process.poll() is None:
        time.sleep(args.interval)
        sample(seen)
    wall, busy = time.monotonic() - wall0, machine_cpu() - busy0
    table: dict[str, dict] = defaultdict(lambda: {"cpu": 0.0, "processes": 0})
    for key, record in seen.items():
        cpu = record["cpu"] - record["base"] if key in before else record["cpu"]
        if cpu <= 0 and key in before:
            continue
        row = table[kind_of(record["cmd"])]
        row["cpu"] += cpu
        row["processes"] += 0 if key in before else 1
    if args.processes:
        with open(args.processes, "w") as out:
            for key, record in seen.items():
                if key not in before:
                    kind, cmd = kind_of(record["cmd"]), record["cmd"][:600]
                    out.write(json.dumps({"pid": key[0], "kind": kind, "cpu": record["cpu"], "cmd": cmd}) + "\n")
    accounted = sum(row["cpu"] for row in table.values())
    table["unseen"] = {"cpu": max(busy - accounted, 0.0), "processes": 0}
    width = max(len(k) for k in table)
    print(f"\n{'kind':<{width}}  {'CPU s':>8}  {'share':>6}  {'started':>7}", file=sys.stderr)
    for kind, row in sorted(table.items(), key=lambda kv: -kv[1]["cpu"]):
        share = row["cpu"] / busy if busy else 0
        print(f"{kind:<{width}}  {row['cpu']:8.1f}  {share:6.1%}  {row['processes']:7d}", file=sys.stderr)
    print(f"wall {wall:.0f} s, machine busy {busy:.0f} CPU s ({busy / wall:.2f} cores)", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"wall": wall, "busy": busy, "kinds": table}, indent=1))
    return process.returncode


if __name__ == "__main__":
    raise SystemExit(main())

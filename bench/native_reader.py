"""The read path alone (issue 48): the native reader against kcat and the plain Python consumer.

Each reads every record of the same topic to its end offsets with the reading consumer's
settings (``kafka.config.READER_DEFAULTS``), keeps nothing, and is timed from its start to its
last record:

* ``native_reader_rps``: :func:`kafka_batch_provider.spark.kafka_reader.read_range` with the
  native reader, the partitions one after the other (as one Spark task reads its slices);
* ``python_reader_rps``: the same with the python reader;
* ``kcat_rps``: Debian's ``kcat`` (librdkafka in C), one consumer for all partitions, printing
  every field the readers take (key, value, offset, timestamp, headers: librdkafka parses the
  headers only when asked) to /dev/null, run on the librdkafka of confluent-kafka's wheel (2.16, where
  Debian's is 2.0.2, which knows no ``fetch.queue.backoff.ms``): the same client and settings as
  both readers; ``native_over_kcat`` (goal >= 0.8).

bench.py adds the plain Python consumer that discards (``baseline_rps``) from the same run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_batch_provider.core.offsets import OffsetRange
from kafka_batch_provider.kafka.config import READER_DEFAULTS
from kafka_batch_provider.spark.kafka_reader import read_range


def reader_rps(reader: str, config: Mapping[str, Any], topic: str, ends: Mapping[int, int]) -> float:
    """``read_range`` of every partition with ``reader``, one after the other: records a second."""
    records = 0
    started = time.perf_counter()
    for partition, end in ends.items():
        for batch in read_range(config, OffsetRange(topic, partition, 0, end), reader=reader):
            records += batch.num_rows
    seconds = time.perf_counter() - started
    if records != sum(ends.values()):
        raise SystemExit(f"the {reader} reader read {records:,} records of {sum(ends.values()):,}")
    return records / seconds


def kcat_rps(bootstrap: str, topic: str, ends: Mapping[int, int]) -> float:
    """Debian's kcat reading the topic from the beginning to its end (``-e``), output discarded."""
    kcat = shutil.which("kcat")
    if kcat is None:
        raise SystemExit("kcat is missing: apt-get install kcat (make installs it with Debian's packages)")
    settings = [arg for key, value in READER_DEFAULTS.items() for arg in ("-X", f"{key}={value}")]
    with tempfile.TemporaryDirectory() as libs:
        # kcat loads librdkafka.so.1: here, the wheel's.
        (Path(libs) / "librdkafka.so.1").symlink_to(wheel_librdkafka())
        started = time.perf_counter()
        # Every field the readers take (key, value, offset, timestamp, headers), printed to /dev/null.
        command = [
            kcat,
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%k%s%o%T%h\n",
            *settings,
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "LD_LIBRARY_PATH": libs})
        return sum(ends.values()) / (time.perf_counter() - started)


def wheel_librdkafka() -> Path:
    import confluent_kafka

    [library] = (Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs").glob("librdkafka*")
    return library


def measures(bootstrap: str, topic: str, ends: Mapping[int, int]) -> dict[str, Any]:
    config = {"bootstrap.servers": bootstrap}
    found = {
        "kcat_rps": round(kcat_rps(bootstrap, topic, ends)),
        "native_reader_rps": round(reader_rps("native", config, topic, ends)),
        "python_reader_rps": round(reader_rps("python", config, topic, ends)),
    }
    found["native_over_kcat"] = round(found["native_reader_rps"] / found["kcat_rps"], 3)
    return found

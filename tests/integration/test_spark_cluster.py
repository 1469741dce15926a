"""The package shipped with ``--py-files`` to a real Spark standalone cluster.

One application is submitted (spark-submit, client mode) to the session's standalone
cluster; its executors report where they imported ``kafka_batch_provider`` from, and it
reads a real topic through the ``kafka_batch`` data source, so the data source's code runs
in executors that have only the third-party dependencies.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import kafka_batch_provider
from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.spark.jvm_start import DRIVER_JAVA_OPTIONS, driver_java_options
from kafka_batch_provider.spark.py_files import needs_py_files, package_dir, package_zip
from kafka_batch_provider.spark.submit import conf_args, spark_submit_executable
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records
from tests.support.spark_cluster import SparkStandaloneCluster

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("spark-cluster")]  # one cluster, on one xdist worker

ZIP_NAME = re.compile(rf"kafka_batch_provider-{re.escape(kafka_batch_provider.__version__)}-[0-9a-f]{{12}}\.zip")


def package_modules() -> set[str]:
    """Every ``.py`` of the package as it is on disk, named as in the zip."""
    root = package_dir()
    return {path.relative_to(root.parent).as_posix() for path in root.rglob("*.py") if "__pycache__" not in path.parts}


# -- package_zip / needs_py_files -------------------------------------------------------------


def test_package_zip_is_deterministic(tmp_path: Path) -> None:
    first, second = package_zip(tmp_path / "a"), package_zip(tmp_path / "b")
    assert ZIP_NAME.fullmatch(first.name), f"expected kafka_batch_provider-<version>-<hash12>.zip, found {first.name}"
    assert first.name == second.name, f"expected the same content hash twice, found {first.name} and {second.name}"
    assert first.read_bytes() == second.read_bytes(), "expected the same bytes from two builds, found different ones"
    with zipfile.ZipFile(first) as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names == sorted(names), f"expected sorted entries, found {names[:5]}..."
    stamps = {info.date_time for info in infos}
    assert stamps == {(1980, 1, 1, 0, 0, 0)}, f"expected one fixed timestamp, found {sorted(stamps)[:3]}"


def test_package_zip_holds_every_module_and_no_bytecode(tmp_path: Path) -> None:
    with zipfile.ZipFile(package_zip(tmp_path)) as archive:
        names = set(archive.namelist())
        assert archive.testzip() is None, "expected every entry's CRC to check, found a corrupt one"
    assert "kafka_batch_provider/__init__.py" in names, f"expected kafka_batch_provider/__init__.py in {sorted(names)}"
    missing = package_modules() - names
    assert not missing, f"expected every .py of {package_dir()} in the zip, missing {sorted(missing)}"
    bytecode = sorted(n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo")))
    assert not bytecode, f"expected no byte code in the zip, found {bytecode}"
    outside = sorted(n for n in names if not n.startswith("kafka_batch_provider/"))
    assert not outside, f"expected only kafka_batch_provider/ entries, found {outside}"


def test_package_zip_is_reused_and_concurrent_builds_see_whole_zips(tmp_path: Path) -> None:
    # Eight builders at once into one empty directory: each must get a complete zip.
    with ThreadPoolExecutor(8) as pool:
        paths = set(pool.map(lambda _: package_zip(tmp_path), range(8)))
    assert len(paths) == 1, f"expected one zip for one content, found {sorted(paths)}"
    (path,) = paths
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None, f"expected a whole zip at {path}, found a corrupt one"
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p != path)
    assert not leftovers, f"expected only {path.name} in {tmp_path}, found also {leftovers}"
    before = path.stat()
    assert package_zip(tmp_path) == path
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), (
        "expected the existing zip to be reused, found it rewritten"
    )


def test_package_zip_default_directory_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = package_zip()
    expected_dir = tmp_path / f"kafka-batch-py-files-{os.getuid()}"
    assert path.parent == expected_dir, f"expected the zip in {expected_dir}, found {path}"
    mode = expected_dir.stat().st_mode & 0o777
    assert mode == 0o700, f"expected the default directory to be 0700, found {mode:o}"


def test_package_zip_refuses_a_default_directory_others_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"kafka-batch-py-files-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    with pytest.raises(ConfigError, match="others can write"):
        package_zip()


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", False),
        ("local[2]", False),
        ("local[*]", False),
        ("local[4,3]", False),
        ("local[*, 2]", False),
        (" local[2] ", False),
        ("local-cluster[2,1,1024]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://a:7077,b:7077", True),
        ("yarn", True),
        ("k8s://https://kubernetes.default.svc:443", True),
        ("mesos://127.0.0.1:5050", True),
        ("localhost", True),
    ],
)
def test_needs_py_files(master: str, expected: bool) -> None:
    found = needs_py_files(master)
    assert found is expected, f"needs_py_files({master!r}): expected {expected}, found {found}"


def test_needs_py_files_refuses_an_empty_master() -> None:
    with pytest.raises(ConfigError, match="master is empty"):
        needs_py_files("  ")


# -- the standalone cluster -------------------------------------------------------------------

#: Submitted to the cluster. Prints one JSON line: where the driver and each task imported
#: the package from, and what the kafka_batch data source planned and read.
APPLICATION = """
import importlib.machinery
import json
import os
import sys

from pyspark.sql import SparkSession

import kafka_batch_provider
from kafka_batch_provider.spark.source import KafkaBatchDataSource

args = json.loads(sys.argv[1])


def where_imported(_):
    # What else on this Python's path could provide the package, were the zip not there?
    # (PathFinder only looks, it imports nothing.)
    others = [p for p in sys.path if os.path.basename(p) != args["zip_name"]]
    spec = importlib.machinery.PathFinder.find_spec("kafka_batch_provider", others)
    return {
        "version": kafka_batch_provider.__version__,
        "file": kafka_batch_provider.__file__,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "other_copy": spec.origin if spec else None,
        "sys_path": sys.path,
    }


spark = SparkSession.builder.appName("kafka-batch-py-files-test").getOrCreate()
tasks = spark.sparkContext.parallelize(range(4), 4).map(where_imported).collect()

spark.dataSource.register(KafkaBatchDataSource)
df = (
    spark.read.format("kafka_batch")
    .option("ranges", json.dumps(args["ranges"]))
    .option("kafka.bootstrap.servers", args["bootstrap_servers"])
    .option("maxOffsetsPerTask", "2")
    .load()
)
# One job that both plans and reads: the records of each Spark partition, as a list.
slices = df.select("partition", "offset").rdd.glom().collect()
slice_sizes = sorted(len(rows) for rows in slices)
records = sorted([r.partition, r.offset] for rows in slices for r in rows)

result = {"driver_file": kafka_batch_provider.__file__, "tasks": tasks, "slice_sizes": slice_sizes, "records": records}
print(json.dumps(result))
spark.stop()
"""


def python_without_our_package(directory: Path) -> Path:
    """An interpreter script for Spark's Python: this venv's third-party packages, not ours.

    The package is installed in editable mode: a ``.pth`` file in site-packages puts the
    source tree on every venv Python's ``sys.path``. Spark puts the ``--py-files`` zip ahead
    of it, so the executors would import the zip's copy anyway, but with the source tree
    still behind it as a fallback the test could not tell whether the zip is *needed*.

    ``-S`` skips the ``site`` module, so no ``.pth`` file is processed (the editable one
    included), and site-packages is added back as a plain ``PYTHONPATH`` entry (behind
    Spark's own entries), which makes its packages importable without running its ``.pth``
    files. That is a cluster node with the dependencies installed and our package not.
    The application checks the result rather than trusting it: on each executor, nothing
    on ``sys.path`` but the zip may hold ``kafka_batch_provider``.
    """
    site_packages = os.pathsep.join(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
    script = directory / "python-without-kafka-batch-provider"
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}"{shlex.quote(site_packages)} '
        f'exec {shlex.quote(sys.executable)} -S "$@"\n'
    )
    script.chmod(0o755)
    return script


@pytest.fixture(scope="session")  # once: a module fixture is set up again when xdist interleaves modules
def kafka_topic(kafka_bootstrap_servers: str) -> tuple[str, dict[int, int]]:
    """A 2-partition topic holding 10 records: ``(name, {partition: records})``."""
    config = {"bootstrap.servers": kafka_bootstrap_servers}
    name = f"py-files-{os.urandom(4).hex()}"
    create_topics(config, {name: 2})
    return name, produce(config, name, sample_records(partitions=2, count=10))


@pytest.fixture(scope="session")  # once: a module fixture is set up again when xdist interleaves modules
def shipped_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package_zip(tmp_path_factory.mktemp("py-files"))


@pytest.fixture(scope="session")  # once: a module fixture is set up again when xdist interleaves modules
def cluster_run(
    spark_standalone: SparkStandaloneCluster,
    kafka_bootstrap_servers: str,
    kafka_topic: tuple[str, dict[int, int]],
    shipped_zip: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """Submit :data:`APPLICATION` once with ``--py-files <zip>``; its JSON result."""
    directory = tmp_path_factory.mktemp("py-files-app")
    application = directory / "app.py"
    application.write_text(APPLICATION)
    python = str(python_without_our_package(directory))
    topic, counts = kafka_topic
    args = {
        "zip_name": shipped_zip.name,
        "bootstrap_servers": kafka_bootstrap_servers,
        "ranges": [[topic, partition, 0, n] for partition, n in sorted(counts.items())],
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no way in for the source tree
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    env["SPARK_LOCAL_DIRS"] = str(directory / "driver-local")  # the driver's scratch files: not /tmp/spark-*
    command = [
        spark_submit_executable(),
        "--master",
        spark_standalone.master_url,
        "--py-files",
        str(shipped_zip),
        # Two 1-core executors (separate JVMs and Python workers) within the worker's 2 cores / 2g.
        *("--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m"),
        *("--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN"),
        *conf_args({**spark_standalone.executor_conf, DRIVER_JAVA_OPTIONS: driver_java_options()}),
        str(application),
        json.dumps(args),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=directory, timeout=300)
    stderr_tail = " | ".join(line for line in result.stderr.splitlines()[-15:] if line.strip())
    assert result.returncode == 0, (
        f"expected spark-submit to succeed, found exit code {result.returncode}: {stderr_tail}"
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"expected a JSON result line from the application, found stdout {result.stdout[-500:]!r}"
    return json.loads(lines[-1])


def test_executors_import_the_package_from_the_shipped_zip(
    cluster_run: dict[str, Any], spark_standalone: SparkStandaloneCluster, shipped_zip: Path
) -> None:
    tasks = cluster_run["tasks"]
    assert len(tasks) == 4, f"expected 4 task reports, found {len(tasks)}"
    source_tree = package_dir().parent  # where this (editable) install imports it from
    for task in tasks:
        imported = Path(os.path.normpath(os.path.join(task["cwd"], task["file"])))
        assert task["version"] == kafka_batch_provider.__version__, (
            f"expected version {kafka_batch_provider.__version__} on the executor, found {task['version']}"
        )
        # Spark fetched the zip into the executor's directory under the worker's work dir.
        assert imported.is_relative_to(spark_standalone.work_dir), (
            f"expected the package imported from under {spark_standalone.work_dir}, found {imported}"
        )
        expected_tail = f"{shipped_zip.name}/kafka_batch_provider/__init__.py"
        assert imported.as_posix().endswith(expected_tail), f"expected .../{expected_tail}, found {imported}"
        assert not imported.is_relative_to(source_tree), f"expected no import from {source_tree}, found {imported}"
        assert task["other_copy"] is None, (
            f"expected no copy of the package on the executor's sys.path but the zip, found {task['other_copy']}"
        )
        assert str(source_tree) not in task["sys_path"], (
            f"expected {source_tree} not on the executor's sys.path, found {task['sys_path']}"
        )


def test_driver_imports_the_package_from_the_shipped_zip(cluster_run: dict[str, Any], shipped_zip: Path) -> None:
    expected = f"{shipped_zip}/kafka_batch_provider/__init__.py"
    found = cluster_run["driver_file"]
    assert found == expected, f"expected the driver to import {expected}, found {found}"


def test_kafka_batch_source_plans_and_reads_on_the_cluster(
    cluster_run: dict[str, Any], kafka_topic: tuple[str, dict[int, int]]
) -> None:
    _, counts = kafka_topic
    # Each partition's range [0, n) in slices of at most maxOffsetsPerTask=2 offsets, one Spark partition each.
    expected_slices = sorted(min(2, n - start) for n in counts.values() for start in range(0, n, 2))
    assert cluster_run["slice_sizes"] == expected_slices, (
        f"expected Spark partitions of {expected_slices} records, found {cluster_run['slice_sizes']}"
    )
    expected = sorted([p, o] for p, n in counts.items() for o in range(n))
    found = cluster_run["records"]
    assert found == expected, f"expected (partition, offset) {expected}, found {found}"


# -- the ingest on the cluster ------------------------------------------------------------------


def test_ingest_on_the_cluster_to_s3_is_exactly_once(
    spark_standalone: SparkStandaloneCluster,
    kafka_bootstrap_servers: str,
    s3_server: Any,
    new_s3_output: Any,
    tmp_path: Path,
) -> None:
    """``kafka-batch run --spark-master spark://…`` with the output on the S3 server.

    The executors run an interpreter without our package (the CLI ships it with --py-files),
    write with pyarrow + s3fs (no Hadoop connector) and report what they read; the driver
    checks and publishes; the group is committed; a second run reads only the new records, with
    the jvm reader: Spark's own Kafka source, whose connector jars (``make jvm-tools``) spark-submit
    hands to the cluster's executors with ``--jars``.
    """
    from tests.integration.helpers import Output, assert_exactly_once

    config = {"bootstrap.servers": kafka_bootstrap_servers}
    topic, group = f"cluster-{os.urandom(4).hex()}", f"cluster-{os.urandom(4).hex()}"
    create_topics(config, {topic: 4})
    produce(config, topic, sample_records(partitions=4, count=2000))
    output = Output(new_s3_output("cluster run"), s3_server.storage_options())
    options_file = tmp_path / "storage-options.json"  # credentials in a file, not on the command line
    options_file.write_text(json.dumps(output.storage_options))
    python = str(python_without_our_package(tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=python,
        PYSPARK_DRIVER_PYTHON=python,
        SPARK_LOCAL_DIRS=str(tmp_path / "driver-local"),
        KAFKA_BATCH_STORAGE_OPTIONS_FILE=str(options_file),
    )
    command = [
        str(Path(sys.executable).parent / "kafka-batch"),
        "run",
        *("--bootstrap-servers", kafka_bootstrap_servers, "--topic", topic, "--group", group),
        *("--output", output.uri, "--spark-master", spark_standalone.master_url),
        *("--spark-conf", "spark.executor.cores=1", "--spark-conf", "spark.executor.memory=512m"),
        *("--spark-conf", "spark.ui.enabled=false", "--max-offsets-per-task", "200"),
        *(arg for key, value in spark_standalone.executor_conf.items() for arg in ("--spark-conf", f"{key}={value}")),
    ]

    def run(*more: str) -> dict[str, Any]:
        result = subprocess.run([*command, *more], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert result.returncode == 0, f"expected exit 0, found {result.returncode}: {result.stderr[-1500:]}"
        return json.loads(result.stdout.strip().splitlines()[-1])

    first = run()
    assert first["records"] == 2000, f"expected 2000 records, found {first['records']}"
    assert first["location"].startswith(output.uri), f"expected the batch under {output.uri}, found {first['location']}"
    produce(config, topic, sample_records(partitions=4, count=400, first_id=2000))
    second = run("--reader", "jvm")
    assert second["records"] == 400, f"expected only the 400 new records, found {second['records']}"
    assert second["committed"] == {f"{topic}:{p}": 600 for p in range(4)}, second["committed"]
    assert_exactly_once(output, {(topic, p, o) for p in range(4) for o in range(600)})
    assert [e["seq"] for e in output.store().log.entries()] == [1, 2]

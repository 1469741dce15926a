"""Running the Spark application with ``spark-submit`` from the command line.

(Airflow runs it through ``SparkSubmitHook`` instead; both pass the same application
arguments.) The Kafka config and the storage options are handed over in private temporary
files, never on the command line, where ``ps`` and logs would show them. On a cluster
(``spark://``, ``yarn``, ``k8s://``) this package travels to the executors as a zip with
``--py-files``, so the cluster needs only the third-party dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kafka_batch_provider.spark.app as spark_app
from kafka_batch_provider.core.settings import WORDING_ENV, wording
from kafka_batch_provider.core.write_options import WriteOptions
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, SparkStepError
from kafka_batch_provider.spark.error_lines import ERROR_CLASS_PREFIX, ERROR_LINE_PREFIX, application_error
from kafka_batch_provider.spark.jvm_start import lean_submit_conf

#: The application file submitted by default (importable, and installed with the package).
DEFAULT_APPLICATION = spark_app.__file__


def spark_submit_executable() -> str:
    """``$SPARK_HOME/bin/spark-submit``, else the one next to this Python (pip's pyspark), else PATH."""
    candidates = []
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "bin" / "spark-submit")
    candidates.append(Path(sys.executable).parent / "spark-submit")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("spark-submit")
    if not found:
        raise ConfigError("spark-submit not found: install pyspark or set SPARK_HOME")
    return found


@contextmanager
def private_json_file(data: Mapping[str, Any], prefix: str = "kafka-batch-config-") -> Iterator[str]:
    """A 0600 JSON file holding ``data`` (secrets), removed afterwards."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp creates it readable by the owner only
            json.dump({k: v for k, v in data.items() if k != "logger"}, f)
        yield path
    finally:
        Path(path).unlink(missing_ok=True)


def private_config_file(kafka_config: Mapping[str, Any]) -> Iterator[str]:
    """The Kafka config in a private file (see :func:`private_json_file`)."""
    return private_json_file(kafka_config)


def application_args(plan_path: str | Sequence[str], output: Any, options: WriteOptions) -> list[str]:
    """The Spark application's arguments: the plan (the plans of a table per topic), the output (a
    path/URI or an :class:`~kafka_batch_provider.output.formats.OutputSpec`) and the options; never a secret."""
    plans = [arg for path in ([plan_path] if isinstance(plan_path, str) else plan_path) for arg in ("--plan", path)]
    if isinstance(output, str):
        return [*plans, "--output", output, *options.to_args()]
    where = ["--table", output.table] if output.table else ["--output", output.output]
    from kafka_batch_provider.output.formats import merge_argv

    partitioning = ["--partition-by", output.partition_by] if output.partition_by else []
    merging = merge_argv(getattr(output, "merge", None))
    return [*plans, "--format", output.format, *where, *partitioning, *merging, *options.to_args()]


def conf_args(settings: Mapping[str, str]) -> list[str]:
    """``--conf key=value`` for each setting."""
    return [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]


def submit_command(
    app_args: Sequence[str], master: str, conf: Mapping[str, str] | None = None, application: str | None = None
) -> list[str]:
    from kafka_batch_provider.spark.py_files import needs_py_files, package_zip

    settings = {"spark.sql.session.timeZone": "UTC", "spark.log.level": "WARN", **(conf or {})}
    command = [spark_submit_executable(), "--master", master, *conf_args(lean_submit_conf(master, settings))]
    if needs_py_files(master):
        command += ["--py-files", str(package_zip())]
    return command + [application or DEFAULT_APPLICATION, *app_args]


def run_submit(
    command: Sequence[str],
    kafka_config: Mapping[str, Any],
    progress: Callable[[str], None],
    storage_options: Mapping[str, Any] | None = None,
    catalog_properties: Mapping[str, Any] | None = None,
    registry: Mapping[str, Any] | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Run spark-submit, relay its progress lines, return the application's JSON result line.

    :param registry: the schema registry client's settings (url and credentials), if any.
    :param database_url: a database output's URL (in the application's environment, never its argv).
    """
    env = dict(os.environ)
    # Executors of a local master must use this interpreter, which has the dependencies.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.pop("SPARK_REMOTE", None)  # would turn the application's session into a Spark Connect client
    env[WORDING_ENV] = wording()
    # spark-submit merges the Python driver's stdout and stderr into its own stdout; its
    # stderr carries the JVM's log, kept for the error message.
    results: list[str] = []
    reported: list[str] = []  # the application's error-class and error lines
    with (
        private_config_file(kafka_config) as config_path,
        private_json_file(storage_options or {}, "kafka-batch-storage-") as storage_path,
        private_json_file(catalog_properties or {}, "kafka-batch-catalog-") as catalog_path,
        private_json_file(registry or {}, "kafka-batch-registry-") as registry_path,
        tempfile.TemporaryFile("w+") as jvm_log,
    ):
        env[spark_app.REGISTRY_SETTINGS_FILE_ENV] = registry_path
        env[spark_app.CONFIG_FILE_ENV] = config_path
        env[spark_app.STORAGE_OPTIONS_FILE_ENV] = storage_path
        env[spark_app.CATALOG_PROPERTIES_FILE_ENV] = catalog_path
        env[spark_app.SUBMITTED_AT_ENV] = str(time.time())
        if database_url:
            env[spark_app.DATABASE_URL_ENV] = database_url
        process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=jvm_log, text=True, env=env)
        assert process.stdout is not None
        result_at = None
        for line in process.stdout:  # relay progress while Spark runs
            line = line.rstrip("\n")
            if line.startswith("batch "):
                progress(line)
            elif line.startswith((ERROR_LINE_PREFIX, ERROR_CLASS_PREFIX)):
                reported.append(line)
            elif line.startswith("{"):
                results.append(line)
                result_at = time.perf_counter()
        process.wait()
        exit_seconds = round(time.perf_counter() - result_at, 3) if result_at is not None else None
        jvm_log.seek(0)
        stderr_tail = [line for line in jvm_log.read().splitlines() if line.strip()][-5:]
    if process.returncode != 0:
        error = application_error(reported, process.returncode)  # its class and its retry decision
        if error is not None:
            raise error
        raise SparkStepError(f"spark-submit failed with exit code {process.returncode}: {' | '.join(stderr_tail)}")
    if not results:
        raise KafkaBatchError("spark-submit finished but the application printed no result")
    result = json.loads(results[-1])
    result["timings"] = {**result.get("timings", {}), "spark_exit_seconds": exit_seconds}
    return result

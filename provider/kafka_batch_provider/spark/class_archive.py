"""Recording the class archive of :mod:`kafka_batch_provider.spark.jvm_start` (``kafka-batch
spark-archive build``, run by ``make venv``): one small local Spark job
(:mod:`kafka_batch_provider.spark.archive_job`) under the batches' settings, with the JVM told
to write the classes it loaded to the archive at exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.spark.jvm_start import (
    ARCHIVE_ENV,
    DRIVER_JAVA_OPTIONS,
    LEAN_JAVA_OPTIONS,
    archive_dirs,
    class_archive_path,
    java_flag,
    lean_submit_conf,
)
from kafka_batch_provider.spark.submit import conf_args, spark_submit_executable


def build_class_archive(progress: Callable[[str], None], timeout: float = 600.0) -> Path:
    """Record the archive from one small local job (:mod:`kafka_batch_provider.spark.archive_job`).

    Written under a temporary name and renamed, so a batch never maps half an archive and two
    builds at once leave one whole file.
    """
    from kafka_batch_provider.spark import archive_job

    target = class_archive_path()
    if target is None:
        raise ConfigError(f"{ARCHIVE_ENV}=off: the class archive is switched off")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.unlink(temporary)  # the JVM creates the file itself
    # The batches' settings, but recording into a new archive instead of mapping an old one.
    conf = lean_submit_conf("local[2]", local_driver=False)
    conf[DRIVER_JAVA_OPTIONS] = " ".join([*LEAN_JAVA_OPTIONS, java_flag(f"-XX:ArchiveClassesAtExit={temporary}")])
    command = [spark_submit_executable(), "--master", "local[2]", *conf_args(conf), archive_job.__file__]
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.pop("SPARK_REMOTE", None)
    progress(f"recording Spark's classes from a small local job into {target} ...")
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        if result.returncode != 0 or not Path(temporary).is_file():
            tail = " | ".join(line for line in (result.stderr + result.stdout).splitlines()[-4:] if line.strip())
            raise ConfigError(f"the class archive could not be recorded (exit {result.returncode}): {tail}")
        os.replace(temporary, target)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"recording the class archive took more than {timeout:g} s") from None
    finally:
        Path(temporary).unlink(missing_ok=True)
    for stale in stale_archives(target):
        stale.unlink(missing_ok=True)
        progress(f"removed {stale.name}: recorded for jars or a JVM this installation no longer has")
    return target


def stale_archives(current: Path) -> list[Path]:
    """The other archives beside ``current`` in this environment's own folder (a reinstall
    re-extracts the jars, which changes the key, and each archive is ~150 MB). A configured
    path's folder is the user's, and the shared cache may hold other installations' archives:
    nothing there is touched."""
    if os.environ.get(ARCHIVE_ENV, "").strip() or current.parent != archive_dirs()[0]:
        return []
    return sorted(path for path in current.parent.glob("spark-classes-*.jsa") if path != current)

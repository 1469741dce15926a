"""A spark-submit batch that starts in seconds: a lean driver JVM and an archive of Spark's classes.

A spark-submit of a 1,000-record batch spent ~20 s before this (quiet machine; phases measured
in ``docs/performance.md``), almost none of it on the records. What each setting here saves:

* **Class-data sharing** (``-XX:SharedArchiveFile``): the JVM maps Spark's ~10,000 classes
  from an archive, already parsed and verified, instead of reading them out of 250 jars.
  :func:`~kafka_batch_provider.spark.class_archive.build_class_archive` records the archive once per installation
  (``kafka-batch spark-archive build``, run by ``make venv``) from a small job that loads what
  a batch loads; later batches use it when it matches the Java and the jars (its name is a
  hash of both). Without it a batch runs as before, only slower.
* **C1 only, serial GC** (``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``): a batch's driver JVM
  lives seconds and, with the Python reader, moves only task reports; the optimising
  compiler's and the parallel collector's threads cost more CPU than they return on 2 cores.
  Measured on the 1M-record batch too: faster, not slower. Set only on the driver (executors
  of a cluster are long-lived JVMs of their own); ``spark.driver.extraJavaOptions`` of the user
  come after ours, so they win; a collector they (or ``spark.driver.defaultJavaOptions``) choose
  replaces the serial one, and ``spark-defaults.conf``'s driver options are kept.
* **No Spark UI** (``spark.ui.enabled=false``): a Jetty server per batch that nobody opens
  (``--spark-conf spark.ui.enabled=true`` brings it back).
* **Python from byte code**: :mod:`kafka_batch_provider.spark.worker_daemon` for the workers
  of a local master, and the application itself, import pyspark from site-packages instead of
  recompiling it from ``pyspark.zip`` in every process.
* **No wait on the way out**: the application returns without ``spark.stop()``, whose
  accumulator server polls every 0.5 s; SparkSubmit's shutdown hook stops the context.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_batch_provider.errors import ConfigError
from kafka_batch_provider.spark.py_files import needs_py_files

#: The driver JVM's flags for a short-lived batch (the archive's flag is added when it exists).
LEAN_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: Spark settings of a batch; any the user sets win.
LEAN_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
DAEMON_MODULE = "kafka_batch_provider.spark.worker_daemon"
#: The archive's path (overrides the default place), or ``off`` to start without one.
ARCHIVE_ENV = "KAFKA_BATCH_SPARK_CLASS_ARCHIVE"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def spark_home() -> Path:
    """``$SPARK_HOME``, else the directory of the installed pyspark package (pip's has ``bin/``)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")  # found, not imported: this runs before every batch
    if spec is None or not spec.origin:
        raise ConfigError("Spark is not installed: pip install pyspark, or set SPARK_HOME")
    return Path(spec.origin).resolve().parent


def java_executable() -> str:
    """The ``java`` that Spark's scripts run: ``$JAVA_HOME/bin/java``, else PATH."""
    if os.environ.get("JAVA_HOME"):
        java = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        if not java.is_file():
            raise ConfigError(f"JAVA_HOME is {os.environ['JAVA_HOME']} but {java} does not exist")
        return str(java)
    found = shutil.which("java")
    if not found:
        raise ConfigError("Java not found: Spark needs a JDK 17 or 21 on PATH or in JAVA_HOME")
    return found


def archive_key(java: str, home: Path) -> str:
    """What an archive depends on: the JVM build, the jars (names, sizes, times) and our flags."""
    digest = hashlib.sha256()
    real_java = Path(java).resolve()
    stat = real_java.stat()
    digest.update(f"{real_java}|{stat.st_size}|{stat.st_mtime_ns}|{' '.join(LEAN_JAVA_OPTIONS)}\n".encode())
    jars = (home / "jars").resolve()
    digest.update(f"{jars}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        jar_stat = jar.stat()
        digest.update(f"{jar.name}|{jar_stat.st_size}|{jar_stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_dirs() -> list[Path]:
    """Where archives live: inside this Python environment (it goes with the install), then the
    user's cache (for an environment this user cannot write)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [Path(sys.prefix) / "share" / "kafka-batch", cache / "kafka-batch"]


def default_archive_dir() -> Path:
    """Where a new archive is recorded: the environment when this user may write there."""
    prefix, cache = archive_dirs()
    return prefix if os.access(prefix if prefix.exists() else Path(sys.prefix), os.W_OK) else cache


def class_archive_path() -> Path | None:
    """Where this installation's archive is (or would be recorded); ``None`` when switched off.

    An archive that exists in either place is found, whoever may write there: a venv installed
    by root and used by the ``airflow`` user keeps the archive root built.
    """
    configured = os.environ.get(ARCHIVE_ENV, "").strip()
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    try:
        key = archive_key(java_executable(), spark_home())
    except (ConfigError, OSError):
        return None  # no Java or no Spark here: the batch itself will say so
    name = f"spark-classes-{key}.jsa"
    existing = [folder / name for folder in archive_dirs() if (folder / name).is_file()]
    return existing[0] if existing else default_archive_dir() / name


def archive_status() -> dict[str, Any]:
    """Where the archive is (``None`` when switched off), whether it exists, its size."""
    path = class_archive_path()
    exists = path is not None and path.is_file()
    return {"path": str(path) if path else None, "exists": exists, "bytes": path.stat().st_size if exists else 0}


def java_flag(flag: str) -> str:
    """``flag`` as one word of Spark's java options, which Spark splits at spaces unless quoted."""
    return f'"{flag}"' if any(c.isspace() for c in flag) else flag


def spark_defaults() -> dict[str, str]:
    """The settings of ``spark-defaults.conf`` (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``)."""
    try:
        folder = Path(os.environ["SPARK_CONF_DIR"]) if os.environ.get("SPARK_CONF_DIR") else spark_home() / "conf"
        lines = (folder / "spark-defaults.conf").read_text().splitlines()
    except (ConfigError, OSError):
        return {}
    # Java properties syntax, as Spark reads it: "key value", "key=value" or "key: value".
    pairs = (_PROPERTY.match(line.strip()) for line in lines if not line.strip().startswith(("#", "!")))
    return {match[1]: match[2].strip() for match in pairs if match}


_PROPERTY = re.compile(r"([^\s=:]+)\s*[\s=:]\s*(.*)")


#: A JVM accepts one collector: the user's or the administrator's choice replaces ours.
_CHOOSES_GC = re.compile(r"-XX:\+Use\w*GC\b")


def driver_java_options(user_options: str | None = None, short_lived: bool = True, admin_options: str = "") -> str:
    """The lean flags (``short_lived``), the archive's when it exists, then the user's own (last,
    so they win).

    :param admin_options: ``spark.driver.defaultJavaOptions``, which Spark puts in front of
        these: a collector chosen there or in ``user_options`` drops ours (two are refused).
    """
    archive = class_archive_path()
    chosen_gc = _CHOOSES_GC.search(f"{user_options or ''} {admin_options or ''}")
    flags = [f for f in LEAN_JAVA_OPTIONS if not (chosen_gc and _CHOOSES_GC.search(f))] if short_lived else []
    if archive is not None and archive.is_file():
        flags.append(java_flag(f"-XX:SharedArchiveFile={archive}"))
    if user_options and user_options.strip():
        flags.append(user_options.strip())
    return " ".join(flags)


def lean_submit_conf(
    master: str, conf: Mapping[str, str] | None = None, local_driver: bool = True, short_lived: bool = True
) -> dict[str, str]:
    """``conf`` (the user's Spark settings) with the start-up settings under it.

    :param local_driver: whether the driver runs here (client deploy mode), so the archive's
        path and the driver's flags mean something to it.
    :param short_lived: a batch (lean JVM, no UI) rather than a server that runs for days
        (a Spark Connect server keeps the optimising compiler; it gets the archive and the
        worker daemon only).
    """
    conf = dict(conf or {})
    merged = dict(LEAN_CONF) if short_lived else {}
    if not needs_py_files(master):  # a local master's workers run this Python, which has the package
        merged["spark.python.daemon.module"] = DAEMON_MODULE
    if local_driver:
        # Our --conf replaces spark-defaults.conf's value: carry that value over, not drop it.
        defaults = spark_defaults()
        user = conf.pop(DRIVER_JAVA_OPTIONS, None) or defaults.get(DRIVER_JAVA_OPTIONS)
        admin = conf.get("spark.driver.defaultJavaOptions") or defaults.get("spark.driver.defaultJavaOptions", "")
        options = driver_java_options(user, short_lived, admin)
        if options:
            merged[DRIVER_JAVA_OPTIONS] = options
    merged.update(conf)
    return merged

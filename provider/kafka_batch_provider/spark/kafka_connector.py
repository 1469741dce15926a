"""Spark's Kafka connector (``spark-sql-kafka-0-10``) for the ``jvm`` reader: where its jars are.

pip's pyspark has no Kafka connector, and resolving one at run time (``--packages``, Ivy) downloads
from a repository on every start, on every machine. ``make jvm-tools`` fetches the pinned jars of
``jvm/spark-kafka/pom.xml`` once into ``$KAFKA_BATCH_TOOLS_DIR/spark-kafka/jars`` (the connector,
its token provider, kafka-clients, commons-pool2); every place Spark runs gets them from there:

* spark-submit (``kafka-batch``, ``KafkaSparkBatchOperator``): ``--jars``, added to the user's own
  ``spark.jars``; the driver's file server hands them to a cluster's executors;
* the local Spark Connect server (``kafka-batch spark-connect start``): started with them.

``$KAFKA_BATCH_SPARK_KAFKA_JARS`` names another folder (or a comma-separated list of jars). A
Spark that has the connector already (in ``$SPARK_HOME/jars``, or named by ``spark.jars`` or
``spark.jars.packages``) needs none of this; without any, the ``jvm`` reader is refused in one
line before anything is planned.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError

#: The project's tools folder (the Makefile exports it); default ``./.tools``.
TOOLS_ENV = "KAFKA_BATCH_TOOLS_DIR"
#: A folder of jars, or a comma-separated list of jar files, instead of the tools folder's.
JARS_ENV = "KAFKA_BATCH_SPARK_KAFKA_JARS"
JVM_TOOLS_TARGET = "make jvm-tools"
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10"


def connector_folder() -> Path:
    """``$KAFKA_BATCH_TOOLS_DIR/spark-kafka/jars`` (default ``./.tools/spark-kafka/jars``)."""
    return Path(os.environ.get(TOOLS_ENV) or Path.cwd() / ".tools").absolute() / "spark-kafka" / "jars"


def connector_jars() -> list[Path]:
    """The connector's jars, sorted; ``[]`` when the connector is not among them (not fetched)."""
    given = os.environ.get(JARS_ENV, "").strip()
    if given and not Path(given).is_dir():
        jars = [Path(part.strip()).absolute() for part in given.split(",") if part.strip()]
    else:
        folder = Path(given).absolute() if given else connector_folder()
        jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    has_connector = any(jar.name.startswith(f"{CONNECTOR_ARTIFACT}_") and jar.is_file() for jar in jars)
    return jars if has_connector else []


def provided_otherwise(conf: Mapping[str, str] | None = None) -> bool:
    """Whether Spark gets the connector some other way: its own jars folder, or the user's
    ``spark.jars`` / ``spark.jars.packages``."""
    from kafka_batch_provider.spark.jvm_start import spark_defaults

    settings = {**spark_defaults(), **(conf or {})}
    named = f"{settings.get('spark.jars', '')},{settings.get('spark.jars.packages', '')}"
    if CONNECTOR_ARTIFACT in named:
        return True
    home = os.environ.get("SPARK_HOME")
    return bool(home) and any((Path(home) / "jars").glob(f"{CONNECTOR_ARTIFACT}_*.jar"))


def missing_line() -> str:
    """The one line of a ``jvm`` reader without the connector."""
    source = os.environ.get(JARS_ENV) or str(connector_folder())
    return (
        f"the jvm reader needs Spark's Kafka connector ({CONNECTOR_ARTIFACT}), whose jars are not in {source}: "
        f"fetch them with `{JVM_TOOLS_TARGET}` (or set {TOOLS_ENV} to the folder that holds spark-kafka/jars), "
        f"or use {Setting('reader', 'python')}"
    )


def jars_for_reader(reader: str, conf: Mapping[str, str] | None = None) -> list[str]:
    """The jars a spark-submit of the ``reader`` adds (none for the ``python`` reader).

    :raises ConfigError: the ``jvm`` reader, and no connector here or in ``conf``.
    """
    if reader != "jvm":
        return []
    jars = connector_jars()
    if jars:
        return [str(jar) for jar in jars]
    if provided_otherwise(conf):
        return []
    raise ConfigError(missing_line())


def with_jars(conf: Mapping[str, str], jars: list[str]) -> dict[str, str]:
    """``conf`` with ``jars`` after the user's own ``spark.jars`` (from ``conf``, else from
    ``spark-defaults.conf``): one setting, which a second would replace."""
    from kafka_batch_provider.spark.jvm_start import spark_defaults

    merged = dict(conf)
    if jars:
        own = merged.get("spark.jars") or spark_defaults().get("spark.jars", "")
        merged["spark.jars"] = ",".join(filter(None, [own, *jars]))
    return merged

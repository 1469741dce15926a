"""Spark's Python worker daemon, importing pyspark from its installed copy.

Spark starts its Python processes (the driver of a ``.py`` application, the worker daemon)
with ``$SPARK_HOME/python/lib/pyspark.zip`` first on ``PYTHONPATH``. Python cannot cache
byte code for modules imported from a zip, so every such process compiles pyspark's modules
from source again: about 0.7 s for the daemon and more in each worker, on every batch (measured
in ``docs/performance.md``). When Spark's home *is* the pip-installed pyspark package, the zip
and the installed modules are the same release, and the installed ones have their byte code
cached: dropping the zip from ``sys.path`` loses nothing.

``spark.python.daemon.module=kafka_batch_provider.spark.worker_daemon`` (set by
:mod:`kafka_batch_provider.spark.jvm_start` for local masters, whose Python has this package)
runs pyspark's own daemon after that. Nothing else is imported before the daemon forks its
workers: pyspark's rule, because pyarrow and pandas start threads when imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib.machinery import PathFinder


def bundled_zips_of_installed_pyspark(path: Iterable[str]) -> list[str]:
    """The entries of ``path`` that are the ``pyspark.zip`` / ``py4j-*-src.zip`` shipped inside an
    installed ``pyspark`` package (``.../pyspark/python/lib/``): copies of what is installed."""
    found = []
    for entry in path:
        name = os.path.basename(entry)
        if name != "pyspark.zip" and not (name.startswith("py4j-") and name.endswith("-src.zip")):
            continue
        lib = os.path.dirname(entry)
        python = os.path.dirname(lib)
        package = os.path.dirname(python)
        if (
            os.path.basename(lib) == "lib"
            and os.path.basename(python) == "python"
            and os.path.basename(package) == "pyspark"
            and os.path.isfile(os.path.join(package, "__init__.py"))
        ):
            found.append(entry)
    return found


def use_installed_pyspark() -> None:
    """Import pyspark (and py4j) from site-packages, where their byte code is cached, not from
    the zips Spark put first on ``sys.path``. Call before anything imports pyspark.

    A zip stays when this interpreter cannot find its package anywhere else (a ``PYSPARK_PYTHON``
    without pyspark installed)."""
    zips = bundled_zips_of_installed_pyspark(sys.path)
    rest = [entry for entry in sys.path if entry not in zips]
    for entry in zips:
        module = "pyspark" if os.path.basename(entry) == "pyspark.zip" else "py4j"
        if PathFinder.find_spec(module, rest) is not None:
            sys.path.remove(entry)


def main() -> None:
    use_installed_pyspark()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()

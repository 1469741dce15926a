"""Shipping this package to a Spark cluster as a zip for ``--py-files``.

The executors of a cluster run our code (the ``kafka_batch`` data source, the task writer)
in their own Python. Installing the provider on every node would tie each deployment of
the provider to a rollout on the cluster; instead the nodes need only the third-party
dependencies (pyarrow, confluent-kafka, fsspec, ...) and each application ships the exact
code it was planned with, as a zip that Spark puts ahead of site-packages on the executors'
``sys.path``.

The zip is deterministic (sorted entries, fixed timestamps and modes) and named by a hash
of its content, so building it again for unchanged code reuses the file, and a changed
package never reuses a stale zip. It is written to a temporary file and renamed into
place, so two processes building it at once never see half a zip.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import zipfile
from pathlib import Path

import kafka_batch_provider
from kafka_batch_provider.errors import ConfigError

PACKAGE = "kafka_batch_provider"

#: Timestamp of every entry: the earliest a zip can hold, so the bytes never depend on mtimes.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)

#: Masters whose executors are threads of the driver's JVM, with the driver's Python path.
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def needs_py_files(master: str) -> bool:
    """Whether executors of ``master`` need the package shipped to them.

    Only ``local``, ``local[N]``, ``local[*]`` and ``local[N,F]`` run the tasks in the
    driver's own environment. Everything else gets the zip: ``spark://``, ``yarn``,
    ``k8s://``, ``mesos://``, and also ``local-cluster[...]``, whose executors are separate
    JVMs (so they behave like a cluster's, which is what that master is for).
    """
    master = master.strip()
    if not master:
        raise ConfigError("the Spark master is empty: pass e.g. local[*], spark://host:7077 or yarn")
    return _LOCAL_MASTER.fullmatch(master) is None


def package_dir() -> Path:
    """The directory of the installed (or editable) ``kafka_batch_provider`` package."""
    return Path(kafka_batch_provider.__file__).resolve().parent


def default_directory() -> Path:
    """A per-user cache directory under the system's temporary directory."""
    return Path(tempfile.gettempdir()) / f"kafka-batch-py-files-{os.getuid()}"


def package_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for every file of the package, sorted by name.

    Byte code (``__pycache__``, ``*.pyc``) is left out: it depends on the Python version
    that compiled it, and the executors compile their own.
    """
    root = root or package_dir()
    entries = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if "__pycache__" in relative.parts or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        entries.append(((Path(PACKAGE) / relative).as_posix(), path))
    return sorted(entries)


def package_zip(directory: str | Path | None = None) -> Path:
    """The package as a zip for ``--py-files``: ``kafka_batch_provider-<version>-<hash12>.zip``.

    :param directory: where to keep it (default: :func:`default_directory`). An existing zip
        with the same name is reused: the name is a hash of the content.
    """
    entries = [(name, path.read_bytes()) for name, path in package_files()]
    if not any(name == f"{PACKAGE}/__init__.py" for name, _ in entries):
        raise ConfigError(f"{package_dir()} holds no {PACKAGE}/__init__.py: is the package installed?")
    digest = hashlib.sha256()
    for name, data in entries:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    target_dir = Path(directory) if directory is not None else default_directory()
    _make_dir(target_dir, private=directory is None)
    target = target_dir / f"{PACKAGE}-{kafka_batch_provider.__version__}-{digest.hexdigest()[:12]}.zip"
    if target.is_file():
        return target
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target_dir)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as archive:
            for name, data in entries:
                info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                info.create_system = 3  # Unix, whatever builds it, so the bytes are the same
                archive.writestr(info, data)
        os.chmod(temporary, 0o644)  # mkstemp makes it 0600; spark-submit may run as another user
        os.replace(temporary, target)  # atomic: readers see no zip or a whole one
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _make_dir(path: Path, private: bool) -> None:
    """Create ``path``; the default, shared-``/tmp`` one must be ours alone, or another user could plant a zip."""
    try:
        if private:
            path.mkdir(mode=0o700, exist_ok=True)
        else:
            path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the py-files directory {path}: {exc.strerror}") from None
    if private and (path.stat().st_uid != os.getuid() or path.stat().st_mode & 0o022):
        raise ConfigError(f"{path} belongs to another user or others can write to it: pass a directory of your own")

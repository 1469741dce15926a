"""Where an output lives: a local path or a URI, reached through an fsspec filesystem.

``--output`` takes ``/data/lake``, ``file:///data/lake``, ``s3://bucket/lake``,
``gs://bucket/lake`` or ``abfs://container@account.dfs.core.windows.net/lake``. No Hadoop
connector jars are involved: the driver and the Spark tasks open the same filesystem with
fsspec (s3fs, gcsfs, adlfs).
Credentials come from the usual places (``AWS_*`` variables, instance roles, gcloud/Azure
defaults) or from storage options (``--storage-options-file``, an Airflow connection); they
are never written anywhere by this package.

Two operations carry the protocol's guarantees and differ per filesystem:

* :meth:`Location.create_exclusive`: create a small file only if it does not exist yet,
  atomically. Local disks: ``link(2)`` of a fully written temporary file (fails with
  ``EEXIST``). Object stores: a conditional write (S3 ``If-None-Match: *``, GCS
  ``ifGenerationMatch=0``, Azure ``If-None-Match: *``), done by the server. The offset log
  relies on it. HDFS is refused: the Python clients reachable here cannot ask for it
  (pyarrow's HDFS move replaces an existing file, WebHDFS ``CREATE`` is sent with
  ``overwrite=true`` and fsspec ignores a refused ``RENAME``).
* :meth:`Location.put_atomic`: replace a small file so that readers see the old or the new
  content. Local: temporary file, ``fsync``, ``rename``. Object stores: one PUT.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kafka_batch_provider.core.settings import Setting
from kafka_batch_provider.errors import ConfigError, KafkaBatchError, StorageAccessError, StorageError
from kafka_batch_provider.settings_file import read_settings_file

#: Scheme -> (fsspec protocol, the package that provides it, pip extra).
SCHEMES: dict[str, tuple[str, str, str]] = {
    "file": ("file", "fsspec", ""),
    "s3": ("s3", "s3fs", "s3"),
    "s3a": ("s3", "s3fs", "s3"),
    "gs": ("gcs", "gcsfs", "gcs"),
    "gcs": ("gcs", "gcsfs", "gcs"),
    "abfs": ("abfs", "adlfs", "azure"),
    "abfss": ("abfs", "adlfs", "azure"),
    "az": ("abfs", "adlfs", "azure"),
    "hdfs": ("hdfs", "pyarrow", ""),  # refused, with the reason (see HDFS_REFUSED)
    "webhdfs": ("hdfs", "fsspec", ""),
    # a database output's own files, in its database (output/database_files.py)
    "dbfiles": ("dbfiles", "psycopg", "postgres"),
}

HDFS_REFUSED = (
    "hdfs:// outputs are not supported: the HDFS clients reachable from Python (pyarrow's libhdfs, "
    "fsspec's WebHDFS) cannot create a file only if it is absent, so two runs could both publish "
    "a batch; use an object store, a local disk or a filesystem mounted on every node (NFS, FUSE)"
)


def split_output(output: str) -> tuple[str, str]:
    """``(fsspec protocol, path inside that filesystem)`` for a local path or a URI.

    Local paths become absolute. A URI keeps its bucket/container and key prefix; a
    trailing slash is dropped so that joining names is unambiguous.
    """
    text = str(output).strip()
    if not text:
        raise ConfigError(f"the output location is empty ({Setting('output_path')})", setting=Setting("output_path"))
    if "://" not in text:
        return "file", str(Path(text).expanduser().absolute())
    scheme = urlsplit(text).scheme.lower()
    if scheme not in SCHEMES:
        known = ", ".join(sorted(f"{s}://" for s in SCHEMES))
        raise ConfigError(f"output {text!r}: unsupported scheme {scheme}://; use a local path or one of {known}")
    protocol = SCHEMES[scheme][0]
    rest = text.split("://", 1)[1]
    if protocol == "file":
        if not rest.startswith("/"):
            raise ConfigError(f"output {text!r}: a file:// URI needs an absolute path (file:///data/lake)")
        return "file", str(Path(rest))
    if protocol == "hdfs":
        raise ConfigError(f"output {text!r}: {HDFS_REFUSED}")
    path = rest.rstrip("/")
    if not path or path.startswith("/"):
        raise ConfigError(f"output {text!r}: name a bucket or container, e.g. {scheme}://bucket/lake")
    return protocol, path


#: Storage options that are ours, not the filesystem's: settings passed on to a table format's
#: own object-store client (``delta_options``, see :mod:`kafka_batch_provider.output.delta`).
NOT_FOR_FSSPEC = ("delta_options",)


def filesystem(protocol: str, storage_options: Mapping[str, Any] | None = None):
    """An fsspec filesystem for ``protocol``, or one line saying which package is missing."""
    import fsspec

    storage_options = {k: v for k, v in dict(storage_options or {}).items() if k not in NOT_FOR_FSSPEC}

    if protocol == "file":
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem()
    package, extra = next((p, e) for proto, p, e in SCHEMES.values() if proto == protocol)
    if protocol == "dbfiles":
        from kafka_batch_provider.output.database_files import DatabaseFileSystem

        return DatabaseFileSystem(**storage_options)
    try:
        return fsspec.filesystem(protocol, **storage_options)
    except ImportError:
        hint = f"pip install 'airflow-provider-kafka-batch[{extra}]'" if extra else f"pip install {package}"
        raise ConfigError(f"{protocol}:// outputs need the {package} package: {hint}") from None
    except TypeError as exc:  # an unknown storage option
        raise ConfigError(f"bad storage option for {protocol}://: {exc}") from None


@dataclass
class Location:
    """An output location: its URI and the filesystem that reaches it.

    Paths given to the methods are relative to the location (``_log/…``, ``batch_id=…/…``).

    :param output: a local path or a URI (see the module docstring).
    :param storage_options: options for the fsspec filesystem (credentials, endpoint, ...).
    """

    output: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.protocol, self.root = split_output(self.output)
        self.storage_options = dict(self.storage_options or {})
        self._fs = None

    @property
    def fs(self):
        if self._fs is None:
            self._fs = filesystem(self.protocol, self.storage_options)
        return self._fs

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def uri(self) -> str:
        """The canonical form: ``file:///abs/path`` or ``scheme://bucket/prefix`` (no secrets)."""
        if self.protocol == "file":
            return Path(self.root).as_uri()
        scheme = {"s3": "s3", "gcs": "gs", "abfs": "abfs", "dbfiles": "dbfiles"}[self.protocol]
        return f"{scheme}://{self.root}"

    def __str__(self) -> str:
        return str(self.root) if self.is_local else self.uri

    def path(self, *names: str) -> str:
        """The filesystem path of ``names`` below the location."""
        return posixpath.join(self.root, *names) if names else self.root

    def uri_of(self, *names: str) -> str:
        """A URI (or local path) of ``names`` below the location, for users and Spark tasks."""
        if self.is_local:
            return self.path(*names)
        return posixpath.join(self.uri, *names)

    # -- reading ---------------------------------------------------------------------------

    def _fresh(self, name: str) -> str:
        """The path of ``name``, with what the filesystem remembered of it forgotten: object-store
        filesystems answer from listings they cached (s3fs sizes a file from its folder's listing
        before reading it), and another process, or another instance, may have written it since."""
        path = self.path(name)
        if not self.is_local:
            self.fs.invalidate_cache(path)
        return path

    def exists(self, name: str) -> bool:
        return self._io(f"check {name}", lambda: self.fs.exists(self._fresh(name)))

    def read_bytes(self, name: str) -> bytes:
        """The content of ``name``; :class:`FileNotFoundError` when it does not exist."""
        try:
            return self.fs.cat_file(self._fresh(name))
        except FileNotFoundError:
            raise
        except (OSError, TypeError) as exc:
            raise self._error(f"read {name}", exc) from None

    def list_names(self, folder: str) -> list[str]:
        """Names directly inside ``folder`` (files and folders), sorted; empty when it does not exist."""

        def run() -> list[str]:
            try:
                entries = self.fs.ls(self.path(folder), detail=False, refresh=True)
            except FileNotFoundError:
                return []
            return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)

        return self._io(f"list {folder}", run)

    def file_sizes(self, folder: str) -> dict[str, int]:
        """``{name: bytes}`` of the files directly inside ``folder`` (empty when it does not exist)."""

        def run() -> dict[str, int]:
            try:
                entries = self.fs.ls(self.path(folder), detail=True, refresh=True)
            except FileNotFoundError:
                return {}
            return {
                posixpath.basename(str(e["name"]).rstrip("/")): int(e.get("size") or 0)
                for e in entries
                if e.get("type") == "file"
            }

        return self._io(f"list {folder}", run)

    def files_below(self, folder: str) -> dict[str, tuple[int, float]]:
        """``{name relative to folder: (bytes, modified at as epoch seconds)}`` of every file
        below ``folder``, at any depth (empty when it does not exist)."""

        def run() -> dict[str, tuple[int, float]]:
            base = self._fresh(folder).rstrip("/")
            # The listing spells paths the filesystem's way (adlfs drops "@account...", s3fs the
            # scheme): cut them by the base spelt the same way, never by its length as given.
            stripped = str(self.fs._strip_protocol(base)).rstrip("/") + "/"
            try:
                found = self.fs.find(base, detail=True, withdirs=False)
            except FileNotFoundError:
                return {}
            listed = {}
            for path, info in found.items():
                name = str(self.fs._strip_protocol(str(path)))
                if info.get("type") == "file" and name.startswith(stripped):
                    listed[name[len(stripped) :]] = (int(info.get("size") or 0), modified_at(info))
            return listed

        return self._io(f"list {folder}", run)

    def open_input(self, name: str):
        return self.fs.open(self._fresh(name), "rb")

    # -- writing ---------------------------------------------------------------------------

    def put_atomic(self, name: str, data: bytes) -> None:
        """Replace ``name`` so that a reader sees the old or the complete new content."""
        if self.is_local:

            def replace() -> None:
                target = Path(self.path(name))
                tmp = self._write_local_temp(target, data)
                os.replace(tmp, target)
                fsync_dir(target.parent)

            self._io(f"write {name}", replace, writing=True)
            return
        self._io(f"write {name}", lambda: self.fs.pipe_file(self.path(name), data), writing=True)

    def create_exclusive(self, name: str, data: bytes) -> bool:
        """Create ``name`` with ``data`` only if it does not exist; ``False`` when it already did.

        Atomic: of several writers racing for the same name, exactly one gets ``True``, and
        nobody ever sees a partly written file.
        """
        if self.is_local:

            def link() -> bool:
                target = Path(self.path(name))
                tmp = self._write_local_temp(target, data)
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    return False
                finally:
                    tmp.unlink(missing_ok=True)
                fsync_dir(target.parent)
                return True

            try:
                return self._io(f"create {name}", link, writing=True)
            except FileExistsError:  # a file where a folder should be: not a race, a broken output
                raise StorageError(f"cannot create {name} in {self}: a file is in the way") from None
        try:
            self.fs.pipe_file(self.path(name), data, mode="create")
        except FileExistsError:
            return False
        except (OSError, TypeError) as exc:
            if "precondition" in str(exc).lower():  # 412 where a library does not map it
                return False
            raise self._error(f"create {name}", exc) from None
        return True

    def write_stream(self, name: str):
        """A binary file object for a new data file (parent folders are created as needed)."""
        if self.is_local:  # a plain file, so that the writer can fsync it
            Path(self.path(name)).parent.mkdir(parents=True, exist_ok=True)
            return open(self.path(name), "wb")
        return self._io(f"create {name}", lambda: self.fs.open(self.path(name), "wb"))

    def delete(self, names: Iterable[str]) -> None:
        """Remove files; one that is already gone (a concurrent cleaner) is fine."""
        for name in names:
            try:
                self._io(f"delete {name}", lambda name=name: self.fs.rm_file(self.path(name)))
            except FileNotFoundError:
                pass

    def delete_tree(self, folder: str) -> None:
        """Remove ``folder`` and everything below it; nothing happens when it does not exist."""

        def run() -> None:
            try:
                self.fs.rm(self.path(folder), recursive=True)
            except FileNotFoundError:
                pass

        self._io(f"delete {folder}", run)

    def copy(self, source: str, target: str) -> None:
        """Server-side copy on object stores (the bytes do not pass through this process)."""
        self._io(f"copy {source}", lambda: self.fs.copy(self.path(source), self.path(target)))

    def rename_folder(self, source: str, target: str) -> None:
        """Local only: an atomic rename of a folder, made durable."""

        def rename() -> None:
            os.replace(self.path(source), self.path(target))
            fsync_dir(Path(self.path(target)).parent)

        self._io(f"rename {source}", rename)

    def move_files(self, source: str, target: str, names: Iterable[str]) -> None:
        """Local only: move ``names`` from folder ``source`` into the new folder ``target``, durably."""

        def move() -> None:
            Path(self.path(target)).mkdir(parents=True)
            for name in names:
                os.rename(self.path(source, name), self.path(target, name))
            fsync_dir(self.path(target))
            fsync_dir(self.path(source))

        self._io(f"move files into {target}", move)

    def move_into(self, source: str, target: str, names: Iterable[str]) -> None:
        """Local only: move ``names`` from folder ``source`` into folder ``target`` (created when
        missing, kept when there), each with one atomic rename, durably."""

        def move() -> None:
            Path(self.path(target)).mkdir(parents=True, exist_ok=True)
            for name in names:
                os.rename(self.path(source, name), self.path(target, name))
            fsync_dir(self.path(target))
            fsync_dir(Path(self.path(target)).parent)

        self._io(f"move files into {target}", move)

    # -- helpers ---------------------------------------------------------------------------

    def _write_local_temp(self, target: Path, data: bytes) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def supports_exclusive_create(self, folder: str) -> bool:
        """Probe: does this store refuse a second create of one name? (Some S3-compatible stores
        ignore ``If-None-Match``; then the log could not stop a second writer.)"""
        if self.is_local:
            return True
        probe = f"{folder}/_probe-{uuid.uuid4().hex}"
        try:
            first = self.create_exclusive(probe, b"1")
            second = self.create_exclusive(probe, b"2")
        finally:
            self.delete([probe])
        return first and not second

    def require_exclusive_create(self, folder: str, guarded: str) -> None:
        """Refuse in one line a store that accepts a second create of one name: ``guarded`` (the
        offset log, a table's commits) could not stop two writers from both publishing there."""
        if not self.supports_exclusive_create(folder):
            raise StorageAccessError(  # the store's nature: a retry meets the same store
                f"{self} accepts a second create of the same name (it ignores If-None-Match or its equivalent): "
                f"{guarded} could not stop two writers from both publishing; use a store with conditional writes "
                "(AWS S3, GCS, Azure, MinIO from 2024)"
            )

    def _io(self, what: str, fn, writing: bool = False):
        """Run ``fn``; a missing file stays :class:`FileNotFoundError` for readers, but a write
        whose folder cannot be created (``/proc/...``) is an error like any other."""
        try:
            return fn()
        except FileExistsError:
            raise
        except FileNotFoundError as exc:
            if writing:
                raise self._error(what, exc) from None
            raise
        except (OSError, ValueError, TypeError) as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: Exception) -> KafkaBatchError:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, TypeError):
            if "unexpected keyword argument" not in reason:
                raise exc  # a bug, not a setting: keep its traceback
            # s3fs, gcsfs, adlfs pass storage options on to their sessions when first used.
            return ConfigError(f"bad storage option for {self}: {reason}")
        if refused_access(exc):
            return StorageAccessError(
                f"cannot {what} in {self}: access refused ({reason}); check the output's path, credentials "
                "and permissions"
            )
        return StorageError(f"cannot {what} in {self}: {reason}")


def refused_access(exc: BaseException) -> bool:
    """Whether the store refused access rather than failed: permissions, credentials (s3fs, gcsfs
    and adlfs raise :class:`PermissionError` for HTTP 401/403), a read-only filesystem, or a
    folder that cannot exist (a path below a file, below ``/proc``). No retry changes these."""
    if isinstance(exc, (PermissionError, FileNotFoundError, NotADirectoryError)):
        return True
    return getattr(exc, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or link in ``path`` durable (the directory entry itself must reach the disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def modified_at(info: dict[str, Any]) -> float:
    """When a file was last written, as epoch seconds, from any fsspec filesystem's listing
    (local ``mtime``; s3fs ``LastModified``; gcsfs ``updated``; adlfs ``last_modified``)."""
    from datetime import datetime

    for key in ("mtime", "LastModified", "updated", "last_modified", "modified"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return float("inf")  # unknown: never old enough to be removed


#: Control files up to this size are indented for people to read; larger ones (a plan of
#: thousands of partitions) stay on one line: only then does json use its C encoder, which
#: wrote a 10,000-partition plan in 0.03 s instead of 0.28 s.
INDENTED_UP_TO = 64 * 1024


def json_bytes(data: Any) -> bytes:
    compact = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if len(compact) > INDENTED_UP_TO:
        return compact.encode()
    return json.dumps(data, indent=2, sort_keys=True).encode()


def read_storage_options_file(path: str) -> dict[str, Any]:
    """A JSON object of fsspec storage options (credentials stay in the file, out of argv)."""
    return read_settings_file(path, "storage options")

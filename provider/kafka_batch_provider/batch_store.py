"""The output directory: where plans, data, manifests and commit records live.

Layout (every name starting with ``_`` is invisible to Parquet readers)::

    <output>/
      batch_id=<id>/part-*.parquet     published data, one directory per batch
      _plans/<id>.json                 the plan, written before anything is read
      _manifests/<id>.json             written last: the storage-side commit point
      _commits/<id>.json               the Kafka commit of the batch, once it succeeded
      _staging/<id>.<attempt>/         Spark writes here, then the directory is renamed

Every JSON file is written to a temporary name and renamed into place, so a reader or a
crashed process never sees half a file. Local (POSIX) filesystems only: publishing relies
on an atomic directory rename.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kafka_batch_provider.errors import ConfigError, ManifestError
from kafka_batch_provider.plan import INCREMENTAL, OffsetPlan

PLANS = "_plans"
MANIFESTS = "_manifests"
COMMITS = "_commits"
STAGING = "_staging"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that ``path`` holds either the old or the complete new content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (the directory entry itself must reach the disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(folder: Path) -> None:
    """fsync every file below ``folder`` and the directories holding them."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for directory in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        fsync_dir(directory)


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


class BatchStore:
    """Plans, manifests and commit records of one output directory.

    :param output: the dataset directory (a local path).
    """

    def __init__(self, output: str | os.PathLike[str]) -> None:
        text = str(output)
        if "://" in text and not text.startswith("file://"):
            raise ConfigError(f"output {text!r}: only local paths are supported (publishing needs an atomic rename)")
        self.root = Path(text.removeprefix("file://")).absolute()

    # -- locations ---------------------------------------------------------------------------

    def data_dir(self, batch_id: str) -> Path:
        return self.root / f"batch_id={batch_id}"

    def plan_path(self, batch_id: str) -> Path:
        return self.root / PLANS / f"{batch_id}.json"

    def manifest_path(self, batch_id: str) -> Path:
        return self.root / MANIFESTS / f"{batch_id}.json"

    def commit_path(self, batch_id: str) -> Path:
        return self.root / COMMITS / f"{batch_id}.json"

    def new_staging_dir(self, batch_id: str) -> Path:
        """A fresh directory name per attempt, so a retry never writes into a crashed attempt's files."""
        return self.root / STAGING / f"{batch_id}.{uuid.uuid4().hex[:8]}"

    # -- plans -------------------------------------------------------------------------------

    def save_plan(self, plan: OffsetPlan) -> Path:
        path = self.plan_path(plan.batch_id)
        write_json_atomic(path, plan.to_dict())
        return path

    def load_plan(self, batch_id: str) -> OffsetPlan:
        return load_plan_file(self.plan_path(batch_id))

    def plans(self) -> list[OffsetPlan]:
        folder = self.root / PLANS
        if not folder.is_dir():
            return []
        return [load_plan_file(p) for p in sorted(folder.glob("*.json"))]

    def pending_plans(self, group_id: str) -> list[OffsetPlan]:
        """Incremental plans of ``group_id`` that were never committed, oldest first."""
        pending = [
            p
            for p in self.plans()
            if p.mode == INCREMENTAL and p.group_id == group_id and not self.commit_path(p.batch_id).exists()
        ]
        return sorted(pending, key=lambda p: p.created_at)

    # -- manifests ---------------------------------------------------------------------------

    def has_manifest(self, batch_id: str) -> bool:
        return self.manifest_path(batch_id).exists()

    def load_manifest(self, batch_id: str) -> dict[str, Any]:
        path = self.manifest_path(batch_id)
        try:
            return read_json(path)
        except FileNotFoundError:
            raise ManifestError(f"batch {batch_id} has no manifest at {path}: run the write step first") from None
        except ValueError as exc:
            raise ManifestError(f"manifest {path} is not valid JSON: {exc}") from None

    def save_manifest(self, manifest: dict[str, Any]) -> Path:
        path = self.manifest_path(manifest["batch_id"])
        write_json_atomic(path, manifest)
        return path

    def publish(self, staging: Path, batch_id: str) -> Path:
        """Move a finished staging directory to the batch's location, replacing a previous attempt.

        A rename is atomic, so readers see all of the batch or none of it. A previous copy
        (an attempt that crashed before its manifest) is first moved aside, never merged.
        """
        sync_tree(staging)  # Spark's local writer does not fsync; the Kafka commit will rely on these bytes
        final = self.data_dir(batch_id)
        self._take_down(batch_id, "replaced")
        os.replace(staging, final)
        fsync_dir(self.root)
        return final

    def remove_batch(self, batch_id: str) -> None:
        """Manifest, then data, then plan: a crash in between leaves a pending plan to replay."""
        self.manifest_path(batch_id).unlink(missing_ok=True)
        self._take_down(batch_id, "discarded")
        self.plan_path(batch_id).unlink(missing_ok=True)
        fsync_dir(self.root)

    def _take_down(self, batch_id: str, why: str) -> None:
        """Make a published batch invisible at once (one rename), then delete it at leisure."""
        data = self.data_dir(batch_id)
        if data.exists():
            aside = self.root / STAGING / f"{batch_id}.{why}.{uuid.uuid4().hex[:8]}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            os.replace(data, aside)
            shutil.rmtree(aside, ignore_errors=True)

    # -- commit records ----------------------------------------------------------------------

    def record_commit(self, plan: OffsetPlan, committed: dict[str, int], rows: int, recovered: bool = False) -> Path:
        path = self.commit_path(plan.batch_id)
        write_json_atomic(
            path,
            {
                "batch_id": plan.batch_id,
                "group_id": plan.group_id,
                "committed": committed,
                "previous": {r.tp.key: r.expected_committed for r in plan.ranges},
                "rows": rows,
                "committed_at": utc_now(),
                "recovered": recovered,
            },
        )
        return path

    def commit_record(self, batch_id: str) -> dict[str, Any] | None:
        try:
            return read_json(self.commit_path(batch_id))
        except FileNotFoundError:
            return None

    def commit_records(self, group_id: str | None = None) -> list[dict[str, Any]]:
        """Commit history, oldest first (what lag health reads)."""
        folder = self.root / COMMITS
        if not folder.is_dir():
            return []
        records = [read_json(p) for p in folder.glob("*.json")]
        records = [r for r in records if group_id is None or r.get("group_id") == group_id]
        return sorted(records, key=lambda r: r["committed_at"])

    def clean_staging(self, batch_id: str) -> None:
        """Remove leftovers of earlier attempts of ``batch_id`` (never another batch's)."""
        folder = self.root / STAGING
        if folder.is_dir():
            for leftover in folder.glob(f"{batch_id}.*"):
                shutil.rmtree(leftover, ignore_errors=True)


def load_plan_file(path: str | os.PathLike[str]) -> OffsetPlan:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(f"plan file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read plan file {path}: {exc.strerror}") from None
    return OffsetPlan.from_json(text)


def output_of_plan_file(path: str | os.PathLike[str]) -> Path:
    """``<output>/_plans/<id>.json`` -> ``<output>``."""
    p = Path(path).absolute()
    if p.parent.name != PLANS:
        raise ConfigError(f"{path} is not inside an output's {PLANS}/ directory; pass --output")
    return p.parent.parent

"""The release checks' fixtures: the sdist and wheel built as a release builds them, and a clean
virtualenv with the wheel installed as the README tells users to install it.

* ``dists`` (module): ``uv build`` of the source tree git sees (tracked files and new ones not
  ignored, copied to a temporary folder so nothing in the work tree is written): the sdist, then
  the wheel built FROM that sdist, each in an isolated build environment with the build
  requirements pinned by ``constraints.txt``.
* ``wheel_venv`` (module): ``python -m venv --without-pip``, then ``uv pip install -c
  constraints.txt "<wheel>[airflow]"`` and ``uv pip install --no-deps --reinstall -c
  constraints.txt pyspark`` (the Spark provider's pyspark-client writes into pyspark's folder).

uv resolves from its cache first (``--offline``: seconds, the cache holds every pinned
distribution once ``make venv`` ran) and from the package index only when the cache lacks
something; each fixture records which it used and how long it took. Every subprocess gets
:meth:`WheelVenv.env`: no ``PYTHONPATH``, no variable of the project's virtualenv or of the
test session's Airflow, Spark or Kafka settings, the new venv's ``bin`` first on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
DIST_NAME = "airflow-provider-kafka-batch"

#: Variables the subprocesses must not inherit from the test session: the project's virtualenv
#: and Python settings (PYTHONPATH above all), the session's Airflow home and DAG folder, its
#: Spark and Kafka settings. ``KAFKA_BATCH_TOOLS_DIR`` (where the JVM tools are) is kept.
DROPPED_PREFIXES = ("PYTHON", "PYTEST", "VIRTUAL_ENV", "CONDA_", "AIRFLOW", "PYSPARK", "SPARK_", "KAFKA_")
KEPT = ("KAFKA_BATCH_TOOLS_DIR",)


def tail(result: subprocess.CompletedProcess, lines: int = 25) -> str:
    """The end of a subprocess's output, for an assertion's message."""
    out = "\n".join(result.stdout.strip().splitlines()[-8:]) if result.stdout else ""
    err = "\n".join(result.stderr.strip().splitlines()[-lines:]) if result.stderr else ""
    return f"exit {result.returncode}\n--- stdout (tail)\n{out}\n--- stderr (tail)\n{err}"


def uv_executable() -> str:
    """The uv that ``make venv`` installs next to this Python, else the one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if not found:
        pytest.fail(
            f"the release checks build and install with uv: none beside {sys.executable} or on PATH (make venv)"
        )
    return found


def base_environ() -> dict[str, str]:
    """This process's environment without what would leak the project's install or the
    session's settings into a subprocess."""
    env = {k: v for k, v in os.environ.items() if k in KEPT or not k.startswith(DROPPED_PREFIXES)}
    project_bin = Path(sys.prefix).resolve()
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(project_bin)]
    env["PATH"] = os.pathsep.join(path)
    env["NO_COLOR"] = "1"
    return env


#: What uv says when ``--offline`` lacked something in its cache, a package or a file (lower case;
#: any other failure is the answer).
OFFLINE_MISSES = ("the network was disabled", "network connectivity is disabled")


@dataclass
class Timed:
    """A step's command lines, whether uv used only its cache, and the seconds it took."""

    commands: list[str] = field(default_factory=list)
    offline: bool = True
    seconds: float = 0.0
    offline_failure: str = ""

    def uv(self, args: Sequence[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        """``uv <args>`` from the cache (``--offline``), else from the index: a cache that
        lacks a pinned distribution costs time, not the check."""
        start = time.monotonic()
        try:
            command = [uv_executable(), "--offline", *args]
            result = subprocess.run(
                command, cwd=cwd, env=base_environ(), capture_output=True, text=True, timeout=timeout
            )
            missed = any(miss in result.stderr.lower() for miss in OFFLINE_MISSES)
            if result.returncode != 0 and missed:  # not cached: from the index
                self.offline = False
                self.offline_failure = tail(result, 6)
                command = [uv_executable(), *args]
                result = subprocess.run(
                    command, cwd=cwd, env=base_environ(), capture_output=True, text=True, timeout=timeout
                )
            self.commands.append(" ".join(command))
            return result
        finally:
            self.seconds += time.monotonic() - start

    def describe(self) -> str:
        where = "uv's cache" if self.offline else f"the package index (the cache could not: {self.offline_failure})"
        return f"{self.seconds:.1f} s from {where}"


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    #: the files of the source tree they were built from, relative (what git sees)
    source_files: tuple[str, ...]
    build_log: str
    timing: Timed


@dataclass(frozen=True)
class WheelVenv:
    root: Path
    #: the folder this venv's subprocesses work in and keep their Airflow home and bytecode under
    scratch: Path
    site_packages: Path
    timing: Timed

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def airflow_home(self) -> Path:
        return self.scratch / "airflow-home"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A user's shell with this venv: its ``bin`` first on PATH, Airflow's home in the
        scratch folder, no examples; bytecode cached under the scratch folder (not next to the
        DAG files, not nowhere: the first Airflow import compiles, the later ones reuse it)."""
        env = base_environ()
        env["PATH"] = os.pathsep.join([str(self.root / "bin"), env["PATH"]])
        env["VIRTUAL_ENV"] = str(self.root)
        env["PYTHONPYCACHEPREFIX"] = str(self.scratch / "pycache")
        env["AIRFLOW_HOME"] = str(self.airflow_home)
        env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        env.update(extra or {})
        return env

    def run(
        self,
        args: Sequence[str | Path],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``args`` (the first a name in this venv's ``bin``, or a path) in a clean environment,
        from the scratch folder unless ``cwd`` is given: nothing of /work/main is on ``sys.path``."""
        first = str(args[0])
        program = str(self.bin(first)) if "/" not in first else first
        return subprocess.run(
            [program, *map(str, args[1:])],
            cwd=cwd or self.scratch,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python_json(self, code: str, *, timeout: float, env: Mapping[str, str] | None = None):
        """Run ``code`` with this venv's Python; the last line of its output, parsed as JSON."""
        result = self.run(["python", "-c", code], timeout=timeout, env=env)
        assert result.returncode == 0, f"the script failed in the installed venv:\n{tail(result)}"
        return json.loads(result.stdout.strip().splitlines()[-1])


def source_tree_files() -> list[str]:
    """The files a commit of the work tree would hold: tracked (and not deleted) plus new, not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return sorted({name for name in listed.split("\0") if name and (ROOT / name).is_file()})


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    base = tmp_path_factory.mktemp("release-build")
    source, out = base / "source", base / "dist"
    files = source_tree_files()
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    timing = Timed()
    # `uv build DIR`: the sdist, then the wheel from the unpacked sdist, as a release does.
    args = ["build", "--build-constraint", str(CONSTRAINTS), "--out-dir", str(out), str(source)]
    result = timing.uv(args, cwd=base, timeout=300)
    assert result.returncode == 0, f"uv build failed ({timing.commands[-1]}):\n{tail(result, 40)}"
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, f"expected one sdist and one wheel in {out}, found {sdists + wheels}"
    return Dists(sdists[0], wheels[0], tuple(files), result.stdout + result.stderr, timing)


@pytest.fixture(scope="module")
def wheel_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WheelVenv]:
    base = tmp_path_factory.mktemp("release-venv")
    root, scratch = base / "venv", base / "scratch"
    scratch.mkdir()
    timing = Timed()
    start = time.monotonic()
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)],
        cwd=base,
        env=base_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    timing.seconds += time.monotonic() - start
    assert made.returncode == 0, f"python -m venv failed:\n{tail(made)}"
    python = str(root / "bin" / "python")
    # The README's "Installing into your own environment": the provider with Airflow, then pyspark
    # again over the Spark provider's pyspark-client.
    steps = [
        ["pip", "install", "--python", python, "-c", str(CONSTRAINTS), f"{dists.wheel}[airflow]"],
        ["pip", "install", "--python", python, "--no-deps", "--reinstall", "-c", str(CONSTRAINTS), "pyspark"],
    ]
    for args in steps:
        result = timing.uv(args, cwd=base, timeout=600)
        assert result.returncode == 0, f"{timing.commands[-1]} failed:\n{tail(result, 40)}"
    (site_packages,) = root.glob("lib/python*/site-packages")
    yield WheelVenv(root, scratch, site_packages, timing)

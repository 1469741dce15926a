"""Airflow fixtures: a migrated SQLite metadata DB and the DAGs of dags/ parsed once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="session")
def airflow_db() -> str:
    home = os.environ["AIRFLOW_HOME"]
    result = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"airflow db migrate failed: {result.stderr[-2000:]}"
    return home


@pytest.fixture(scope="session")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(DAGS))

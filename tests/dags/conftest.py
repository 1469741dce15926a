"""Airflow fixtures: the DAGs of dags/ parsed once (the migrated metadata DB is in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="session")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(str(DAGS))

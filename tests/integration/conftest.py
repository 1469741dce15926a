"""Integration fixtures: the output of a test, on a local disk or on the S3-protocol server."""

from __future__ import annotations

import pytest

from tests.integration.helpers import Output, TableOutput
from tests.support.schema_registry_fixture import schema_registry  # noqa: F401 - the embedded schema registry
from tests.support.store_emulators import azurite, gcs_emulator  # noqa: F401 - the GCS and Azure emulators' fixtures


@pytest.fixture(params=["local", "s3"])
def output(request: pytest.FixtureRequest, tmp_path) -> Output:
    """Each protocol test runs twice: output on a local disk, and on the S3 server (moto, or $AWS_ENDPOINT_URL)."""
    # Names with a space and non-ASCII characters: what users' paths and keys contain.
    if request.param == "local":
        return Output(str(tmp_path / "lake dir ü"))
    new_s3_output = request.getfixturevalue("new_s3_output")
    return Output(new_s3_output(f"lake dir ü {request.node.name[:30]}"), request.getfixturevalue("s3_storage_options"))


@pytest.fixture
def local_output(tmp_path) -> Output:
    return Output(str(tmp_path / "lake"))


@pytest.fixture(params=["parquet", "delta", "iceberg"])
def any_output(request: pytest.FixtureRequest, tmp_path) -> Output:
    """Each test runs in every output format, on a local disk: the Parquet layout, a Delta table,
    an Iceberg table in a SQL catalog."""
    if request.param == "parquet":
        return Output(str(tmp_path / "lake"))
    if request.param == "delta":
        return TableOutput(str(tmp_path / "table"))
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    return TableOutput("", format="iceberg", table="lake.events", catalog=catalog)

"""The GCS and Azure Blob emulators as plain processes on 127.0.0.1, for the gs:// and abfs:// tests.

* GCS: ``gcp-storage-emulator`` (PyPI, the test extra), in memory, with one bucket. gcsfs reaches
  it with ``endpoint_url`` and ``token="anon"``. It serves the JSON API only: delta-rs
  (object_store) lists with the XML API (``GET /<bucket>?list-type=2``), which it answers 501.
* Azure: Azurite's blob service (npm, installed into ``.tools/azurite`` by ``make azurite``),
  with one container. adlfs reaches it with a connection string holding the well-known
  ``devstoreaccount1`` key; delta-rs with that account and key plus ``azure_storage_endpoint``.

Each server listens on a free port, logs to a file in the test session's temporary folder, is
waited for until it serves what the tests need (a deadline, then one line naming the emulator
and its log) and is stopped (SIGTERM, then SIGKILL) at the end of the session. The fixtures are
made available to tests/integration by its conftest.py.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kafka_batch_provider.dev.local_servers import HOST, LocalServer, port_open
from kafka_batch_provider.errors import StorageError

ROOT = Path(__file__).resolve().parents[2]

#: gcsfs (2026.x) by default asks the Storage Control API over gRPC what kind each bucket is,
#: before its first write or open, and retries for 60 s when that fails: the emulator serves no
#: gRPC, so every such call would wait a minute. Read by gcsfs when it is imported, so set here,
#: when the test session loads this module (before any test opens a gs:// location).
GCSFS_GRPC_SWITCH = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"
os.environ.setdefault(GCSFS_GRPC_SWITCH, "false")

AZURITE_VERSION = "3.37.0"  # as scripts/azurite/package.json pins it
AZURITE_DIR = ROOT / ".tools" / "azurite"
AZURITE_BLOB = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ACCOUNT = "devstoreaccount1"
#: Azurite's well-known account key (the same in every Azurite, and in delta-rs' object_store).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

START_TIMEOUT = 60.0


def http_status(url: str, method: str = "GET") -> int | None:
    """The HTTP status of a request to ``url`` (never through a proxy), ``None`` when nothing answers."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, method=method), timeout=2.0) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@dataclass
class GcsEmulator(LocalServer):
    """gcp-storage-emulator in memory, with bucket :attr:`bucket` once :meth:`start` returns."""

    bucket: str = "lake"

    label: ClassVar[str] = "GCS emulator (gcp-storage-emulator)"

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "start",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--in-memory",
            "--default-bucket",
            self.bucket,
        ]

    def wait_until_ready(self, timeout: float) -> None:
        url = f"{self.endpoint_url}/storage/v1/b/{self.bucket}"
        waiting = f"did not serve bucket {self.bucket} (log: {self.log_path})"
        self.poll_until(lambda: http_status(url) == 200, timeout, StorageError, waiting)

    def storage_options(self) -> dict[str, Any]:
        """gcsfs options (the product's ``--storage-options-file`` content)."""
        return {"endpoint_url": self.endpoint_url, "token": "anon"}

    def new_output(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}-{uuid.uuid4().hex[:8]}"


@dataclass
class Azurite(LocalServer):
    """Azurite's blob service, with container :attr:`container` once :meth:`start` returns.

    :param data_dir: where Azurite keeps its blobs and metadata.
    """

    data_dir: Path | None = None
    container: str = "lake"

    label: ClassVar[str] = f"Azurite {AZURITE_VERSION} (Azure Blob emulator)"

    @property
    def blob_endpoint(self) -> str:
        return f"http://{HOST}:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def command(self) -> list[str]:
        assert self.data_dir is not None, "Azurite needs a data_dir"
        return [
            str(AZURITE_BLOB),
            "--blobHost",
            HOST,
            "--blobPort",
            str(self.port),
            "--location",
            str(self.data_dir),
            "--skipApiVersionCheck",  # the Python SDK may be newer than this Azurite
            "--loose",
            "--disableTelemetry",  # no reports to Microsoft from a test (with them, SIGTERM took > 10 s here)
        ]

    def container_ready(self) -> bool:
        """Listening, and the container exists (created here on the first answer)."""
        from azure.core.exceptions import HttpResponseError, ResourceExistsError, ServiceRequestError
        from azure.storage.blob import BlobServiceClient

        if not port_open(self.port):
            return False
        client = BlobServiceClient.from_connection_string(self.connection_string, retry_total=0)
        try:
            client.create_container(self.container)
        except ResourceExistsError:
            pass
        except ServiceRequestError:  # not answering yet
            return False
        except HttpResponseError as exc:  # answering, and refusing: waiting changes nothing
            reason = str(exc).splitlines()[0]
            raise StorageError(
                f"{self.label} refused to create container {self.container}: {reason} (log: {self.log_path})"
            ) from None
        return True

    def wait_until_ready(self, timeout: float) -> None:
        waiting = f"did not serve container {self.container} (log: {self.log_path})"
        self.poll_until(self.container_ready, timeout, StorageError, waiting)

    def storage_options(self) -> dict[str, Any]:
        """adlfs options: the connection string (delta-rs takes account, key and endpoint from it too)."""
        return {"connection_string": self.connection_string}

    def new_output(self, name: str) -> str:
        return f"abfs://{self.container}/{name}-{uuid.uuid4().hex[:8]}"


def installed_azurite() -> str:
    """The installed Azurite's version; one line saying how to install it when it is missing."""
    manifest = AZURITE_DIR / "node_modules" / "azurite" / "package.json"
    if not AZURITE_BLOB.exists() or not manifest.exists():
        raise StorageError(
            f"Azurite is not installed at {AZURITE_DIR}: run `make azurite` "
            f"(npm install --prefix .tools/azurite azurite@{AZURITE_VERSION})"
        )
    return str(json.loads(manifest.read_text())["version"])


def require_plain_gcsfs() -> None:
    """One line unless gcsfs was imported without its gRPC bucket-type probe (see GCSFS_GRPC_SWITCH)."""
    import gcsfs
    import gcsfs.core

    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
        raise StorageError(
            f"gcsfs was imported with {GCSFS_GRPC_SWITCH}={os.environ.get(GCSFS_GRPC_SWITCH)!r}: its gRPC "
            f"bucket-type probe waits 60 s per call against the GCS emulator; run with {GCSFS_GRPC_SWITCH}=false"
        )


def serve(server: LocalServer) -> Iterator[LocalServer]:
    server.start(timeout=START_TIMEOUT)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    require_plain_gcsfs()
    base = Path(tmp_path_factory.mktemp("gcs-emulator"))
    yield from serve(GcsEmulator(log_path=base / "gcs-emulator.log"))


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    version = installed_azurite()
    if version != AZURITE_VERSION:
        raise StorageError(f"expected Azurite {AZURITE_VERSION} in {AZURITE_DIR}, found {version}: run `make azurite`")
    base = Path(tmp_path_factory.mktemp("azurite"))
    yield from serve(Azurite(log_path=base / "azurite.log", data_dir=base / "data"))

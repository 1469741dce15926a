"""An embedded S3-protocol server for the demo and the tests.

It runs moto's S3 backend (:mod:`kafka_batch_provider.dev.s3_server`) as a plain process
on 127.0.0.1 (memory storage: stopping it drops every bucket). Conditional writes
(``If-None-Match: *``) are atomic as on S3, which the offset log relies on. Any real S3 or
MinIO can replace it: set ``AWS_ENDPOINT_URL`` and the ``AWS_*`` credentials.

Clients need no special settings: s3fs, botocore and pyarrow's own S3 filesystem work with
their default request/response checksums (no ``AWS_REQUEST_CHECKSUM_CALCULATION``).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from kafka_batch_provider.dev.local_servers import HOST, Detached, LocalServer, runs
from kafka_batch_provider.errors import StorageError

DEFAULT_PORT = 9000
DEFAULT_BUCKET = "lake"
SERVER_MODULE = "kafka_batch_provider.dev.s3_server"
#: Fixed test credentials: moto accepts any, these make the intent obvious in logs and configs.
ACCESS_KEY = "kafka-batch"
SECRET_KEY = "kafka-batch-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Endpoint:
    """An S3-protocol server and how to sign requests to it.

    :param bucket: the bucket the tests write into.
    :param token: a session token, for temporary credentials.
    """

    endpoint_url: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = REGION
    bucket: str = DEFAULT_BUCKET
    token: str | None = field(default=None, repr=False)

    def storage_options(self) -> dict:
        """Options for ``s3fs.S3FileSystem(**options)`` (and any fsspec ``storage_options``)."""
        options: dict = {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": self.region},
        }
        if self.token:
            options["token"] = self.token
        return options

    def env(self) -> dict[str, str]:
        """The variables a user would export so that AWS SDKs, s3fs and the CLI find this server."""
        variables = {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }
        if self.token:
            variables["AWS_SESSION_TOKEN"] = self.token
        return variables

    @classmethod
    def from_env(cls, environ: Mapping[str, str], bucket: str = DEFAULT_BUCKET) -> S3Endpoint | None:
        """The server ``AWS_ENDPOINT_URL`` and ``AWS_ACCESS_KEY_ID`` point to, if both are set."""
        endpoint_url = environ.get("AWS_ENDPOINT_URL")
        access_key = environ.get("AWS_ACCESS_KEY_ID")
        if not (endpoint_url and access_key):
            return None
        return cls(
            endpoint_url=endpoint_url,
            access_key=access_key,
            secret_key=environ.get("AWS_SECRET_ACCESS_KEY", ""),
            region=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or REGION,
            bucket=bucket,
            token=environ.get("AWS_SESSION_TOKEN") or None,
        )


def buckets_ready(endpoint_url: str, buckets: Sequence[str]) -> bool:
    """True when a ``HEAD /<bucket>`` (or ``GET /``, ListBuckets, without buckets) succeeds."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never via a proxy
    paths = [f"/{urllib.parse.quote(bucket)}" for bucket in buckets] or ["/"]
    for path in paths:
        request = urllib.request.Request(endpoint_url + path, method="HEAD" if buckets else "GET")
        try:
            with opener.open(request, timeout=1.0) as response:
                if response.status != 200:
                    return False
        except (OSError, urllib.error.URLError):
            return False
    return True


@dataclass
class EmbeddedS3(LocalServer):
    """A moto S3 process on 127.0.0.1 (memory storage).

    Use as a context manager, or ``start()`` / ``stop()``. With ``detach=True`` the process
    outlives this Python process (the ``kafka-batch s3 start`` command).

    :param port: port to listen on; ``0`` picks a free one.
    :param log_path: file for the server's output (default: discarded).
    :param buckets: buckets that exist once ``start()`` returns; the first is :attr:`bucket`.
    :param check_access_key: refuse requests signed with another access key id than
        :data:`ACCESS_KEY` (HTTP 403 InvalidAccessKeyId, as S3 answers), to test bad credentials.
    """

    buckets: tuple[str, ...] = (DEFAULT_BUCKET,)
    check_access_key: bool = False

    label: ClassVar[str] = "embedded S3 server"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.buckets = tuple(self.buckets)

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def access_key(self) -> str:
        return ACCESS_KEY

    @property
    def secret_key(self) -> str:
        return SECRET_KEY

    @property
    def region(self) -> str:
        return REGION

    @property
    def bucket(self) -> str:
        return self.buckets[0] if self.buckets else DEFAULT_BUCKET

    @property
    def endpoint(self) -> S3Endpoint:
        return S3Endpoint(self.endpoint_url, self.access_key, self.secret_key, self.region, self.bucket)

    def storage_options(self) -> dict:
        return self.endpoint.storage_options()

    def env(self) -> dict[str, str]:
        return self.endpoint.env()

    def command(self) -> list[str]:
        command = [sys.executable, "-m", SERVER_MODULE, "--port", str(self.port)]
        for bucket in self.buckets:
            command += ["--bucket", bucket]
        if self.check_access_key:
            command += ["--access-key", ACCESS_KEY]
        return command

    def wait_until_ready(self, timeout: float) -> None:
        """Ready means its buckets answer an S3 request, not just an open port."""
        self.poll_until(lambda: buckets_ready(self.endpoint_url, self.buckets), timeout, StorageError, "did not answer")


def is_s3_server(pid: int) -> bool:
    """Guard against a recycled pid: only ever signal a process that runs this server."""
    return runs(pid, SERVER_MODULE)


# -- the detached server of the command line ------------------------------------------------

DETACHED = Detached("s3", EmbeddedS3.label, marker=SERVER_MODULE, address="endpoint_url")


def start_detached(port: int = DEFAULT_PORT, buckets: Sequence[str] = (DEFAULT_BUCKET,), timeout: float = 30.0) -> dict:
    """Start a server that keeps running after this process exits; remember it in a state file."""
    return DETACHED.start(
        lambda log: EmbeddedS3(port=port, log_path=log, detach=True, buckets=tuple(buckets)).start(timeout),
        lambda server: {
            "endpoint_url": server.endpoint_url,
            "buckets": list(server.buckets),
            "env": server.env(),  # fixed test credentials, not secrets
        },
    )


def status() -> dict:
    return DETACHED.status()


def stop_detached(timeout: float = 10.0) -> dict:
    return DETACHED.stop(timeout)

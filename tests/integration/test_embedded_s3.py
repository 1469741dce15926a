"""The embedded S3 server (moto in a process): what the offset log and the Parquet writers need of S3."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import s3fs

from kafka_batch_provider.dev import s3 as embedded
from kafka_batch_provider.dev.local_servers import HOST, free_port, pid_alive
from kafka_batch_provider.dev.s3 import EmbeddedS3, S3Endpoint, buckets_ready, is_s3_server
from kafka_batch_provider.errors import ConfigError, StorageError

pytestmark = pytest.mark.integration

ROUNDS = 20
THREADS = 16
PROCESSES = 4
CHECKSUM_VARIABLES = ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION")


def filesystem(storage_options: dict) -> s3fs.S3FileSystem:
    """A filesystem of its own: no instance shared with another test, thread or writer."""
    return s3fs.S3FileSystem(skip_instance_cache=True, **storage_options)


def warm(fs: s3fs.S3FileSystem, path: str) -> None:
    """Create the client and its connection now, so that the writers start the race together."""
    fs.call_s3("head_bucket", Bucket=fs.split_path(path)[0])


def payload(writer: int, path: str) -> bytes:
    return json.dumps({"writer": writer, "path": path}).encode()


def create(fs: s3fs.S3FileSystem, path: str, data: bytes, barrier: threading.Barrier) -> str:
    """``ok`` if this writer created ``path``, ``exists`` if it got FileExistsError, else the error."""
    barrier.wait(timeout=60)
    try:
        fs.pipe_file(path, data, mode="create")
        return "ok"
    except FileExistsError:
        return "exists"
    except Exception as exc:  # noqa: BLE001 - reported by the test as "found"
        return repr(exc)


def assert_one_winner(fs: s3fs.S3FileSystem, path: str, outcomes: dict[int, str]) -> None:
    winners = [writer for writer, outcome in outcomes.items() if outcome == "ok"]
    others = {writer: outcome for writer, outcome in outcomes.items() if outcome != "ok"}
    assert len(winners) == 1, f"{path}: expected exactly 1 writer to create it, found {len(winners)}: {outcomes}"
    assert set(others.values()) <= {"exists"}, f"{path}: expected FileExistsError for the others, found {others}"
    stored = fs.cat_file(path)
    assert stored == payload(winners[0], path), (
        f"{path}: expected the winner's bytes {payload(winners[0], path)!r}, found {stored!r}"
    )


def race_threads(storage_options: dict, paths: list[str], writers: int) -> dict[str, dict[int, str]]:
    """Each path: ``writers`` threads, each with its own filesystem, create it at the same moment."""
    filesystems = [filesystem(storage_options) for _ in range(writers)]
    for fs in filesystems:
        warm(fs, paths[0])
    results = {}
    with ThreadPoolExecutor(max_workers=writers) as pool:
        for path in paths:
            barrier = threading.Barrier(writers)
            futures = {
                writer: pool.submit(create, fs, path, payload(writer, path), barrier)
                for writer, fs in enumerate(filesystems)
            }
            results[path] = {writer: future.result(timeout=120) for writer, future in futures.items()}
    return results


def process_writer(writer: int, storage_options: dict, paths: list[str], barrier, results) -> None:
    """One writer process (spawned): creates each path when all writers are at the barrier."""
    fs = filesystem(storage_options)
    warm(fs, paths[0])
    for path in paths:
        results.put((path, writer, create(fs, path, payload(writer, path), barrier)))


# -- Parquet through s3fs -------------------------------------------------------------------


def test_pyarrow_writes_and_reads_parquet_through_s3fs_without_checksum_settings(
    s3_storage_options, new_s3_output, monkeypatch
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in CHECKSUM_VARIABLES:  # prove the SDK defaults (checksums on) work against the server
        monkeypatch.delenv(name, raising=False)
    fs = filesystem(s3_storage_options)
    base = new_s3_output()
    table = pa.table(
        {
            "offset": pa.array(range(10_000), pa.int64()),
            "key": [f"k-{i % 97}" for i in range(10_000)],
            "value": [os.urandom(16) for _ in range(10_000)],
        }
    )
    small, large = f"{base}/part-0.parquet", f"{base}/part-1.parquet"
    with fs.open(small, "wb") as f:
        pq.write_table(table, f)
    # > 2 blocks of 5 MiB: a multipart upload (UploadPart checksums, CompleteMultipartUpload).
    big = pa.table({"blob": [os.urandom(1 << 20) for _ in range(12)]})
    with fs.open(large, "wb", block_size=5 * 2**20) as f:
        pq.write_table(big, f, compression="none")

    reader = filesystem(s3_storage_options)
    for path, expected in ((small, table), (large, big)):
        found = pq.read_table(reader._strip_protocol(path), filesystem=reader)
        assert found.equals(expected), (
            f"{path}: expected {expected.num_rows} rows {expected.schema}, found {found.num_rows} rows {found.schema}"
        )
    assert reader.info(large)["size"] > 12 << 20, f"expected > 12 MiB at {large}, found {reader.info(large)}"


# -- conditional create ---------------------------------------------------------------------


def test_conditional_create_is_atomic_across_threads(s3_storage_options, new_s3_output):
    base = new_s3_output()
    paths = [f"{base}/log/{n:020d}.json" for n in range(ROUNDS)]
    results = race_threads(s3_storage_options, paths, THREADS)
    fs = filesystem(s3_storage_options)
    for path in paths:
        assert_one_winner(fs, path, results[path])


def test_conditional_create_is_atomic_across_processes(s3_storage_options, new_s3_output):
    base = new_s3_output()
    paths = [f"{base}/log/{n:020d}.json" for n in range(ROUNDS)]
    context = multiprocessing.get_context("spawn")  # no fork of s3fs' event-loop thread
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    workers = [
        context.Process(target=process_writer, args=(writer, s3_storage_options, paths, barrier, results))
        for writer in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes: dict[str, dict[int, str]] = {path: {} for path in paths}
    try:
        for _ in range(PROCESSES * ROUNDS):
            path, writer, outcome = results.get(timeout=120)
            outcomes[path][writer] = outcome
    except queue.Empty:
        pytest.fail(f"expected {PROCESSES * ROUNDS} outcomes from {PROCESSES} writer processes, found {outcomes}")
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES, (
        f"expected every writer process to exit 0, found {[worker.exitcode for worker in workers]}"
    )
    fs = filesystem(s3_storage_options)
    for path in paths:
        assert_one_winner(fs, path, outcomes[path])


# moto's put_object, slowed down between checking If-None-Match and storing the object: every
# concurrent writer passes the check unless the server's middleware serialises them.
SLOW_SERVER = """
import sys, time
from moto.s3.models import S3Backend
from kafka_batch_provider.dev import s3_server as server

put_object = S3Backend.put_object

def slow_put_object(self, *args, **kwargs):
    time.sleep(1.0)
    return put_object(self, *args, **kwargs)

S3Backend.put_object = slow_put_object
server.serve(int(sys.argv[1]), ["lake"], serialise_conditional=sys.argv[2] == "serialised")
"""


@pytest.mark.parametrize("mode", ["serialised", "unserialised"])
def test_the_middleware_is_what_makes_conditional_create_atomic(mode, tmp_path):
    port = free_port()
    log_path = tmp_path / "slow-s3.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", SLOW_SERVER, str(port), mode], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        server = S3Endpoint(f"http://{HOST}:{port}", "kafka-batch", "kafka-batch-secret", bucket="lake")
        for _ in range(150):
            if buckets_ready(server.endpoint_url, ["lake"]) or process.poll() is not None:
                break
            threading.Event().wait(0.2)
        assert buckets_ready(server.endpoint_url, ["lake"]), f"expected a ready server, found: {log_path.read_text()}"
        path = "s3://lake/slow/00000000000000000000.json"
        outcomes = race_threads(server.storage_options(), [path], 4)[path]
        fs = filesystem(server.storage_options())
        if mode == "serialised":
            assert_one_winner(fs, path, outcomes)
        else:  # moto alone: check-then-set, so several writers "create" the same object
            winners = [writer for writer, outcome in outcomes.items() if outcome == "ok"]
            assert len(winners) >= 2, (
                f"expected moto without the middleware to let >= 2 writers win, found {outcomes} "
                "(if moto's conditional PUT became atomic, the middleware may no longer be needed)"
            )
    finally:
        process.terminate()
        process.wait(10)


# -- keys -----------------------------------------------------------------------------------


def test_keys_with_spaces_plus_and_non_ascii_round_trip(s3_storage_options, new_s3_output):
    base = new_s3_output("dir with space/über")
    assert " " in base and "über" in base, f"expected the given name in the URI, found {base!r}"
    files = {
        f"{base}/ß.json": b'{"n": 1}',
        f"{base}/a+b c%20d.json": b'{"n": 2}',
        f"{base}/日本/é è.txt": b"three",
    }
    writer = filesystem(s3_storage_options)
    for path, data in files.items():
        writer.pipe_file(path, data)

    reader = filesystem(s3_storage_options)  # nothing cached from the writes
    for path, data in files.items():
        found = reader.cat_file(path)
        assert found == data, f"{path}: expected {data!r}, found {found!r}"
    prefix = reader._strip_protocol(base)
    expected = sorted(reader._strip_protocol(path) for path in files)
    found_files = sorted(reader.find(base))
    assert found_files == expected, f"expected keys {expected}, found {found_files}"
    listed = sorted(reader.ls(base, detail=False))
    expected_top = sorted([f"{prefix}/ß.json", f"{prefix}/a+b c%20d.json", f"{prefix}/日本"])
    assert listed == expected_top, f"expected ls {expected_top}, found {listed}"
    bucket, key_prefix, _ = reader.split_path(base)
    raw = reader.call_s3("list_objects_v2", Bucket=bucket, Prefix=key_prefix + "/")
    keys = sorted(item["Key"] for item in raw.get("Contents", []))
    expected_keys = sorted(reader.split_path(path)[1] for path in files)
    assert keys == expected_keys, f"expected the stored keys {expected_keys}, found {keys}"


def test_new_s3_output_is_fresh_each_call(s3_server, new_s3_output):
    first, second = new_s3_output(), new_s3_output()
    prefix = f"s3://{s3_server.bucket}/new_s3_output_is_fresh_each_call-"
    assert first != second, f"expected two different URIs, found {first!r} twice"
    assert first.startswith(prefix) and second.startswith(prefix), f"expected {prefix}..., found {first}, {second}"


# -- the server's environment, as a user exports it -----------------------------------------


def test_env_is_enough_for_a_client_in_another_process(s3_server, new_s3_output):
    path = new_s3_output() + "/from-env.json"
    code = (
        "import sys, s3fs\n"
        "fs = s3fs.S3FileSystem()\n"
        "fs.pipe_file(sys.argv[1], b'from env', mode='create')\n"
        "print(fs.cat_file(sys.argv[1]).decode())\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") or k == "AWS_CA_BUNDLE"}
    result = subprocess.run(
        [sys.executable, "-c", code, path],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **s3_server.env()},
    )
    assert result.returncode == 0, (
        f"expected exit 0 with env() {s3_server.env()}, found {result.returncode}: {result.stderr}"
    )
    assert result.stdout.strip() == "from env", f"expected 'from env', found {result.stdout!r}"


def test_an_external_server_is_taken_from_the_aws_variables():
    assert S3Endpoint.from_env({"AWS_ENDPOINT_URL": "http://minio:9000"}) is None, "expected None without a key"
    found = S3Endpoint.from_env(
        {
            "AWS_ENDPOINT_URL": "http://minio:9000",
            "AWS_ACCESS_KEY_ID": "minio",
            "AWS_SECRET_ACCESS_KEY": "minio-secret",
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_SESSION_TOKEN": "token",
        },
        bucket="tests",
    )
    expected = {
        "key": "minio",
        "secret": "minio-secret",
        "client_kwargs": {"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"},
        "token": "token",
    }
    assert found is not None and found.bucket == "tests", f"expected bucket 'tests', found {found}"
    assert found.storage_options() == expected, f"expected {expected}, found {found.storage_options()}"
    assert found.env()["AWS_REGION"] == "eu-west-1", f"expected region eu-west-1, found {found.env()}"


# -- start / stop / status ------------------------------------------------------------------


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "state"
    monkeypatch.setenv("KAFKA_BATCH_STATE_DIR", str(directory))
    return directory


def assert_one_line(exc: pytest.ExceptionInfo, expected: str) -> None:
    text = str(exc.value)
    assert "\n" not in text, f"expected a one-line error, found {text!r}"
    assert expected in text, f"expected {expected!r} in the error, found {text!r}"


def test_detached_start_status_stop(state_dir):
    port = free_port()
    assert embedded.status() == {"running": False}, f"expected nothing running, found {embedded.status()}"
    started = embedded.start_detached(port=port, buckets=("lake", "other"))
    pid = started["pid"]
    try:
        expected_url = f"http://{HOST}:{port}"
        assert started["running"] and started["endpoint_url"] == expected_url, f"expected {expected_url}: {started}"
        assert (state_dir / "s3.json").exists(), f"expected a state file in {state_dir}"
        assert Path(started["log"]) == state_dir / "s3.log", f"expected the log in {state_dir}, found {started}"
        found = embedded.status()
        assert found["running"] and found["pid"] == pid, f"expected pid {pid} running, found {found}"
        assert is_s3_server(pid), f"expected pid {pid} to run the S3 server module"
        assert not is_s3_server(os.getpid()), "expected this pytest process not to pass for the S3 server"

        server = S3Endpoint(started["endpoint_url"], embedded.ACCESS_KEY, embedded.SECRET_KEY)
        buckets = sorted(filesystem(server.storage_options()).ls(""))
        assert buckets == ["lake", "other"], f"expected buckets ['lake', 'other'], found {buckets}"
        assert started["env"]["AWS_ENDPOINT_URL"] == expected_url, f"expected env to point at it: {started['env']}"

        with pytest.raises(ConfigError) as again:
            embedded.start_detached(port=free_port())
        assert_one_line(again, f"already running at {expected_url} (pid {pid})")
    finally:
        stopped = embedded.stop_detached()
    assert stopped == {"running": False, "stopped": True, "pid": pid, "port": port}, f"found {stopped}"
    assert not pid_alive(pid), f"expected pid {pid} gone after stop"
    assert not (state_dir / "s3.json").exists(), "expected the state file removed"
    assert embedded.status() == {"running": False}, f"expected nothing running, found {embedded.status()}"
    second = embedded.stop_detached()
    assert second == {"running": False, "stopped": False}, f"expected a no-op second stop, found {second}"


def test_start_refuses_a_port_in_use_with_one_line(state_dir):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as refused:
            EmbeddedS3(port=port).start()
        assert_one_line(refused, f"port {port} on {HOST} is already in use")
        with pytest.raises(ConfigError) as refused_detached:
            embedded.start_detached(port=port)
        assert_one_line(refused_detached, f"port {port} on {HOST} is already in use")
    assert not (state_dir / "s3.json").exists(), "expected no state file after a refused start"


def test_a_server_that_cannot_start_fails_fast_with_one_line(tmp_path):
    log_path = tmp_path / "s3.log"
    server = EmbeddedS3(log_path=log_path, buckets=("ab",))  # S3 bucket names have 3 to 63 characters
    with pytest.raises(StorageError) as failed:
        server.start(timeout=60)
    assert_one_line(failed, "exited with code 2 at start")
    assert server.pid is None, f"expected the failed server reaped, found pid {server.pid}"
    log = log_path.read_text()
    assert "error: cannot create bucket 'ab'" in log, f"expected the reason in the log, found {log!r}"


def test_context_manager_stops_and_reaps_the_process(tmp_path):
    with EmbeddedS3(log_path=tmp_path / "s3.log", buckets=("lake",)) as server:
        pid = server.pid
        assert buckets_ready(server.endpoint_url, ["lake"]), f"expected bucket lake at {server.endpoint_url}"
        options = server.storage_options()
        assert options["client_kwargs"] == {"endpoint_url": server.endpoint_url, "region_name": "us-east-1"}, options
    assert server.pid is None and not pid_alive(pid), f"expected pid {pid} stopped"
    assert not os.path.exists(f"/proc/{pid}"), f"expected pid {pid} reaped, found it in /proc"
    log = (tmp_path / "s3.log").read_text()
    assert log.splitlines() == [f"S3 (moto) on {server.endpoint_url}, buckets: lake"], (
        f"expected one start-up line and no request lines, found {log!r}"
    )


def test_a_file_another_writer_created_after_a_listing_is_found_and_read(s3_storage_options, new_s3_output):
    from kafka_batch_provider.output.location import Location

    output = new_s3_output()
    reader = Location(output, dict(s3_storage_options))
    assert reader.create_exclusive("_log/00000000000000000001.json", b'{"seq": 1}')
    assert reader.list_names("_log") == ["00000000000000000001.json"]  # s3fs caches this listing
    # Another process (here: another filesystem instance, as a Spark Connect driver's store) writes.
    writer = Location(output, {**s3_storage_options, "skip_instance_cache": True})
    assert writer.create_exclusive("_log/00000000000000000002.json", b'{"seq": 2}')
    assert reader.exists("_log/00000000000000000002.json"), "the reader trusted its cached listing"
    found = reader.read_bytes("_log/00000000000000000002.json")
    assert found == b'{"seq": 2}', f"expected the other writer's entry, found {found!r}"

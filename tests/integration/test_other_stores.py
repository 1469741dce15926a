"""gs:// and abfs:// outputs against real emulators run as plain processes (tests/support/store_emulators.py).

What each emulator honours decides what is proven on it:

* Azurite (Azure Blob) refuses a second ``If-None-Match: *`` upload (409 BlobAlreadyExists),
  atomically (its check and insert run in one turn of Node's event loop). So the product's
  exclusive create, the offset log raced by two writers, a published Parquet-layout batch, a
  Delta table (delta-rs) raced by two writers, and two end-to-end runs of tests/integration/
  test_output_log.py (real broker and Spark: a deleted group resumes from the output; two full
  runs racing) are proven on it.
* gcp-storage-emulator ignores ``ifGenerationMatch=0``: a second create replaces the object.
  The offset log must then refuse the store before writing anything, in one line; that refusal
  is what is proven on it. (delta-rs cannot reach it at all: object_store lists with the XML
  API, ``GET /<bucket>?list-type=2``, which it answers 501.)

The raw-protocol tests pin each emulator's behaviour: if gcp-storage-emulator starts honouring
``ifGenerationMatch``, its test fails and says so, and the full set can be run on it too.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from kafka_batch_provider.core.manifest import data_dir_name
from kafka_batch_provider.errors import StorageAccessError
from kafka_batch_provider.output.location import Location
from kafka_batch_provider.output.offset_log import LOG_DIR, OffsetLog
from kafka_batch_provider.output.parquet_layout import STAGING, ParquetLayout
from tests.integration import test_output_log as log_tests
from tests.integration import test_tables as tables
from tests.integration.helpers import Output, TableOutput, assert_exactly_once, dataset_keys, one_partition_manifest
from tests.support.store_emulators import Azurite, GcsEmulator

pytestmark = pytest.mark.integration
on_gcs = pytest.mark.xdist_group("gcs-emulator")  # one emulator process, on one xdist worker
on_azurite = pytest.mark.xdist_group("azurite")

ROUNDS = 5


def log_entry(seq: int, writer: int) -> dict[str, Any]:
    """An offset-log entry of a batch without files, naming its writer."""
    return {
        "seq": seq,
        "batch_id": f"b-{seq}-w{writer}",
        "mode": "incremental",
        "ranges": [],
        "offsets": {},
        "files": [],
        "rows": 0,
        "writer": writer,
    }


def race(writers: list[Callable[[], Any]]) -> list[Any]:
    """Run each writer in its own thread, released together; what each returned, or raised."""
    barrier = threading.Barrier(len(writers))
    results: list[Any] = [None] * len(writers)

    def run(index: int) -> None:
        barrier.wait(timeout=60)
        try:
            results[index] = writers[index]()
        except Exception as exc:  # noqa: BLE001 - reported by the test as "found"
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), f"expected every writer to finish within 120 s, found {results}"
    return results


def own_location(uri: str, storage_options: dict[str, Any]) -> Location:
    """A location with a filesystem instance of its own (a writer in another process, as it were)."""
    location = Location(uri, {**storage_options, "skip_instance_cache": True})
    location.exists(LOG_DIR)  # connect now, so that the writers start the race together
    return location


# -- GCS: gcp-storage-emulator ---------------------------------------------------------------


@on_gcs
def test_gcs_emulator_ignores_if_generation_match_0(gcs_emulator: GcsEmulator):
    """The raw protocol: two uploads of one name, each "only if absent" (``ifGenerationMatch=0``)."""
    name = f"raw/{gcs_emulator.new_output('probe').rsplit('/', 1)[1]}.json"
    url = f"{gcs_emulator.endpoint_url}/upload/storage/v1/b/{gcs_emulator.bucket}/o?uploadType=media&name={name}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    statuses = []
    for writer in (1, 2):
        request = urllib.request.Request(url + "&ifGenerationMatch=0", data=b"writer %d" % writer, method="POST")
        request.add_header("Content-Type", "text/plain")
        try:
            with opener.open(request, timeout=10) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
    download = f"{gcs_emulator.endpoint_url}/download/storage/v1/b/{gcs_emulator.bucket}/o/{name}?alt=media"
    with opener.open(download, timeout=10) as response:
        stored = response.read()
    assert statuses == [200, 200] and stored == b"writer 2", (
        f"expected the emulator to accept both creates (it ignores ifGenerationMatch=0) and keep the second, found "
        f"statuses {statuses} and {stored!r}; if it now answers 412, prove the offset log, Parquet and Delta on it "
        "as on Azurite"
    )


def conditional_uploads(emulator: GcsEmulator) -> int:
    """How many uploads with ``ifGenerationMatch=0`` the emulator answered 200 (from its request log)."""
    assert emulator.log_path is not None
    return emulator.log_path.read_text(errors="replace").count('ifGenerationMatch=0 HTTP/1.1" 200')


@on_gcs
def test_gcs_emulator_is_refused_by_the_offset_log_in_one_line(gcs_emulator: GcsEmulator):
    location = Location(gcs_emulator.new_output("lake dir ü"), gcs_emulator.storage_options())
    before = conditional_uploads(gcs_emulator)
    assert location.supports_exclusive_create(LOG_DIR) is False, (
        "expected the probe to find that the GCS emulator accepts a second create, found it refused"
    )
    accepted = conditional_uploads(gcs_emulator) - before
    assert accepted == 2, (
        f"expected gcsfs to send both of the probe's creates with ifGenerationMatch=0 and the emulator to answer "
        f"200 to both, found {accepted} such requests in {gcs_emulator.log_path}"
    )
    with pytest.raises(StorageAccessError) as refused:
        OffsetLog(location).append(log_entry(1, writer=1))
    message = str(refused.value)
    assert "\n" not in message, f"expected a one-line error, found {message!r}"
    expected = f"{location.uri} accepts a second create of the same name"
    assert expected in message and "the offset log could not stop two writers" in message, (
        f"expected {expected!r} (the offset log could not stop two writers), found {message!r}"
    )
    found = location.list_names(LOG_DIR)
    assert found == [], f"expected nothing written to the refused log (not even the probe), found {found}"


# -- Azure: Azurite ----------------------------------------------------------------------------


@on_azurite
def test_azurite_refuses_a_second_if_none_match_upload(azurite: Azurite):
    """The raw protocol (the Azure SDK, headers as sent): Put Blob with ``If-None-Match: *``, twice."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    blob = BlobServiceClient.from_connection_string(azurite.connection_string).get_blob_client(
        azurite.container, azurite.new_output("raw").split("/", 3)[3] + "/probe.json"
    )
    sent: list[tuple[str | None, int]] = []

    def record(response) -> None:
        sent.append((response.http_request.headers.get("If-None-Match"), response.http_response.status_code))

    outcomes = []
    for writer in (1, 2):
        try:
            blob.upload_blob(b"writer %d" % writer, headers={"If-None-Match": "*"}, raw_response_hook=record)
            outcomes.append("created")
        except ResourceExistsError as exc:
            outcomes.append(exc.error_code)
    stored = blob.download_blob().readall()
    assert sent == [("*", 201), ("*", 409)] and outcomes == ["created", "BlobAlreadyExists"], (
        f"expected 201 then 409 BlobAlreadyExists for If-None-Match: *, found {sent} {outcomes}"
    )
    assert stored == b"writer 1", f"expected the first writer's bytes kept, found {stored!r}"


@on_azurite
def test_azurite_create_exclusive_once_and_the_probe_accepts_it(azurite: Azurite):
    location = Location(azurite.new_output("lake dir ü"), azurite.storage_options())
    first = location.create_exclusive("_log/00000000000000000001.json", b'{"writer": 1}')
    second = location.create_exclusive("_log/00000000000000000001.json", b'{"writer": 2}')
    assert (first, second) == (True, False), f"expected create -> True, again -> False, found {(first, second)}"
    stored = location.read_bytes("_log/00000000000000000001.json")
    assert stored == b'{"writer": 1}', f"expected the first create's bytes, found {stored!r}"
    assert location.supports_exclusive_create(LOG_DIR) is True, "expected the probe to accept Azurite, found refused"
    found = location.list_names(LOG_DIR)
    assert found == ["00000000000000000001.json"], f"expected the probe to leave nothing behind, found {found}"


@on_azurite
def test_azurite_offset_log_raced_by_two_writers_takes_exactly_one_per_entry(azurite: Azurite):
    uri, options = azurite.new_output("lake dir ü"), azurite.storage_options()
    writers = [own_location(uri, options) for _ in range(2)]
    for seq in range(1, ROUNDS + 1):
        entries = [log_entry(seq, writer) for writer in range(len(writers))]
        outcomes = race([lambda loc=loc, e=e: OffsetLog(loc).append(e) for loc, e in zip(writers, entries)])
        assert sorted(outcomes, key=repr) == [False, True], (
            f"entry {seq}: expected exactly one writer to append (True, False), found {outcomes}"
        )
        winner = outcomes.index(True)
        stored = OffsetLog(Location(uri, options)).entry(seq)
        assert stored == log_entry(seq, winner), f"entry {seq}: expected writer {winner}'s entry, found {stored}"
    reader = OffsetLog(Location(uri, {**options, "skip_instance_cache": True}))
    assert reader.seqs() == list(range(1, ROUNDS + 1)), f"expected entries 1..{ROUNDS}, found {reader.seqs()}"
    assert reader.tail_seq() == ROUNDS, f"expected the tail at {ROUNDS}, found {reader.tail_seq()}"


def staged_batch(location: Location, layout: ParquetLayout, batch_id: str, rows: int) -> dict[str, Any]:
    """A batch as the Spark tasks leave it: one Parquet file in a fresh staging folder, and the
    log entry the write step appends for it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    staging = layout.staging_folder(batch_id)
    table = pa.table(
        {
            "topic": pa.array(["t"] * rows),
            "partition": pa.array([0] * rows, pa.int32()),
            "offset": pa.array(range(rows), pa.int64()),
            "value": pa.array([b"v%d" % i for i in range(rows)]),
        }
    )
    with location.write_stream(f"{staging}/part-0.parquet") as f:
        pq.write_table(table, f)
    size = location.file_sizes(staging)["part-0.parquet"]
    return one_partition_manifest(batch_id, rows, data_dir_name(batch_id), staging, size)


@on_azurite
def test_azurite_parquet_batch_is_published_once_by_two_publishers(azurite: Azurite):
    output = Output(azurite.new_output("lake dir ü"), azurite.storage_options())
    layout = ParquetLayout(output.location)
    entry = staged_batch(output.location, layout, "b-1", rows=7)
    assert layout.append(entry) is True, "expected the batch's log entry appended"
    assert dataset_keys(output) == {}, f"expected staged files invisible to readers, found {dataset_keys(output)}"

    # The writer publishing while a plan step rolls the same entry forward: both must succeed.
    publishers = [ParquetLayout(own_location(output.uri, output.storage_options)) for _ in range(2)]
    outcomes = race([lambda p=p: p.publish(entry) for p in publishers])
    assert outcomes == [None, None], f"expected both publishers to succeed, found {outcomes}"

    layout.check_published(entry)
    assert layout.is_published(entry), f"expected {entry['files']} in {data_dir_name('b-1')}"
    assert_exactly_once(output, {("t", 0, offset) for offset in range(7)})
    left = output.location.files_below(STAGING)
    assert left == {}, f"expected the staging folder removed after publishing, found {sorted(left)}"
    layout.publish(entry)  # once more: nothing to do
    assert_exactly_once(output, {("t", 0, offset) for offset in range(7)})


@on_azurite
def test_azurite_delta_table_raced_by_two_writers_commits_exactly_one_batch(azurite: Azurite):
    output = TableOutput(azurite.new_output("delta"), azurite.storage_options())
    # Two plan steps planned different batches for entry 1; both staged their files.
    attempts = [tables.staged_attempt(output, f"b-{w}", f"a00{w}", rows) for w, rows in ((1, 5), (2, 8))]
    stores = [output.store() for _ in attempts]
    outcomes = race([lambda s=s, m=m: s.log.append(m) for s, m in zip(stores, attempts)])
    assert sorted(outcomes, key=repr) == [False, True], (
        f"expected exactly one batch committed to the Delta table (True, False), found {outcomes}"
    )
    winner = attempts[outcomes.index(True)]
    table = output.store().sink.table()
    assert table is not None and table.version() == 0, f"expected one commit (version 0), found {table}"
    tail = output.store().log.tail()
    assert (tail["seq"], tail["batch_id"]) == (1, winner["batch_id"]), (
        f"expected batch {winner['batch_id']} as entry 1, found {tail['seq']} {tail['batch_id']}"
    )
    found = sorted(output.read(["offset"]).column("offset").to_pylist())
    assert found == list(range(winner["rows"])), (
        f"expected the winner's {winner['rows']} rows in the table, found offsets {found}"
    )
    commits = [name for name in output.location.list_names("_delta_log") if name.endswith(".json")]
    assert commits == [f"{0:020d}.json"], f"expected exactly one Delta commit file, found {commits}"


# -- end to end on Azurite: the embedded broker, Spark local[2], the write and commit steps -----


@pytest.fixture
def azure_output(azurite: Azurite) -> Output:
    return Output(azurite.new_output("lake dir ü"), azurite.storage_options())


@on_azurite
def test_azurite_deleted_group_resumes_from_the_output(spark, kafka_config, new_topic, group_id, azure_output):
    log_tests.test_deleted_group_resumes_from_the_output_without_reading_again(
        spark, kafka_config, new_topic, group_id, azure_output
    )


@on_azurite
def test_azurite_two_full_runs_racing_leave_every_offset_exactly_once(
    spark, kafka_config, new_topic, group_id, azure_output
):
    log_tests.test_two_full_runs_racing_leave_every_offset_exactly_once(
        spark, kafka_config, new_topic, group_id, azure_output
    )

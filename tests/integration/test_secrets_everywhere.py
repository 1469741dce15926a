"""Issue 10 (and 35): a Kafka password and a storage secret reach Spark and nowhere else.

One module-scoped setup runs the shipped ``kafka_batch_ingest`` DAG with dag.test() twice,
with real Apache Kafka over SASL_SSL, real Spark (spark-submit, local[2]) and the real S3 server:

* a parquet batch under one S3 prefix, read by the ``jvm`` reader (Spark's own Kafka source, the
  Java client: the password travels in ``sasl.jaas.config``), and
* a Delta batch (``kafka_batch_format=delta``) under another, read by the ``python`` reader
  (librdkafka), its values Avro (``KAFKA_BATCH_VALUE_FORMAT=avro``) from an embedded schema registry
  that asks for basic auth,

with the password of a SCRAM-SHA-512 user in the Kafka connection (``secure_kafka``: the broker
checks it, and ACLs allow that user READ on the two topics and groups only), the storage secret
as the password of an Airflow ``aws`` connection (the embedded S3 server accepts any secret key,
so a unique marker stands in for it), and the registry's password in a ``schema_registry``
connection (checked by the registry). Meanwhile a thread samples ``/proc/*/cmdline`` every 0.2 s.
Each test then searches one kind of place for the secrets; :func:`find_secret` does the searching
and is itself tested against a planted secret, so these tests can fail.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kafka_batch_provider.dev.schema_registry import EmbeddedSchemaRegistry
from kafka_batch_provider.dev.schema_registry.auth import Credential
from kafka_batch_provider.testing.producers import Record, create_topics, produce, sample_records
from tests.dags.test_dags_end_to_end import metadata_db_text, record_spark_submits, run

# One xdist worker runs the module, so its two-DAG-run setup happens once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("secrets-everywhere")]

# Unique per session, so nothing else on the machine (other test runs, fixed test keys) matches.
KAFKA_SECRET = f"kafka-sasl-password-{uuid.uuid4().hex}"
STORAGE_SECRET = f"s3-secret-key-{uuid.uuid4().hex}"
REGISTRY_SECRET = f"registry-password-{uuid.uuid4().hex}"
SECRETS = {
    "the Kafka sasl.password": KAFKA_SECRET,
    "the S3 secret key": STORAGE_SECRET,
    "the schema registry password": REGISTRY_SECRET,
}

Places = Mapping[str, "str | bytes"]


def find_secret(places: Places, secrets: Mapping[str, str] = SECRETS) -> list[str]:
    """Where any secret occurs: one ``"<secret name> in <place>"`` line per hit, [] when clean."""
    found = []
    for place, content in places.items():
        for name, secret in secrets.items():
            needle = secret.encode() if isinstance(content, bytes) else secret
            if needle in content:
                found.append(f"{name} in {place}")
    return found


def s3_objects(fs, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` on the S3 server, as ``{"S3 object <key>": bytes}``."""
    return {f"S3 object {key}": fs.cat_file(key) for key in fs.find(prefix)}


class ProcessTableSampler:
    """Reads every ``/proc/<pid>/cmdline`` every ``interval`` seconds in a background thread."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.cmdlines: dict[str, bytes] = {}  # "cmdline of pid N (sample k)" -> NUL-separated argv
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="cmdline-sampler", daemon=True)

    def _sample_until_stopped(self) -> None:
        seen: set[tuple[str, bytes]] = set()
        while not self._stop.is_set():
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                except OSError:  # the process ended between listing and reading
                    continue
                if (proc.name, cmdline) not in seen:
                    seen.add((proc.name, cmdline))
                    self.cmdlines[f"/proc/{proc.name}/cmdline (sample {self.samples})"] = cmdline
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> ProcessTableSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


def avro_records(url: str, topic: str, count: int) -> list[Record]:
    """``count`` Avro values in the registry's wire format, registered with the registry's password."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": f"ingest:{REGISTRY_SECRET}"})
    serialize = AvroSerializer(client, json.dumps(ORDER))
    context = SerializationContext(topic, MessageField.VALUE)
    return [Record(0, serialize({"id": n}, context)) for n in range(count)]


@dataclass
class SecretsRun:
    """What the two DAG runs left behind, by kind of place: ``{place description: content}``."""

    states: dict[str, dict[str, str]]
    task_logs: dict[str, str]
    metadata_db: dict[str, str]
    airflow_home: dict[str, bytes]
    parquet_output: dict[str, bytes]
    delta_output: dict[str, bytes]
    spark_submit: dict[str, str]
    process_table: dict[str, bytes]
    process_table_samples: int
    added_env_names: list[list[str]] = field(default_factory=list)
    s3_fs: object = None
    bucket: str = ""


def spark_submit_places(launched: Iterable[tuple[list[str], dict[str, str]]]) -> tuple[dict[str, str], list]:
    """spark-submit's argv and the environment variables the operator ADDED (not the inherited ones)."""
    places: dict[str, str] = {}
    added_names = []
    for n, (argv, env) in enumerate(launched, start=1):
        places[f"the argv of spark-submit #{n}"] = "\0".join(argv)
        added = {k: v for k, v in env.items() if os.environ.get(k) != v}
        added_names.append(sorted(added))
        for name, value in added.items():
            places[f"environment variable {name} added for spark-submit #{n}"] = value
    return places, added_names


@pytest.fixture(scope="module")
def secrets_run(request, airflow_db, secure_kafka, s3_server) -> Iterator[SecretsRun]:
    import s3fs

    capture = request.config.pluginmanager.getplugin("capturemanager")
    if not capture.is_globally_capturing():
        pytest.fail("the task logs are searched in pytest's captured output: run without -s / --capture=no")
    kafka_config = secure_kafka.admin_config  # topics made and records produced as the broker's admin
    suffix = uuid.uuid4().hex[:8]
    parquet_topic, delta_topic = f"secrets-parquet-{suffix}", f"secrets-delta-{suffix}"
    create_topics(kafka_config, {parquet_topic: 1, delta_topic: 1})
    # The DAGs' principal: its password is the secret searched for; READ on its topics and groups only.
    user = f"ingest-{suffix}"
    secure_kafka.add_user(user, KAFKA_SECRET)
    for resource, name in [("topic", parquet_topic), ("topic", delta_topic)] + [
        ("group", f"secrets-{kind}-{suffix}") for kind in ("parquet", "delta")
    ]:
        secure_kafka.allow(user, resource, name, "READ")
    produce(kafka_config, parquet_topic, sample_records(1, 6))
    registry = EmbeddedSchemaRegistry(
        log_path=request.config._tmp_path_factory.mktemp("registry") / "registry.log",
        credentials=(Credential(user="ingest", password=REGISTRY_SECRET),),
    )
    registry.start()
    request.addfinalizer(registry.stop)
    produce(kafka_config, delta_topic, avro_records(registry.url, delta_topic, 4))
    parquet_prefix = f"{s3_server.bucket}/secrets-parquet-{suffix}"
    delta_prefix = f"{s3_server.bucket}/secrets-delta-{suffix}"

    with pytest.MonkeyPatch.context() as env:
        env.setenv(
            "AIRFLOW_CONN_KAFKA_DEFAULT",
            json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": secure_kafka.client_config(user, KAFKA_SECRET),
                }
            ),
        )
        env.setenv(
            "AIRFLOW_CONN_LAKE",
            json.dumps(
                {
                    "conn_type": "aws",
                    "login": s3_server.access_key,
                    "password": STORAGE_SECRET,
                    "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": s3_server.region},
                }
            ),
        )
        env.setenv("KAFKA_BATCH_STORAGE_CONN_ID", "lake")  # read when the DAG file is parsed
        env.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
        env.setenv("KAFKA_BATCH_SENSOR_TIMEOUT_SECONDS", "30")
        env.setenv("KAFKA_BATCH_SENSOR_POKE_SECONDS", "1")
        launched = record_spark_submits(env)
        capture.read_global_capture()  # drop what came before the runs

        states = {}
        with ProcessTableSampler(interval=0.2) as sampler:
            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", parquet_topic)
            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_GROUP", f"secrets-parquet-{suffix}")
            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_OUTPUT", f"s3://{parquet_prefix}")
            env.setenv("KAFKA_BATCH_READER", "jvm")  # read when the DAG file is parsed
            states["parquet"] = run("kafka_batch_ingest")

            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_TOPICS", delta_topic)
            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_GROUP", f"secrets-delta-{suffix}")
            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_FORMAT", "delta")
            registry_connection = {
                "conn_type": "schema_registry",
                "host": registry.url,
                "login": "ingest",
                "password": REGISTRY_SECRET,
            }
            env.setenv("AIRFLOW_CONN_REGISTRY", json.dumps(registry_connection))
            env.setenv("KAFKA_BATCH_VALUE_FORMAT", "avro")  # read when the DAG file is parsed
            env.setenv("KAFKA_BATCH_SCHEMA_REGISTRY_CONN_ID", "registry")
            env.setenv("AIRFLOW_VAR_KAFKA_BATCH_OUTPUT", f"s3://{delta_prefix}")
            env.delenv("KAFKA_BATCH_READER")  # the python reader decodes Avro
            states["delta"] = run("kafka_batch_ingest")

        out, err = capture.read_global_capture()
        submits, added_names = spark_submit_places(launched)  # while the connections are still in os.environ

    fs = s3fs.S3FileSystem(**{**s3_server.storage_options(), "secret": STORAGE_SECRET}, skip_instance_cache=True)
    yield SecretsRun(
        states=states,
        task_logs={"the captured task logs (stdout)": out, "the captured task logs (stderr)": err},
        metadata_db={
            "XCom values in the metadata DB": metadata_db_text("xcom", "value"),
            "rendered task instance fields in the metadata DB": metadata_db_text(
                "rendered_task_instance_fields", "rendered_fields"
            ),
        },
        airflow_home={
            f"file {path} under AIRFLOW_HOME": path.read_bytes()
            for path in Path(os.environ["AIRFLOW_HOME"]).rglob("*")
            if path.is_file()
        },
        parquet_output=s3_objects(fs, parquet_prefix),
        delta_output=s3_objects(fs, delta_prefix),
        spark_submit=submits,
        process_table=sampler.cmdlines,
        process_table_samples=sampler.samples,
        added_env_names=added_names,
        s3_fs=fs,
        bucket=s3_server.bucket,
    )


def test_both_dag_runs_succeeded_so_the_secrets_were_really_used(secrets_run):
    every_task_succeeded = {"success"}
    for output, states in secrets_run.states.items():
        assert set(states.values()) == every_task_succeeded, f"expected the {output} run to succeed, got {states}"
    assert len(secrets_run.added_env_names) == 2, f"expected two spark-submits, saw {secrets_run.added_env_names}"
    for names in secrets_run.added_env_names:
        assert {"KAFKA_BATCH_KAFKA_CONFIG_FILE", "KAFKA_BATCH_STORAGE_OPTIONS_FILE"} <= set(names), (
            f"expected both secrets to travel to Spark in private files named in the environment, got {names}"
        )
    argvs = {place: argv for place, argv in secrets_run.spark_submit.items() if place.startswith("the argv")}
    connector = {place: "spark-sql-kafka-0-10" in argv for place, argv in argvs.items()}
    assert list(connector.values()) == [True, False], (
        f"expected the first run (jvm reader) alone to get Spark's Kafka connector jars, got {connector}"
    )
    assert "KAFKA_BATCH_REGISTRY_SETTINGS_FILE" in secrets_run.added_env_names[1], (
        f"expected the registry's settings in a private file too, got {secrets_run.added_env_names[1]}"
    )


def test_the_delta_run_decoded_its_avro_values_with_the_registrys_password(secrets_run):
    import io

    import pyarrow.parquet as pq

    files = {place: data for place, data in secrets_run.delta_output.items() if place.endswith(".parquet")}
    assert files, "expected the Delta batch's data files:\n" + "\n".join(secrets_run.delta_output)
    for place, data in files.items():
        names = pq.read_schema(io.BytesIO(data)).names
        assert "id" in names and "value" not in names, f"expected the Avro field id as a column in {place}: {names}"


def test_no_secret_in_the_task_logs(secrets_run):
    logs = "".join(secrets_run.task_logs.values())
    assert "spark-submit" in logs, "expected the task logs (with spark-submit's output) to have been captured"
    found = find_secret(secrets_run.task_logs)
    assert not found, f"expected no secret in the task logs, found: {found}"


def test_no_secret_in_xcom_or_rendered_fields(secrets_run):
    found = find_secret(secrets_run.metadata_db)
    assert not found, f"expected no secret in the metadata DB, found: {found}"


def test_no_secret_in_any_file_under_airflow_home_the_whole_metadata_db_and_log_files(secrets_run):
    files = "\n".join(secrets_run.airflow_home)
    assert "airflow.db" in files, f"expected the SQLite metadata DB under AIRFLOW_HOME, found:\n{files}"
    found = find_secret(secrets_run.airflow_home)
    assert not found, f"expected no secret in any file under AIRFLOW_HOME, found: {found}"


def test_no_secret_in_any_object_of_the_parquet_output_plans_log_and_commit_records(secrets_run):
    keys = "\n".join(secrets_run.parquet_output)
    assert "/_plans/" in keys, f"expected plan files under the output's _plans/, objects are:\n{keys}"
    assert ".parquet" in keys, f"expected the batch's parquet files, objects are:\n{keys}"
    assert len(secrets_run.parquet_output) >= 4, f"expected plans, manifest, log and commit record, got:\n{keys}"
    found = find_secret(secrets_run.parquet_output)
    assert not found, f"expected no secret in the parquet output on S3, found: {found}"


def test_no_secret_in_the_delta_table_log_or_any_other_object_of_the_table(secrets_run):
    delta_log = {place: data for place, data in secrets_run.delta_output.items() if "/_delta_log/" in place}
    assert [p for p in delta_log if p.endswith(".json")], (
        "expected _delta_log/*.json commits, the table holds:\n" + "\n".join(secrets_run.delta_output)
    )
    found = find_secret(delta_log)
    assert not found, f"expected no secret in the Delta log, found: {found}"
    found = find_secret(secrets_run.delta_output)
    assert not found, f"expected no secret in the Delta table's objects (plans, log, data), found: {found}"


def test_no_secret_on_the_spark_submit_command_line_or_in_the_environment_it_adds(secrets_run):
    assert [p for p in secrets_run.spark_submit if p.startswith("the argv")], "expected spark-submit argv recorded"
    found = find_secret(secrets_run.spark_submit)
    assert not found, f"expected no secret in spark-submit's argv or added environment, found: {found}"


def test_no_secret_in_the_process_table_while_spark_ran(secrets_run):
    spark_processes = [p for p, cmd in secrets_run.process_table.items() if b"SparkSubmit" in cmd]
    assert spark_processes, (
        f"expected the sampler to have seen Spark's JVM (org.apache.spark.deploy.SparkSubmit) in "
        f"{secrets_run.process_table_samples} samples of {len(secrets_run.process_table)} command lines"
    )
    found = find_secret(secrets_run.process_table)
    assert not found, f"expected no secret in any process's command line, found: {found}"


def test_the_private_files_that_carried_the_secrets_to_spark_are_gone_after_the_run(secrets_run):
    private_files = {
        place: path
        for place, path in secrets_run.spark_submit.items()
        if place.startswith("environment variable KAFKA_BATCH_") and place.split()[2].endswith("_FILE")
    }
    assert len(private_files) >= 4, f"expected the Kafka config and storage options files, got {private_files}"
    left_behind = {place: path for place, path in private_files.items() if Path(path).exists()}
    assert not left_behind, f"expected the secret files removed after spark-submit, still on disk: {left_behind}"


# -- the search itself can fail ----------------------------------------------------------------


def test_find_secret_reports_each_secret_with_its_place_and_nothing_for_clean_text():
    places = {
        "clean text": "nothing here",
        "clean bytes": b"\x00nothing\x00",
        "a log line": f"password={KAFKA_SECRET}",
        "an object": f'{{"secret": "{STORAGE_SECRET}"}}'.encode(),
    }
    assert find_secret(places) == ["the Kafka sasl.password in a log line", "the S3 secret key in an object"]


def test_a_secret_planted_in_a_real_plan_file_on_s3_is_found(secrets_run):
    """Copy a real plan file of the run, plant the Kafka secret in the copy, and search the copy's prefix."""
    fs = secrets_run.s3_fs
    [plan_place, *_] = [p for p in secrets_run.parquet_output if "/_plans/" in p]
    plan = json.loads(secrets_run.parquet_output[plan_place])
    plan["planted"] = {"sasl.password": KAFKA_SECRET}
    planted_prefix = f"{secrets_run.bucket}/planted-{uuid.uuid4().hex[:8]}"
    planted_key = f"{planted_prefix}/_plans/{plan_place.rsplit('/', 1)[1]}"
    fs.pipe_file(planted_key, json.dumps(plan).encode())
    try:
        assert find_secret(s3_objects(fs, planted_prefix)) == [f"the Kafka sasl.password in S3 object {planted_key}"]
    finally:
        fs.rm(planted_prefix, recursive=True)

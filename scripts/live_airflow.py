"""``make airflow``: the live Airflow stack with the project's DAGs, ready to click through.

Starts Apache Kafka itself (a single-node KRaft broker; topic ``orders``, some sample records), the embedded S3 server
(bucket ``lake``), and Airflow's api-server, scheduler, dag-processor and triggerer with
``AIRFLOW_HOME=.airflow-live`` (SQLite, LocalExecutor). The connections ``kafka_default``,
``spark_default`` (``local[*]``) and ``lake`` (``aws``, the S3 server) are created; the ingest
DAG writes to ``s3://lake/orders`` and waits for data in the triggerer. Prints the URL, then
runs until Ctrl-C, which stops everything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "provider"))

from kafka_batch_provider.dev.airflow_live import AirflowStack, AirflowStackError  # noqa: E402
from kafka_batch_provider.dev.kafka import KafkaBroker  # noqa: E402
from kafka_batch_provider.dev.s3 import EmbeddedS3  # noqa: E402
from kafka_batch_provider.testing.producers import create_topics, produce, sample_records  # noqa: E402

TOPIC = "orders"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=ROOT / ".airflow-live", help="AIRFLOW_HOME (wiped at start)")
    parser.add_argument("--schedule", default="*/5 * * * *", help="the ingest DAG's cron schedule")
    args = parser.parse_args()
    shutil.rmtree(args.home, ignore_errors=True)
    args.home.mkdir(parents=True)

    def stop_on_sigterm(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    with ExitStack() as stack:
        try:
            broker = stack.enter_context(KafkaBroker(data_dir=args.home / "kafka", log_path=args.home / "broker.log"))
            s3 = stack.enter_context(EmbeddedS3(log_path=args.home / "s3.log"))
            kafka_config = {"bootstrap.servers": broker.bootstrap_servers}
            create_topics(kafka_config, {TOPIC: 2})
            produce(kafka_config, TOPIC, sample_records(2, 1000))
            env = {
                "KAFKA_BATCH_TOPICS": TOPIC,
                "KAFKA_BATCH_OUTPUT": f"s3://{s3.bucket}/{TOPIC}",
                "KAFKA_BATCH_STORAGE_CONN_ID": "lake",
                "KAFKA_BATCH_SCHEDULE": args.schedule,
                "KAFKA_BATCH_SENSOR_DEFERRABLE": "true",
                "KAFKA_BATCH_SENSOR_POKE_SECONDS": "10",
            }
            print("starting Airflow (api-server, scheduler, dag-processor, triggerer)...", flush=True)
            airflow = stack.enter_context(AirflowStack(home=args.home, dags_folder=ROOT / "dags", env=env))
            airflow.set_connection("kafka_default", "kafka", extra=kafka_config)
            airflow.set_connection("spark_default", "spark", host="local[*]")
            airflow.set_connection(
                "lake",
                "aws",
                login=s3.access_key,
                password=s3.secret_key,
                extra={"endpoint_url": s3.endpoint_url, "region_name": s3.region},
            )
            airflow.wait_for_dags(["kafka_batch_ingest", "kafka_batch_backfill"])
            airflow.set_paused("kafka_batch_backfill", False)  # triggered by hand only
        except (AirflowStackError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(
            f"\nAirflow UI: {airflow.base_url}  (every user is an admin: local use only)\n"
            f"Kafka: {broker.bootstrap_servers} (topic {TOPIC}, 1,000 records)\n"
            f"S3: {s3.endpoint_url} (bucket {s3.bucket}; the ingest DAG writes s3://{s3.bucket}/{TOPIC})\n"
            f"AIRFLOW_HOME={args.home}; service logs in {airflow.log_dir}\n"
            "kafka_batch_ingest is paused: unpause it in the UI. Ctrl-C stops everything.",
            flush=True,
        )
        try:
            while all(p.poll() is None for p in airflow.processes.values()):
                time.sleep(1)
            print("error: an Airflow service exited; see the service logs", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nstopping...", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    sys.exit(main())

"""Bad S3 credentials: refused in one line, at once (no retry can fix them), nothing written.

A private embedded S3 server that, like S3, answers HTTP 403 InvalidAccessKeyId to requests
signed with another access key id (moto alone accepts any).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_batch_provider.dev.s3 import EmbeddedS3
from tests.bad_input.scene import Scene, cli, cli_refusal_problems, one_line_problems

EXPECTED = "access refused"


@pytest.fixture(scope="module")
def strict_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    log_path = Path(tmp_path_factory.mktemp("strict-s3")) / "s3.log"
    with EmbeddedS3(log_path=log_path, check_access_key=True) as server:
        yield server


def bucket_listing(server: EmbeddedS3) -> list[str]:
    import s3fs

    return sorted(s3fs.S3FileSystem(**server.storage_options(), skip_instance_cache=True).find(server.bucket))


def wrong_key(server: EmbeddedS3) -> dict:
    return {**server.storage_options(), "key": "AKIA-NOT-OURS"}


def test_cli_with_a_wrong_access_key_is_one_line_and_writes_nothing(strict_s3, scene: Scene, verdict) -> None:
    options = scene.file("storage.json", json.dumps(wrong_key(strict_s3)))
    before = {"scene": scene.snapshot(), "bucket": bucket_listing(strict_s3)}
    result = cli(
        "run", "--bootstrap-servers", scene.bootstrap_servers, "--topic", scene.topic, "--group", scene.group,
        "--output", f"s3://{strict_s3.bucket}/lake", "--storage-options-file", options,
    )  # fmt: skip
    problems = cli_refusal_problems(result, EXPECTED)
    if not problems and result.returncode != 2:
        problems.append(f"expected exit 2 (a refusal, not an outage to retry), got {result.returncode}")
    verdict.judge(problems, before, {"scene": scene.snapshot(), "bucket": bucket_listing(strict_s3)})


def test_operator_with_a_wrong_access_key_fails_without_retry(strict_s3, scene: Scene, monkeypatch, verdict) -> None:
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowFailException

    from kafka_batch_provider.operators.output import BatchOutput
    from kafka_batch_provider.operators.plan import KafkaReplayPlanOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": scene.bootstrap_servers}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIA-NOT-OURS",
                "password": "x",
                "extra": {"endpoint_url": strict_s3.endpoint_url, "region_name": strict_s3.region},
            }
        ),  # fmt: skip
    )
    with DAG(dag_id="bad_s3", schedule=None):
        task = KafkaReplayPlanOperator(
            task_id="replay", topics=[scene.topic], whole_topic=True,
            output=BatchOutput(output_path=f"s3://{strict_s3.bucket}/replay", storage_conn_id="lake"),
        )  # fmt: skip
    before = {"scene": scene.snapshot(), "bucket": bucket_listing(strict_s3)}
    try:
        task.execute({})
        problems = ["expected the task to fail with the wrong access key, it succeeded"]
    except AirflowFailException as exc:
        problems = one_line_problems(str(exc), EXPECTED)
    except Exception as exc:  # noqa: BLE001 - another type would be retried
        problems = [f"expected AirflowFailException (no retry), got {type(exc).__name__}: {exc}"]
    verdict.judge(problems, before, {"scene": scene.snapshot(), "bucket": bucket_listing(strict_s3)})

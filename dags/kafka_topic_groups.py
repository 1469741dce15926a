"""
### Topic groups: an Airflow DAG per group of topics, a table per topic (`kafka_batch_topics_<name>`)

Reads the topic groups file named by `KAFKA_BATCH_TOPIC_GROUPS` (JSON, or YAML for `.yaml`/`.yml`;
default: `topic_groups.json` beside this file) and makes one DAG per group
(`kafka_batch_provider.dag_factory`): the group's `topic_pattern` (or `topics`), resolved at every
run so a new topic is in the next run; each topic into its own table (`{topic}` in the output's
path or table), all of them in one Spark job; one asset event per committed table. Five tasks per
DAG whatever the number of topics. `${VAR}` in the file is the environment's value.
"""

from __future__ import annotations

import os
from pathlib import Path

from kafka_batch_provider.dag_factory import dags_from_file
from kafka_batch_provider.task_group import kafka_batch_ingest_group

groups_file = os.environ.get("KAFKA_BATCH_TOPIC_GROUPS") or Path(__file__).with_name("topic_groups.json")
globals().update(dags_from_file(groups_file, kafka_batch_ingest_group))

from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
from kafka_batch_provider.operators.health import KafkaLagHealthOperator
from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator, KafkaReplayPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator

__all__ = [
    "KafkaLagHealthOperator",
    "KafkaOffsetCommitOperator",
    "KafkaOffsetPlanOperator",
    "KafkaReplayPlanOperator",
    "KafkaSparkBatchOperator",
]

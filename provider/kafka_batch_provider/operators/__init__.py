from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
from kafka_batch_provider.operators.health import KafkaLagHealthOperator
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator, KafkaReplayPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator

__all__ = [
    "BatchOutput",
    "KafkaLagHealthOperator",
    "KafkaOffsetCommitOperator",
    "KafkaOffsetPlanOperator",
    "KafkaReplayPlanOperator",
    "KafkaSparkBatchOperator",
]

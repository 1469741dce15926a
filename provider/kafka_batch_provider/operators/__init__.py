from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator, KafkaReplayPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator

__all__ = [
    "KafkaOffsetCommitOperator",
    "KafkaOffsetPlanOperator",
    "KafkaReplayPlanOperator",
    "KafkaSparkBatchOperator",
]

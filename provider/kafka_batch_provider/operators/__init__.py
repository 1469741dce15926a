from kafka_batch_provider.operators.commit import KafkaOffsetCommitOperator
from kafka_batch_provider.operators.health import KafkaLagHealthOperator
from kafka_batch_provider.operators.output import BatchOutput
from kafka_batch_provider.operators.plan import KafkaOffsetPlanOperator, KafkaReplayPlanOperator
from kafka_batch_provider.operators.spark import KafkaSparkBatchOperator
from kafka_batch_provider.operators.upkeep import KafkaBatchUpkeepOperator

__all__ = [
    "BatchOutput",
    "KafkaBatchUpkeepOperator",
    "KafkaLagHealthOperator",
    "KafkaOffsetCommitOperator",
    "KafkaOffsetPlanOperator",
    "KafkaReplayPlanOperator",
    "KafkaSparkBatchOperator",
]

"""Delivery tracking of a write task (Spark's ``KafkaRowWriter.checkForErrors``) and the producer's errors.

:class:`DeliveryFailures` is the producer's ``on_delivery`` callback: with
``delivery.report.only.error`` librdkafka reports only the records that failed, so a task
whose ``flush()`` leaves nothing queued and that saw no failure had every record
acknowledged. :func:`error_hint` and :func:`producer_failure` turn librdkafka errors into
:class:`~pyspark_kafka.errors.DeliveryError` messages that name the fix.
"""

from __future__ import annotations

from typing import Mapping

from pyspark_kafka.errors import DeliveryError, authorization_hint


class DeliveryFailures:
    """The producer's ``on_delivery`` callback: counts failed deliveries, keeps a few reasons.

    With ``delivery.report.only.error`` only failed records are reported, so after
    ``flush()`` leaves nothing queued every record without a report was acknowledged
    (and no Python call is made per successful record).
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Forget earlier failures (a pooled producer starts a new task)."""
        self.count = 0
        self.reasons: list[str] = []  # the first few distinct ones, for the error message

    def __call__(self, err, msg) -> None:
        self.count += 1
        reason = (f"topic '{msg.topic()}' partition {msg.partition()}: {err.str()} ({err.name()})"
                  + authorization_hint(err.name(), "WRITE", msg.topic()))
        if len(self.reasons) < 3 and reason not in self.reasons:
            self.reasons.append(reason)


LOST_FATAL_ERROR = ("the Kafka producer failed with a fatal error whose description confluent-kafka lost "
                    "({error}); librdkafka's FATAL log line on the Python worker's stderr names it")
IDEMPOTENT_HINT = ("; with the idempotent producer (kafka.enable.idempotence, on by default) the usual fatal error "
                   "is CLUSTER_AUTHORIZATION_FAILED for its InitProducerId: the principal needs WRITE on the topic "
                   "(which implies IDEMPOTENT_WRITE, KIP-679) or IDEMPOTENT_WRITE on the cluster (kafka-acls)")


def is_idempotent(conf: Mapping[str, object]) -> bool:
    """Whether librdkafka settings ``conf`` (the writer's, which always carry ``enable.idempotence``)
    enable the idempotent producer."""
    return str(conf.get("enable.idempotence", "false")).lower() in ("true", "1")


def error_hint(err) -> str:
    """The fix for a librdkafka error that has an obvious one, else an empty string."""
    from confluent_kafka import KafkaError

    if err.code() == KafkaError._UNSUPPORTED_FEATURE:
        return ("; the brokers do not support the idempotent producer: set "
                "option kafka.enable.idempotence=false (at-least-once still holds)")
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return "; raise kafka.message.max.bytes (and the topic's max.message.bytes) or send smaller values"
    if err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        return ("; the idempotent producer's InitProducerId was denied: the principal needs WRITE on the topic "
                "(which implies IDEMPOTENT_WRITE, KIP-679) or IDEMPOTENT_WRITE on the cluster (kafka-acls)")
    return ""


def producer_failure(err) -> DeliveryError:
    """DeliveryError for the fatal producer error ``err`` (a confluent-kafka ``KafkaError``), with its fix."""
    return DeliveryError(f"the Kafka producer failed: {err.str()} ({err.name()})" + error_hint(err))

"""The producer pool of a Python worker (Spark's ``InternalKafkaProducerPool``): idle producers reused by later tasks.

Creating a producer costs a connection, metadata and (idempotent) InitProducerId, tens to
hundreds of ms; Spark reuses Python workers, so a task takes an idle producer with the same
settings (:func:`acquire`) and gives it back when all its records were acknowledged
(:func:`release`); a producer whose task failed is closed instead, its state being unknown.
The pool is :class:`~pyspark_kafka.kafka.clients.ClientPool`, the same as the reader's consumers'.
A transactional producer (``deliveryGuarantee=exactly-once``) belongs to its task's
transaction (:class:`pyspark_kafka.write.transactions.TaskTransaction`), never to this pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pyspark_kafka.kafka.clients import ClientPool, close_quietly, config_key, new_producer
from pyspark_kafka.write.delivery import DeliveryFailures


@dataclass
class PooledProducer:
    """A producer with its pool key (``config_key`` of its settings) and its delivery callback."""

    key: tuple
    producer: object
    failures: DeliveryFailures


MAX_IDLE_PRODUCERS = 4
"""Idle producers kept per Python worker process, for the next tasks with the same settings."""

PRODUCERS = ClientPool(MAX_IDLE_PRODUCERS, lambda pooled: close_quietly(pooled.producer))
"""This process's idle producers (:class:`PooledProducer`), the same pool as the reader's consumers."""


def acquire(conf: Mapping[str, object]) -> PooledProducer:
    """A producer for ``conf`` with no queued records: an idle one of this process, or a new one.

    Creating a producer costs a connection, metadata and (idempotent) InitProducerId, tens
    to hundreds of ms; Spark reuses Python workers, so later tasks and micro-batches reuse
    it, as Spark's own sink caches Java producers per executor.
    """
    key = config_key(conf)
    pooled = PRODUCERS.take(key)
    if pooled is not None:
        pooled.failures.reset()
        return pooled
    failures = DeliveryFailures()
    producer = new_producer({**conf, "delivery.report.only.error": True, "on_delivery": failures})
    return PooledProducer(key, producer, failures)


def release(pooled: PooledProducer) -> None:
    """Return a healthy producer (all its records acknowledged) to the pool; close the oldest beyond the cap."""
    PRODUCERS.put(pooled.key, pooled)


def close_idle_producers() -> None:
    """Close every idle producer of this process (tests, benchmarks, shutdown)."""
    PRODUCERS.close_all()

"""Writer options (Spark's ``KafkaSourceProvider`` write rules): the driver-side :class:`WriteSpec`.

:meth:`WriteSpec.from_options` checks the data source options and the input schema
(:func:`~pyspark_kafka.write.schema.validate_schema`) on the driver, before any record is
sent, and keeps what every write task needs: the producer's librdkafka settings (``kafka.*``
options passed through, with the Java client's defaults :data:`PRODUCER_DEFAULTS`), option
``topic``, option ``partitioner``, the delivery timeout and option ``deliveryGuarantee``
(with ``exactly-once``: option ``transactionalIdPrefix`` and the marker consumer's settings,
:mod:`pyspark_kafka.write.transactions`). Bad options raise
:class:`~pyspark_kafka.errors.OptionError` naming the option and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pyspark.sql.types import StructType

from pyspark_kafka.write import transactions as txn
from pyspark_kafka.kafka.clients import new_consumer, new_producer, producer_config
from pyspark_kafka.errors import OptionError
from pyspark_kafka.kafka.javaconfig import java_partitioner
from pyspark_kafka.options import get_option
from pyspark_kafka.kafka.client_config import kafka_params
from pyspark_kafka.write.routing import load_partitioner
from pyspark_kafka.write.schema import validate_schema

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"

PRODUCER_DEFAULTS = {"acks": "all", "enable.idempotence": "true", "delivery.timeout.ms": "120000"}
"""Producer settings applied unless a ``kafka.*`` option sets them (the Java client's defaults)."""


def parse_delivery_guarantee(options: Mapping[str, str]) -> str:
    """Option ``deliveryGuarantee``: ``at-least-once`` (default) or ``exactly-once`` (any case).

    ``exactly-once`` writes each task's rows in a Kafka transaction (KIP-98) with a replay
    marker (:mod:`pyspark_kafka.write.transactions`). Any other value raises OptionError listing
    the allowed ones.
    """
    raw = get_option(options, "deliveryGuarantee")
    value = AT_LEAST_ONCE if raw is None else raw.strip().lower()
    if value in (AT_LEAST_ONCE, EXACTLY_ONCE):
        return value
    raise OptionError(f"option 'deliveryGuarantee' must be 'at-least-once' or 'exactly-once', got {raw!r}")


def with_producer_defaults(conf: Mapping[str, object]) -> dict:
    """``conf`` plus :data:`PRODUCER_DEFAULTS` for settings it does not set.

    As in the Java client (KIP-679), idempotence is only defaulted on when ``acks`` is
    unset or ``all``/``-1``: an explicit ``acks=1`` quietly means no idempotence.
    ``message.timeout.ms`` (librdkafka's alias) counts as setting ``delivery.timeout.ms``.
    """
    out = dict(conf)
    out.setdefault("acks", PRODUCER_DEFAULTS["acks"])
    if str(out["acks"]).lower() in ("all", "-1"):
        out.setdefault("enable.idempotence", PRODUCER_DEFAULTS["enable.idempotence"])
    if "message.timeout.ms" not in out:
        out.setdefault("delivery.timeout.ms", PRODUCER_DEFAULTS["delivery.timeout.ms"])
    return out


def delivery_timeout_ms(conf: Mapping[str, object]) -> int:
    """``delivery.timeout.ms`` (alias ``message.timeout.ms`` in librdkafka) of a producer config, in ms."""
    raw = conf.get("delivery.timeout.ms", conf.get("message.timeout.ms"))
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise OptionError(f"option 'kafka.delivery.timeout.ms' must be an integer (ms), got {raw!r}") from None


@dataclass(frozen=True)
class WriteSpec:
    """What a write task needs, built and checked on the driver (picklable).

    ``columns``: input column names present; ``topic``: option ``topic`` or None;
    ``producer``: librdkafka settings; ``partitioner``: option ``partitioner`` as given;
    ``timeout_ms``: delivery timeout, also the bound for metadata requests.
    ``guarantee``: ``at-least-once`` or ``exactly-once``; for exactly-once ``prefix`` is
    option ``transactionalIdPrefix`` and ``consumer`` the marker consumer's settings.
    """

    columns: frozenset
    topic: str | None
    producer: dict
    partitioner: str | None
    timeout_ms: int
    guarantee: str = AT_LEAST_ONCE
    prefix: str | None = None
    consumer: dict | None = None

    @property
    def exactly_once(self) -> bool:
        """Whether option ``deliveryGuarantee`` is ``exactly-once``."""
        return self.guarantee == EXACTLY_ONCE

    @classmethod
    def from_options(cls, options: Mapping[str, str], schema: StructType) -> "WriteSpec":
        """Validate options and schema; raise OptionError / SchemaError before any record is sent."""
        guarantee = parse_delivery_guarantee(options)
        topic = get_option(options, "topic")
        columns = validate_schema(schema, topic)
        partitioner = get_option(options, "partitioner")
        java = java_partitioner(kafka_params(options))  # kafka.partitioner.class / kafka.partitioner
        if partitioner is None:
            partitioner = java
        elif java is not None and java != partitioner:
            raise OptionError(f"option 'partitioner' = {partitioner!r} contradicts the Kafka client setting "
                              f"that asks for {java!r}: keep one of them")
        load_partitioner(partitioner)  # fail on the driver, not in every task
        settings = producer_config(options)
        if "bootstrap.servers" not in settings:
            raise OptionError(
                "option 'kafka.bootstrap.servers' is required: "
                ".option('kafka.bootstrap.servers', 'host1:9092,host2:9092')"
            )
        if guarantee == EXACTLY_ONCE:
            return cls._exactly_once(options, settings, columns, topic, partitioner)
        conf = with_producer_defaults(settings)
        timeout_ms = delivery_timeout_ms(conf)
        new_producer(conf).close()  # unknown or malformed kafka.* settings fail here, on the driver
        return cls(columns, topic, conf, partitioner, timeout_ms)

    @classmethod
    def _exactly_once(cls, options, settings, columns, topic, partitioner) -> "WriteSpec":
        prefix = txn.parse_prefix(options)
        conf = txn.transactional_producer_config(settings)
        consumer = txn.marker_consumer_config(settings)
        # unknown or malformed kafka.* settings fail here, on the driver (no connection is made)
        new_producer({**conf, "transactional.id": txn.transactional_id(prefix, "check", 0)}).close()
        new_consumer({**consumer, "group.id": txn.transactional_id(prefix, "check", 0)}).close()
        return cls(columns, topic, conf, partitioner, delivery_timeout_ms(conf), EXACTLY_ONCE, prefix, consumer)

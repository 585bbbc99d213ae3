"""An embedded Kafka-compatible broker written in Python (never imports PySpark).

It speaks Kafka's wire protocol (via kio) so any Kafka client can use it:
:class:`EmbeddedBroker` runs one in a background thread, :func:`pyspark_kafka.broker.server.run_broker`
in the foreground (``pyspark-kafka broker``). See ``docs/broker.md``.
"""

from pyspark_kafka.broker.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]

"""``TopicPartition``: the connector's one name for a ``(topic, partition)`` pair.

A plain tuple ``(topic: str, partition: int)``, hashable and usable as a dict key (offset maps
such as ``{(topic, partition): offset}``), as in Spark's offset JSON. Not confluent-kafka's
``TopicPartition`` class, which the client calls take. Imports nothing, so any module (the
sinks, the offset rules, the reader) can use it without an import cycle.
"""

TopicPartition = tuple[str, int]

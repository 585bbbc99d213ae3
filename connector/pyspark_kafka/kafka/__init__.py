"""The Kafka client and wire layer both sides share.

The Spark side (the data source: ``source``, ``read/``, ``write/``, ``sinks/``, ``groups``) and the
embedded broker (``broker/``) build on these modules; they import nothing of the package but one another
and :mod:`pyspark_kafka.errors` (``tests/connector/test_import_graph.py``):

- the record format and its codecs: :mod:`~pyspark_kafka.kafka.record_format` (RecordBatch v2 layout,
  varints), :mod:`~pyspark_kafka.kafka.record_codecs` (gzip, snappy, lz4, zstd),
  :mod:`~pyspark_kafka.kafka.wire_header` (the request and response header rule);
- our clients: :mod:`~pyspark_kafka.kafka.clients` (confluent-kafka clients and their pool),
  :mod:`~pyspark_kafka.kafka.fetch_client` (raw Fetch requests for the columnar reader),
  :mod:`~pyspark_kafka.kafka.reachability` (the first contact with a cluster),
  :mod:`~pyspark_kafka.kafka.librdkafka_log`;
- client configuration: :mod:`~pyspark_kafka.kafka.client_config` (the ``kafka.*`` options, secrets
  redacted), :mod:`~pyspark_kafka.kafka.javaconfig` (Java client names to librdkafka's),
  :mod:`~pyspark_kafka.kafka.keystores` and :mod:`~pyspark_kafka.kafka.pkcs12` (key stores);
- small helpers: :mod:`~pyspark_kafka.kafka.topic_partition`, :mod:`~pyspark_kafka.kafka.fsutil`
  (durable file writes), :mod:`~pyspark_kafka.kafka.sockets`.

This file imports nothing, so a broker that imports one of them loads no Spark-side code.
"""

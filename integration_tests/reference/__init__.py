"""Differential suite: pykafka against Spark's own Kafka connector (see test_reference_batch.py)."""

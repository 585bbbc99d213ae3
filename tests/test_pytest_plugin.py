"""The pytest plugin for users' suites (``pyspark_kafka.testing.pytest_plugin``), run as a user
would: a separate ``pytest`` process on a small test folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONNECTOR = str(Path(__file__).resolve().parents[1] / "connector")

USER_TESTS = '''
from confluent_kafka import Consumer, Producer, TopicPartition


def test_round_trip(kafka_cluster, kafka_bootstrap_servers, kafka_topic):
    assert kafka_cluster.name == "embedded" and kafka_cluster.bootstrap == kafka_bootstrap_servers
    topic = kafka_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap_servers})
    for i in range(4):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap_servers, "group.id": "g"})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    consumer.close()
    assert ends == [2, 2] and kafka_topic() != topic
'''


def _run_user_suite(tmp_path, *args, env=None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["pyspark_kafka.testing.pytest_plugin"]\n')
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    env = {**os.environ, "PYTHONPATH": CONNECTOR, **(env or {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_users_suite_gets_an_embedded_broker_and_topics(tmp_path):
    result = _run_user_suite(tmp_path)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr


def test_an_unknown_backend_is_a_usage_error(tmp_path):
    result = _run_user_suite(tmp_path, env={"PYSPARK_KAFKA_BACKEND": "kafka-9"})
    assert result.returncode != 0
    assert "PYSPARK_KAFKA_BACKEND='kafka-9' is not one of embedded, apache-kafka" in result.stdout + result.stderr


def test_the_env_backend_without_the_variable_is_skipped_with_the_reason(tmp_path):
    result = _run_user_suite(tmp_path, "--kafka-backend", "env", env={"KAFKA_BOOTSTRAP_SERVERS": ""})
    assert result.returncode == 0 and "1 skipped" in result.stdout, result.stdout + result.stderr
    assert "env: KAFKA_BOOTSTRAP_SERVERS is not set" in result.stdout


def test_apache_kafka_without_maven_is_skipped_with_the_reason(tmp_path):
    java = shutil.which("java")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if java:
        (bin_dir / "java").symlink_to(java)
    env = {"PATH": f"{bin_dir}", "PYSPARK_KAFKA_CACHE": str(tmp_path / "empty-cache")}
    result = _run_user_suite(tmp_path, "--kafka-backend", "apache-kafka", env=env)
    assert result.returncode == 0 and "1 skipped" in result.stdout, result.stdout + result.stderr
    reason = "mvn is not on PATH" if java else "java is not on PATH"
    assert f"apache-kafka: Apache Kafka" in result.stdout and reason in result.stdout

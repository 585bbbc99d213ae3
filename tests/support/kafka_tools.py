"""Apache Kafka 4's command-line tools for tests: the classpath of the cached jars, skipping the test when
they cannot be had (``pyspark_kafka.testing.maven``; docs/testing.md, "Apache Kafka from Maven Central")."""

from __future__ import annotations

import pytest

from pyspark_kafka.testing import maven


def kafka4_classpath(why: str = "the tools' main classes here are Kafka 4's") -> str:
    """``java -cp`` string of Apache Kafka's libs (tools included), resolved into the Maven cache.

    Calls ``pytest.skip`` (naming ``why`` or Maven's error) when ``KAFKA_VERSION`` is older than 4 or the
    jars cannot be resolved."""
    version = maven.kafka_version()
    if int(version.split(".")[0]) < 4:
        pytest.skip(f"{why}; KAFKA_VERSION={version}")
    try:
        return maven.kafka_classpath(version)
    except maven.MavenUnavailable as e:
        pytest.skip(f"Apache Kafka {version} from Maven Central unavailable: {e}")

"""Spark's own Delta and Iceberg readers, as a reference for the tables ``pykafka-delta`` and
``pykafka-iceberg`` write.

Delta Lake's Spark connector (``io.delta:delta-spark_2.13``) and Iceberg's Spark runtime
(``org.apache.iceberg:iceberg-spark-runtime-<spark minor>_2.13``) are published per Spark minor
version; Maven Central serves them for Spark 4.1 (Delta 4.1.0, Iceberg 1.11.0) but not for the
installed pyspark 4.3 (checked 2026-11-28). :func:`table_reader_spark` resolves both jar sets
(:func:`~pyspark_kafka.testing.maven.resolve`, into the Maven cache) and a pyspark
:data:`PYSPARK_VERSION` interpreter (:func:`~pyspark_kafka.testing.reference.pyspark_python`: a cached
virtual environment with only pyspark downloaded). Callers run their reader job with
:attr:`TableReaders.python` as a separate driver process.

Raises :class:`~pyspark_kafka.testing.maven.MavenUnavailable` (no java/mvn, not served) or
:class:`~pyspark_kafka.testing.reference.ReferenceUnavailable` (PyPI unreachable, broken environment).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark_kafka.testing.maven import require_tools, resolve
from pyspark_kafka.testing.reference import pyspark_python

PYSPARK_VERSION = "4.1.4"
"""The newest pyspark 4.1 patch PyPI serves (``pip index versions pyspark``, 2026-11-28): Spark 4.1
is the newest minor both readers below are published for."""
DELTA_SPARK = "io.delta:delta-spark_2.13:4.1.0"
ICEBERG_SPARK = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0"
READER_JARS = ("delta-spark_2.13-", "delta-storage-", "iceberg-spark-runtime-")
"""The jars ``spark.jars`` gets; the rest Maven lists for delta-spark (Scala, SLF4J, log4j) is in
pyspark's own ``jars/`` already and must not be on the classpath twice."""


@dataclass(frozen=True)
class TableReaders:
    """``python``: an interpreter with pyspark :data:`PYSPARK_VERSION`; ``jars``: for ``spark.jars``
    (downloaded already)."""

    python: str
    jars: tuple[Path, ...]

    @property
    def note(self) -> str:
        """One sentence naming the readers, for test output and reports."""
        return (f"readers: Spark {PYSPARK_VERSION} with {DELTA_SPARK} and {ICEBERG_SPARK} "
                f"(Maven Central serves neither for the installed Spark)")


def table_reader_spark() -> TableReaders:
    """Resolve the reader jars and the pyspark :data:`PYSPARK_VERSION` interpreter (first call: about
    a minute, then cached). Raises MavenUnavailable or ReferenceUnavailable."""
    require_tools("java")
    delta = resolve(f"delta-spark-{DELTA_SPARK.rsplit(':', 1)[1]}", [DELTA_SPARK])
    iceberg = resolve(f"iceberg-spark-runtime-4.1-{ICEBERG_SPARK.rsplit(':', 1)[1]}", [ICEBERG_SPARK])
    jars = tuple(j for j in [*delta, *iceberg] if j.name.startswith(READER_JARS))
    return TableReaders(pyspark_python(PYSPARK_VERSION), jars)

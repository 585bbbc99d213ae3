"""Keep the test session's SparkSession active on the JVM thread that serves the calling Python thread.

Spark resolves a statically registered Python data source of a *streaming write*
(``df.writeStream.format("pykafka").start()``) through ``DataSource.lookupDataSource``, which asks
``SparkSession.getActiveSession``: a JVM thread-local. PySpark's pinned-thread mode (the default) serves
each Python thread with its own JVM thread, and a JVM thread created after the session (a new Python
thread, or a reconnected py4j connection) has no active session: the write then fails with
``DATA_SOURCE_NOT_FOUND ... pykafka`` while reads in the same session work (they ask the session
itself). ``tests/connector/test_spark_session.py`` pins this Spark behaviour; docs/writer.md gives users
the same one-line fix. Found by the flake finder (issue 25): six streaming-write failover tests of one
worker failed at ``start()`` in a whole run under a CPU hog.
"""

from __future__ import annotations

import sys


def pin_active_session() -> None:
    """Make the running SparkSession (if any: pyspark not imported or no session → nothing) the JVM's
    active session for this Python thread (``SparkSession.setActiveSession``). Never starts Spark."""
    module = sys.modules.get("pyspark.sql.session")
    session = getattr(getattr(module, "SparkSession", None), "_instantiatedSession", None)
    if session is None or session._sc._jsc is None:  # no session, or one already stopped
        return
    session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)

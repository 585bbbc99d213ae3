"""Log storage of the embedded broker, after Kafka's design: partitions as directories of segments
(``.log`` + sparse ``.index``/``.timeindex``), record batches stored as produced, retention by time
and size, crash recovery from a recovery-point checkpoint. See ``docs/broker-storage.md``.

Modules: ``record_batch`` (the RecordBatch v2 layout: header parsing, validation, encoding,
record walking), ``records`` (whole batches via kio, for the broker's own records and
transaction markers), ``index``, ``segment``, ``partition_log`` (``PartitionLog``),
``producer_state`` (idempotence, transactions), ``cleaner`` (compaction), ``manager``
(``LogManager``), ``checkpoint``. The tests' batch builder is ``tests/support/batches.py``.
Nothing is imported here. Errors (with their Kafka codes) are in :mod:`pyspark_kafka.broker.errors`.
"""

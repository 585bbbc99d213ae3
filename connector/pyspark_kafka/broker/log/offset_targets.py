"""The special ListOffsets timestamps (Kafka's ``ListOffsetsRequest`` constants), defined once for the broker.

A ListOffsets ``timestamp`` below 0 names a position instead of a time: ``LATEST_TIMESTAMP`` (-1) the high
watermark (the last stable offset for read_committed), ``EARLIEST_TIMESTAMP`` (-2) the log start offset,
``MAX_TIMESTAMP`` (-3, KIP-734) the record with the largest timestamp, ``EARLIEST_LOCAL_TIMESTAMP`` (-4,
KIP-405) the first offset kept locally (the log start offset here: no tiered storage). DeleteRecords uses -1
for "everything below the high watermark" (``DELETE_TO_HIGH_WATERMARK``, Kafka's
``DeleteRecordsRequest.HIGH_WATERMARK``).
"""

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
DELETE_TO_HIGH_WATERMARK = -1

"""A full disk on the session broker (issue 28 item 5): the segment writes of one topic fail with ENOSPC (the
broker's own ``os.pwritev`` answers it for that topic's files only, as a full file system would); the broker answers
KAFKA_STORAGE_ERROR, stores nothing, logs ONE error per episode naming the log directory and its free space, and one
info line once writes succeed again."""

from __future__ import annotations

import datetime
import errno
import logging
import os
import time

from kio.schema.errors import ErrorCode

from pyspark_kafka.broker.log import segment
from support.batches import make_batch
from support.malformed import produce_request
from support.wire import WireClient


def test_a_full_disk_is_logged_once_per_episode_with_path_and_free_space(broker, bootstrap, make_topic, monkeypatch,
                                                                         caplog):
    topic = make_topic(1)
    real_pwritev = os.pwritev
    full = {"on": True}

    def pwritev(fd, buffers, offset):
        if full["on"] and f"/{topic}-0/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(segment.os, "pwritev", pwritev)
    now = int(time.time() * 1000)

    def produce(client) -> int:
        response = client.request(produce_request(topic, make_batch(2, timestamp_ms=now), acks=1))
        return response.responses[0].partition_responses[0].error_code

    with caplog.at_level(logging.INFO, logger="pyspark_kafka.broker.log.segment"), WireClient(bootstrap) as client:
        assert [produce(client) for _ in range(3)] == [ErrorCode.kafka_storage_error] * 3
        errors = [r for r in caplog.records if r.levelno == logging.ERROR and "log directory" in r.getMessage()]
        assert len(errors) == 1, [r.getMessage() for r in errors]  # once per episode
        message = errors[0].getMessage()
        assert str(broker.data_dir) in message and "No space left on device" in message and "bytes free" in message
        assert f"{topic}-0" in message
        full["on"] = False
        assert produce(client) == ErrorCode.none
        assert produce(client) == ErrorCode.none
    again = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "succeed again" in r.getMessage()]
    assert len(again) == 1 and str(broker.data_dir) in again[0] and "bytes free" in again[0]

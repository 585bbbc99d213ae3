"""EmbeddedBroker life cycle: start/stop, restart on the same data, clear startup errors."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.errors import ConfigError

DEADLINE_S = 20.0


def test_temporary_data_dir_is_removed_and_data_survives_a_restart(tmp_path):
    with EmbeddedBroker() as temp:
        temp_dir = temp.data_dir
        assert temp_dir.is_dir() and temp.port > 0
        assert temp.bootstrap_servers == f"127.0.0.1:{temp.port}"
    assert not temp_dir.exists()

    data_dir = tmp_path / "kept"
    broker = EmbeddedBroker(data_dir=data_dir).start()
    try:
        p = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
        try:
            for i in range(5):
                p.produce("kept", value=b"%d" % i, partition=0)
            assert p.flush(DEADLINE_S) == 0
        finally:
            p.close()
    finally:
        broker.stop()
    assert data_dir.is_dir()

    with EmbeddedBroker(data_dir=data_dir) as again:  # a new port, the same logs
        c = Consumer({"bootstrap.servers": again.bootstrap_servers, "group.id": "kept"})
        try:
            assert c.get_watermark_offsets(TopicPartition("kept", 0), timeout=DEADLINE_S) == (0, 5)
        finally:
            c.close()


def test_unknown_config_fails_start_naming_the_key():
    broker = EmbeddedBroker(config={"no.such.setting": "1"})
    with pytest.raises(ConfigError, match="no.such.setting"):
        broker.start()
    assert not broker.data_dir.exists()  # its temporary directory is cleaned up


def test_port_in_use_fails_start():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError):
            EmbeddedBroker(port=s.getsockname()[1]).start()


def test_a_blocked_event_loop_is_reported_with_the_broker_thread_stack(monkeypatch, caplog):
    """The watchdog logs an error naming where the broker thread is when its event loop runs
    nothing for STALL_REPORT_S, and again once it runs (CI once saw a broker stop answering)."""
    import asyncio
    import threading

    from pyspark_kafka.broker import embedded

    monkeypatch.setattr(embedded, "STALL_REPORT_S", 0.5)
    monkeypatch.setattr(embedded, "STALL_CHECK_S", 0.1)
    release = threading.Event()

    async def blocking_handler_for_the_test() -> None:
        release.wait(DEADLINE_S)  # blocks the loop until the report is seen

    with caplog.at_level("ERROR", logger=embedded.__name__), EmbeddedBroker() as broker:
        asyncio.run_coroutine_threadsafe(blocking_handler_for_the_test(), broker._loop)
        deadline = threading.Event()
        for _ in range(int(DEADLINE_S / 0.1)):
            if any("has not run" in r.getMessage() for r in caplog.records):
                break
            deadline.wait(0.1)
        release.set()
        for _ in range(int(DEADLINE_S / 0.1)):
            if any("runs again" in r.getMessage() for r in caplog.records):
                break
            deadline.wait(0.1)
    stalled = [r.getMessage() for r in caplog.records if "has not run" in r.getMessage()]
    assert stalled and "blocking_handler_for_the_test" in stalled[0]
    assert any("runs again" in r.getMessage() for r in caplog.records)

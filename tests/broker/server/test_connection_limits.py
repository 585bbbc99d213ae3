"""Bounded resources per connection and in total, with Kafka's config names.

``max.connections``, ``max.connections.per.ip`` (+ overrides), ``connections.max.idle.ms``,
``queued.max.request.bytes``: over a limit the broker closes the offending connection and goes
on serving everyone else; slow and idle clients cannot starve the others.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.connections import parse_overrides
from pyspark_kafka.broker.errors import ConfigError
from support.client_records import RECORDS, as_tuples, consume, expected, produce

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, -1)
DEADLINE_S = 15.0


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=DEADLINE_S)


def _answers(sock: socket.socket) -> bool:
    """Send ApiVersions v0; True when a response comes back, False when the broker closed the socket."""
    try:
        sock.sendall(API_VERSIONS_V0)
        head = sock.recv(4)
    except (ConnectionResetError, BrokenPipeError):
        return False
    return len(head) == 4


def _closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _round_trip(bootstrap: str, topic: str) -> None:
    from support.topics import create_topic

    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, RECORDS[:5])
    assert as_tuples(consume(bootstrap, topic, 5)) == expected(RECORDS[:5])


@pytest.mark.parametrize("config", [
    {"max.connections.per.ip": "4"},
    {"max.connections": "4"},
    {"max.connections.per.ip": "1000", "max.connections.per.ip.overrides": "127.0.0.1:4"},
], ids=["per-ip", "total", "per-ip-override"])
def test_connections_over_the_limit_are_closed_and_slots_come_back(config):
    with EmbeddedBroker(config=config) as b:
        held = [_connect(b.bootstrap_servers) for _ in range(4)]
        try:
            assert all(_answers(s) for s in held)
            extra = _connect(b.bootstrap_servers)
            assert _closed_by_broker(extra)
            extra.close()
            held.pop().close()
            deadline = time.monotonic() + DEADLINE_S
            while True:  # the broker notices the close asynchronously
                again = _connect(b.bootstrap_servers)
                if _answers(again):
                    break
                again.close()
                assert time.monotonic() < deadline, "a freed connection slot was never reused"
            held.append(again)
        finally:
            for s in held:
                s.close()


def test_idle_connections_are_closed_and_busy_ones_are_not():
    with EmbeddedBroker(config={"connections.max.idle.ms": "700"}) as b:
        idle, busy = _connect(b.bootstrap_servers), _connect(b.bootstrap_servers)
        try:
            started = time.monotonic()
            for _ in range(8):  # ~1.6 s of requests every 0.2 s: never idle for 0.7 s
                assert _answers(busy)
                busy.recv(1 << 16)
                time.sleep(0.2)
            assert time.monotonic() - started > 1.4
            assert _closed_by_broker(idle)
        finally:
            idle.close()
            busy.close()


def test_a_stalled_half_sent_request_is_closed_after_the_idle_time():
    with EmbeddedBroker(config={"connections.max.idle.ms": "700"}) as b:
        sock = _connect(b.bootstrap_servers)
        try:
            sock.sendall(struct.pack(">i", 5000) + b"\x00\x03")  # 2 of 5000 bytes, then nothing
            assert _closed_by_broker(sock)
        finally:
            sock.close()


def test_slow_and_idle_clients_do_not_starve_others():
    """A client sending one byte every 50 ms, and 300 idle sockets, while another produces and fetches."""
    with EmbeddedBroker(config={"queued.max.request.bytes": "200000"}) as b:
        idle = [_connect(b.bootstrap_servers) for _ in range(300)]
        slow = _connect(b.bootstrap_servers)
        stop = threading.Event()

        def trickle():
            try:
                slow.sendall(struct.pack(">i", 150_000))  # a frame the client never finishes
                while not stop.is_set():
                    slow.sendall(b"\x00")
                    stop.wait(0.05)
            except OSError:
                pass

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            _round_trip(b.bootstrap_servers, "not-starved")
            # a 300 KB request: bigger than the whole request memory, still served (alone)
            produce(b.bootstrap_servers, "not-starved", [(b"k", b"x" * 300_000, [], 1)] * 1)
        finally:
            stop.set()
            t.join(DEADLINE_S)
            slow.close()
            for s in idle:
                s.close()


def test_overrides_are_parsed_and_bad_ones_refused():
    assert parse_overrides("127.0.0.1:5, host-b:0") == {"127.0.0.1": 5, "host-b": 0}
    assert parse_overrides("") == {}
    with pytest.raises(ConfigError, match="'nocount' is not 'host:count'"):
        parse_overrides("nocount")


def test_request_memory_holds_new_frames_at_the_limit_and_lets_started_ones_finish():
    import asyncio

    from pyspark_kafka.broker.connections import RequestMemory

    async def scenario() -> list[str]:
        memory = RequestMemory(100)
        events = []
        memory.add(80)  # a frame being read
        memory.add(40)  # ... goes on past the limit: it never waits for itself

        async def new_frame():
            await memory.wait_for_room()
            events.append("new frame started")

        waiter = asyncio.ensure_future(new_frame())
        await asyncio.sleep(0)
        events.append("still waiting" if not waiter.done() else "did not wait")
        await memory.release(120)
        await asyncio.wait_for(waiter, 5)
        return events

    assert asyncio.run(scenario()) == ["still waiting", "new frame started"]


def test_big_requests_held_half_sent_do_not_starve_a_small_request(caplog):
    """Issue 28 item 3: three connections each hold 1.5 MiB of a 2 MiB request, exhausting a 3 MiB
    ``queued.max.request.bytes``; a fresh connection's ApiVersions is still answered (small frames never wait
    for request memory), and the held requests still complete once their clients send the rest."""
    with EmbeddedBroker(config={"queued.max.request.bytes": str(3 << 20)}) as b:
        big = [_connect(b.bootstrap_servers) for _ in range(3)]
        fresh = _connect(b.bootstrap_servers)
        fresh.settimeout(5.0)  # a bounded wait: before the fix no answer ever came while the three held memory
        body = struct.pack(">hhih", 18, 0, 1, -1) + b"\x00" * ((2 << 20) - 10)  # ApiVersions v0 + ignored bytes
        try:
            for sock in big:
                sock.sendall(struct.pack(">i", len(body)) + body[:3 << 19])  # 1.5 MiB of 2 MiB, then hold
            deadline = time.monotonic() + DEADLINE_S
            while b.broker.request_memory.used < 3 << 20 and time.monotonic() < deadline:
                time.sleep(0.01)  # bounded poll: the broker has reserved the held requests' chunks
            assert b.broker.request_memory.used >= 3 << 20
            assert _answers(fresh)
            for sock in big:
                sock.sendall(body[3 << 19:])
            for sock in big:
                assert len(sock.recv(4)) == 4  # each held request is answered once complete
        finally:
            for sock in big + [fresh]:
                sock.close()


def test_an_oversized_frame_before_sasl_authentication_closes_the_connection(caplog):
    """Kafka's ``sasl.server.max.receive.size`` (524288 bytes, Kafka's SaslServerAuthenticator): before
    authentication a SASL listener reads no frame larger than that; it closes the connection with a log line."""
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
              "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'user_alice="alice-pw";'}
    with caplog.at_level("WARNING", logger="pyspark_kafka.broker"), EmbeddedBroker(config=config) as b:
        port = b.broker.security.listeners[0].port
        sock = _connect(f"127.0.0.1:{port}")
        try:
            sock.sendall(struct.pack(">i", 524289) + struct.pack(">hhih", 17, 1, 1, -1))
            assert _closed_by_broker(sock)
        finally:
            sock.close()
        ok = _connect(f"127.0.0.1:{port}")  # a frame at the bound is read (an ApiVersions answered)
        try:
            assert _answers(ok)
        finally:
            ok.close()
    assert "request size 524289 is outside 8..524288" in caplog.text
    assert "sasl.server.max.receive.size, before SASL authentication" in caplog.text

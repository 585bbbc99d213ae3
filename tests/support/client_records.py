"""Known records produced and consumed with confluent-kafka (partition 0): ``RECORDS`` (keys, values,
headers, CreateTime timestamps, a tombstone), ``produce``, ``consume``, and ``as_tuples`` / ``expected``
to compare what came back with what was sent."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

DEADLINE_S = 30.0
BASE_TS = 1_700_000_000_000

RECORDS = [
    (b"key-0", b"value-0", [("h1", b"a")], BASE_TS),
    (None, b"unkeyed", [], BASE_TS + 1),
    (b"key-2", b"", [("dup", b"x"), ("dup", b"y"), ("empty", b"")], BASE_TS + 2),
    (b"key-3", None, [], BASE_TS + 3),  # tombstone
] + [(b"k%d" % i, b"v%d" % i * 10, [("i", str(i).encode())], BASE_TS + i) for i in range(4, 200)]


def produce(bootstrap: str, topic: str, records, **conf) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    errors = []
    for key, value, headers, ts in records:
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(DEADLINE_S) == 0
    assert errors == []


def consume(bootstrap: str, topic: str, count: int, **conf) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", **conf})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        for _ in range(int(DEADLINE_S * 10)):
            if len(out) >= count:
                break
            for msg in c.consume(num_messages=count - len(out), timeout=0.1):
                assert msg.error() is None, msg.error()
                out.append(msg)
        return out
    finally:
        c.close()


def as_tuples(msgs) -> list:
    return [(m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()[1]) for m in msgs]


def expected(records) -> list:
    return [(i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]

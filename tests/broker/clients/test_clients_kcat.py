"""kcat (the librdkafka command line client) against the embedded broker."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from support.client_records import RECORDS, as_tuples, consume, expected, produce

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat; CI installs it)")
TIMEOUT_S = 60


def kcat(bootstrap: str, *args: str, stdin: str | bytes | None = None) -> str:
    text = not isinstance(stdin, bytes)
    r = subprocess.run([KCAT, "-b", bootstrap, *args], input=stdin, capture_output=True, text=text,
                       timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    return r.stdout if text else r.stdout.decode()


def kcat_consume(bootstrap: str, topic: str, *extra: str) -> list[dict]:
    out = kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q", *extra)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_then_confluent_and_kcat_consume(bootstrap, make_topic, codec):
    topic = make_topic(partitions=1)
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(50))
    kcat(bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":", "-H", "source=kcat", "-z", codec, stdin=lines)

    got = consume(bootstrap, topic, 50)
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (i, b"key-%d" % i, b"value-%d" % i, [("source", b"kcat")]) for i in range(50)
    ]
    seen = kcat_consume(bootstrap, topic)
    assert [(m["offset"], m["key"], m["payload"], m["headers"]) for m in seen] == [
        (i, f"key-{i}", f"value-{i}", ["source", "kcat"]) for i in range(50)
    ]


def test_kcat_reads_confluent_records_with_headers_and_timestamps(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    records = [r for r in RECORDS[4:40]]  # non-null keys and values: kcat's JSON shows them as text
    produce(bootstrap, topic, records, **{"compression.codec": "lz4"})
    seen = kcat_consume(bootstrap, topic)
    assert [(m["offset"], m["key"].encode(), m["payload"].encode(), m["ts"]) for m in seen] == [
        (i, k, v, ts) for i, (k, v, h, ts) in enumerate(records)
    ]
    assert seen[0]["headers"] == ["i", "4"]
    assert as_tuples(consume(bootstrap, topic, len(records))) == expected(records)


def test_kcat_offset_by_timestamp(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    produce(bootstrap, topic, RECORDS[4:14], **{"linger.ms": 0})
    ts = RECORDS[9][3]  # the 6th record produced
    seen = kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-o", f"s@{ts}", "-e", "-J", "-q")
    first = json.loads(seen.splitlines()[0])
    assert (first["offset"], first["ts"]) == (5, ts)


def test_kcat_metadata_and_one_megabyte_record(bootstrap, make_topic):
    topic = make_topic(partitions=2, config={"max.message.bytes": str(3 * 1024 * 1024)})
    meta = json.loads(kcat(bootstrap, "-L", "-J", "-t", topic))
    assert [p["partition"] for p in meta["topics"][0]["partitions"]] == [0, 1]
    assert meta["brokers"][0]["name"] == bootstrap

    big = "x" * (1024 * 1024)
    kcat(bootstrap, "-P", "-t", topic, "-p", "0", "-X", f"message.max.bytes={3 * 1024 * 1024}", stdin=big + "\n")
    seen = kcat_consume(bootstrap, topic)
    assert len(seen) == 1 and seen[0]["payload"] == big

"""The ``pyspark-kafka`` console script, run as a subprocess against the embedded broker.

Every result the CLI reports is checked with an independent client (confluent-kafka's
AdminClient / Consumer), and every record the CLI sends is read back by one.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from pyspark_kafka.cli import UsageError, format_record, parse_properties, split_record

CLI_TIMEOUT_S = 60


def cli(*args: str, input: bytes | None = None, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``python -m pyspark_kafka ARGS``; killed after ``timeout`` seconds."""
    return subprocess.run([sys.executable, "-m", "pyspark_kafka", *args], input=input, capture_output=True,
                          timeout=timeout)


def tool(command: list[str], bootstrap: str, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return cli(*command, "--bootstrap-server", bootstrap, *args, input=input)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, deadline_s: float = 30) -> list:
    """All records of ``topic`` read by an independent confluent-kafka Consumer (bounded wait)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-cli-check", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        end = time.monotonic() + deadline_s
        while len(out) < expected and time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append(msg)
        return out
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-cli-check"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- pure helpers ---------------------------------------------------------------------------

@pytest.mark.parametrize("line, sep, expected", [
    (b"v", None, (None, b"v")),
    (b"k:v", b":", (b"k", b"v")),
    (b"k:v:w", b":", (b"k", b"v:w")),  # first separator splits, as Kafka's console producer
    (b":v", b":", (b"", b"v")),
    (b"k\t", b"\t", (b"k", b"")),
])
def test_split_record(line, sep, expected):
    assert split_record(line, sep, 1) == expected


def test_split_record_without_separator_names_line():
    with pytest.raises(UsageError, match="line number 7"):
        split_record(b"novalue", b":", 7)


def test_format_record_nulls_and_keys():
    assert format_record(None, None, False, b"\t") == b"null\n"
    assert format_record(None, b"v", True, b"\t") == b"null\tv\n"
    assert format_record(b"k", b"v", True, b"=") == b"k=v\n"


def test_parse_properties():
    assert parse_properties("# c\n! c\n\nacks = all\nclient.id=a=b\n") == {"acks": "all", "client.id": "a=b"}
    with pytest.raises(UsageError, match="line 2"):
        parse_properties("acks=all\nbroken\n")


# --- topics --------------------------------------------------------------------------------

def test_topics_create_list_describe_delete(bootstrap):
    topic = f"cli-topics-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})

    r = tool(["topics", "create"], bootstrap, "--topic", topic, "--partitions", "3", "--config", "retention.ms=60000")
    assert r.returncode == 0, r.stderr
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3
    entries = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    assert next(iter(entries.values())).result(timeout=10)["retention.ms"].value == "60000"

    r = tool(["topics", "create"], bootstrap, "--topic", topic)
    assert r.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in r.stderr
    assert tool(["topics", "create"], bootstrap, "--topic", topic, "--if-not-exists").returncode == 0

    r = tool(["topics", "list"], bootstrap)
    assert r.returncode == 0 and topic in r.stdout.decode().split("\n")

    assert tool(["produce"], bootstrap, "--topic", topic, "--partition", "1", input=b"a\nb\n").returncode == 0
    r = tool(["topics", "describe"], bootstrap, "--topic", topic)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith(f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 1")
    assert "Configs: retention.ms=60000" in lines[0]
    ends = end_offsets(bootstrap, topic, 3)
    assert ends == [0, 2, 0]
    for p in range(3):
        assert f"Partition: {p}\tLeader: " in lines[1 + p]
        assert lines[1 + p].endswith(f"LogStartOffset: 0\tEndOffset: {ends[p]}")

    r = tool(["topics", "delete"], bootstrap, "--topic", topic)
    assert r.returncode == 0, r.stderr
    assert topic not in admin.list_topics(timeout=10).topics
    r = tool(["topics", "delete"], bootstrap, "--topic", topic)
    assert r.returncode == 1 and b"does not exist" in r.stderr
    assert tool(["topics", "delete"], bootstrap, "--topic", topic, "--if-exists").returncode == 0


def test_topics_create_bad_config_is_reported(bootstrap):
    topic = f"cli-badcfg-{uuid.uuid4().hex[:8]}"
    r = tool(["topics", "create"], bootstrap, "--topic", topic, "--config", "no.such.config=1")
    assert r.returncode == 1
    assert b"no.such.config" in r.stderr and b"Traceback" not in r.stderr
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


# --- produce and consume -------------------------------------------------------------------

def test_produce_values_then_consume(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    lines = [f"line {i} é".encode() for i in range(20)] + [b""]  # an empty line is an empty value
    r = tool(["produce"], bootstrap, "--topic", topic, input=b"\n".join(lines) + b"\n")
    assert r.returncode == 0, r.stderr

    r = tool(["consume"], bootstrap, "--topic", topic, "--from-beginning", "--max-messages", str(len(lines)))
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"".join(line + b"\n" for line in lines)
    assert b"Processed a total of 21 messages" in r.stderr

    msgs = read_all(bootstrap, topic, 1, len(lines))
    assert [m.value() for m in msgs] == lines
    assert all(m.key() is None for m in msgs)


def test_produce_with_key_separator_then_consume_keys(bootstrap, make_topic):
    topic = make_topic(partitions=3)
    pairs = [(f"k{i % 4}".encode(), f"v{i}=x".encode()) for i in range(30)]
    stdin = b"".join(k + b"=" + v + b"\r\n" for k, v in pairs)  # CRLF input, value holds the separator
    r = tool(["produce"], bootstrap, "--topic", topic, "--key-separator", "=", input=stdin)
    assert r.returncode == 0, r.stderr

    r = tool(["consume"], bootstrap, "--topic", topic, "--from-beginning", "--max-messages", "30", "--print-key",
             "--key-separator", "|")
    assert r.returncode == 0, r.stderr
    printed = [tuple(line.split(b"|", 1)) for line in r.stdout.splitlines()]
    assert sorted(printed) == sorted(pairs)

    msgs = read_all(bootstrap, topic, 3, 30)
    assert sorted((m.key(), m.value()) for m in msgs) == sorted(pairs)
    # Kafka's DefaultPartitioner (murmur2) by default: one key, one partition.
    partition_of = {}
    for m in msgs:
        assert partition_of.setdefault(m.key(), m.partition()) == m.partition()


def test_produce_line_without_separator_writes_nothing(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    r = tool(["produce"], bootstrap, "--topic", topic, "--key-separator", ":", input=b"a:1\nb:2\nbroken\nc:3\n")
    assert r.returncode == 2
    assert b"line number 3" in r.stderr and b"nothing was produced" in r.stderr
    assert b"Traceback" not in r.stderr
    assert end_offsets(bootstrap, topic, 2) == [0, 0]


def test_produce_to_partition_and_bad_partition(bootstrap, make_topic):
    topic = make_topic(partitions=3)
    assert tool(["produce"], bootstrap, "--topic", topic, "--partition", "2", input=b"x\ny\n").returncode == 0
    assert end_offsets(bootstrap, topic, 3) == [0, 0, 2]

    r = tool(["produce"], bootstrap, "--topic", topic, "--partition", "3", input=b"z\n")
    assert r.returncode == 2 and b"--partition 3" in r.stderr and b"0..2" in r.stderr
    assert end_offsets(bootstrap, topic, 3) == [0, 0, 2]


def test_produce_to_missing_topic(bootstrap):
    # Without auto-creation the CLI names the missing topic and how to create it.
    topic = f"cli-missing-{uuid.uuid4().hex[:8]}"
    r = tool(["produce"], bootstrap, "--topic", topic, "--command-config", "allow.auto.create.topics=false",
             input=b"x\n")
    assert r.returncode == 1
    assert f"topic '{topic}' is not available".encode() in r.stderr
    assert f"pyspark-kafka topics create --topic {topic}".encode() in r.stderr
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    # With it (the producer's default, auto.create.topics.enable=true on the broker) the record lands.
    r = tool(["produce"], bootstrap, "--topic", topic, input=b"x\n")
    assert r.returncode == 0, r.stderr
    assert [m.value() for m in read_all(bootstrap, topic, 1, 1)] == [b"x"]


def test_consume_without_from_beginning_skips_existing_records(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    assert tool(["produce"], bootstrap, "--topic", topic, input=b"old1\nold2\n").returncode == 0
    r = tool(["consume"], bootstrap, "--topic", topic, "--timeout-ms", "1500")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    assert b"Processed a total of 0 messages" in r.stderr


def test_consume_idle_timeout_stops_before_max_messages(bootstrap, make_topic):
    topic = make_topic(partitions=1)
    assert tool(["produce"], bootstrap, "--topic", topic, input=b"a\nb\n").returncode == 0
    r = tool(["consume"], bootstrap, "--topic", topic, "--from-beginning", "--max-messages", "10",
             "--timeout-ms", "1500")
    assert r.returncode == 0 and r.stdout == b"a\nb\n"


@pytest.mark.slow
def test_consume_with_group_commits_what_it_printed(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    group = f"cli-group-{uuid.uuid4().hex[:8]}"
    assert tool(["produce"], bootstrap, "--topic", topic, input=b"".join(b"r%d\n" % i for i in range(6))).returncode == 0
    first = tool(["consume"], bootstrap, "--topic", topic, "--group", group, "--from-beginning",
                 "--max-messages", "4", "--timeout-ms", "20000")
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 4
    rest = tool(["consume"], bootstrap, "--topic", topic, "--group", group, "--from-beginning", "--timeout-ms", "5000")
    assert rest.returncode == 0
    assert sorted(first.stdout.splitlines() + rest.stdout.splitlines()) == [b"r%d" % i for i in range(6)]


# --- errors -------------------------------------------------------------------------------

def test_unreachable_bootstrap_server_one_line_error():
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    r = cli("topics", "list", "--bootstrap-server", address, "--connect-timeout-ms", "1000")
    assert time.monotonic() - started < 30
    assert r.returncode == 1
    err = r.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"cannot reach a Kafka broker at {address} within 1 s" in err
    assert "Connection refused" in err


@pytest.mark.parametrize("command", [["produce", "--topic", "t"], ["consume", "--topic", "t"]])
def test_unreachable_bootstrap_server_for_clients(command):
    address = f"127.0.0.1:{free_port()}"
    r = cli(*command, "--bootstrap-server", address, "--connect-timeout-ms", "1000", input=b"x\n")
    assert r.returncode == 1 and f"cannot reach a Kafka broker at {address}".encode() in r.stderr
    assert b"Traceback" not in r.stderr


def test_bad_command_config_is_a_usage_error(bootstrap):
    r = tool(["topics", "list"], bootstrap, "--command-config", "no.such.setting=1")
    assert r.returncode == 2 and b"no.such.setting" in r.stderr and b"Traceback" not in r.stderr
    r = tool(["topics", "list"], bootstrap, "--command-config", "/nonexistent/client.properties")
    assert r.returncode == 2 and b"not KEY=VALUE and not a readable file" in r.stderr


def test_command_config_properties_file(bootstrap, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# Kafka-style client properties\nclient.id=cli-test\n")
    r = tool(["topics", "list"], bootstrap, "--command-config", str(props))
    assert r.returncode == 0, r.stderr


# --- broker subcommand --------------------------------------------------------------------

@pytest.mark.parametrize("config, message", [
    ("log.segment.bytes", b"expected KEY=VALUE, got 'log.segment.bytes'"),
    ("no.such.key=1", b"unknown broker config 'no.such.key'"),
    ("log.segment.bytes=big", b"log.segment.bytes='big' is not an integer"),
])
def test_broker_bad_config_exit_2(tmp_path, config, message):
    r = cli("broker", "--data-dir", str(tmp_path / "data"), "--port", "0", "--config", config, timeout=30)
    assert r.returncode == 2
    assert message in r.stderr
    assert not (tmp_path / "data").exists()  # nothing was started or written


@pytest.mark.parametrize("config, message", [
    ("authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
     b"authorizer.class.name='kafka.security.authorizer.AclAuthorizer' is not supported"),
    ("listeners=FOO://127.0.0.1:0", b"no security protocol is defined for listener FOO"),
])
def test_broker_config_refused_when_the_broker_is_built_exit_1(tmp_path, config, message):
    r = cli("broker", "--data-dir", str(tmp_path / "data"), "--port", "0", "--config", config, timeout=30)
    assert r.returncode == 1
    assert r.stderr.startswith(b"pyspark-kafka broker: error: ") and message in r.stderr
    assert b"Traceback" not in r.stderr


def test_broker_command_serves_metadata_and_stops_on_sigterm(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(tmp_path / "data"), "--port", "0",
         "--config", "num.partitions=2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        address = None
        end = time.monotonic() + 60
        while address is None and time.monotonic() < end:
            line = proc.stderr.readline()
            assert line, f"broker exited with {proc.poll()} before listening"
            if " listening on " in line:
                address = line.split(" listening on ", 1)[1].split()[0]
        assert address is not None and address.startswith("127.0.0.1:")

        admin = AdminClient({"bootstrap.servers": address})
        metadata = admin.list_topics(timeout=10)
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", int(address.split(":")[1]))]
        r = tool(["topics", "create"], address, "--topic", "from-cli")
        assert r.returncode == 0, r.stderr
        assert "from-cli" in admin.list_topics(timeout=10).topics

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert (tmp_path / "data" / "from-cli-0").is_dir()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()


def test_every_option_has_help_text():
    """Issue 27: ``--topic`` and ``--log-level`` had none; every option of every command has one now."""
    from pyspark_kafka.cli import build_parser

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, __import__("argparse")._SubParsersAction):
                for name, child in action.choices.items():
                    yield from walk(child, f"{path} {name}")
            elif action.option_strings and action.dest != "help":
                yield path, action

    missing = [f"{path} {a.option_strings[0]}" for path, a in walk(build_parser(), "pyspark-kafka") if not a.help]
    assert missing == []


def test_produce_to_a_partition_of_a_missing_topic_refuses_and_creates_nothing(bootstrap):
    """cli.md's ``seq 1 1000 | pyspark-kafka produce --topic numbers --partition 2`` on a missing topic used to
    auto-create it with one partition, then refuse ``--partition 2``."""
    topic = f"cli-numbers-{uuid.uuid4().hex[:8]}"
    r = tool(["produce"], bootstrap, "--topic", topic, "--partition", "2", input=b"1\n2\n")
    assert r.returncode == 1
    assert f"pyspark-kafka topics create --topic {topic} --partitions 3".encode() in r.stderr, r.stderr
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def test_broker_on_another_nodes_data_dir_exit_1_naming_the_fix(tmp_path):
    from pyspark_kafka.broker import meta_properties

    # what node 0's first start wrote (test_combined_node checks that a start writes it)
    meta_properties.write(tmp_path / "data", meta_properties.MetaProperties(
        "dtmlrwmJUOuSiihq0sdOMA", 0, meta_properties.new_directory_id()))
    r = cli("broker", "--data-dir", str(tmp_path / "data"), "--port", "0", "--config", "node.id=4", timeout=30)
    assert r.returncode == 1
    assert r.stderr.startswith(b"pyspark-kafka broker: error: Stored node id 0 doesn't match previous node id 4")
    assert b"set node.id=0" in r.stderr and b"Traceback" not in r.stderr


def test_broker_data_dir_that_is_a_file_is_named(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    r = cli("broker", "--data-dir", str(path), "--port", "0", timeout=30)
    assert r.returncode == 1
    assert f"the data directory {path} is a file, not a directory".encode() in r.stderr, r.stderr
    assert b"cannot listen" not in r.stderr and b"Traceback" not in r.stderr

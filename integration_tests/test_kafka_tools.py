"""Kafka's own command-line tools against every backend, with the same expectations.

The tools run from the Maven Central jars of the ``apache-kafka`` backend (their main
classes, as Kafka's ``bin/*.sh`` scripts run them) against ``embedded`` and ``apache-kafka``:
a difference between the two is a broker bug or a pinned, documented difference. Every tool
tested here works on both (the embedded broker serves DeleteRecords, IncrementalAlterConfigs,
DescribeLogDirs and DescribeProducers). Skipped with the reason when Java/Maven are not there.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from support.kafka_features import EMBEDDED_DESCRIBE, FEATURES, KAFKA_4_4_0_DESCRIBE, describe_lines
from support.kafka_tools import tool_server_for_module
from support.waiting import wait_until

BACKENDS = ("embedded", "apache-kafka")
# only these backends: the others are not started for tests that would skip (a 3-node Apache Kafka start is ~11 s)
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("kafka_cluster", BACKENDS, indirect=True)]
TOOL_TIMEOUT_S = 120
TOPICS = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"


@pytest.fixture(scope="module")
def tool_server():
    """Kafka's tools in one JVM for the module (support.kafka_tools.ToolServer); skips when the jars cannot be had."""
    yield from tool_server_for_module()


@pytest.fixture
def tool(tool_server, kafka_cluster):
    """``tool(main_class, *args, stdin=None, ok=True) -> stdout + stderr`` against the backend."""

    def run(main: str, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        code, out = tool_server.run(main, "--bootstrap-server", kafka_cluster.bootstrap, *args, stdin=stdin,
                                    timeout_s=TOOL_TIMEOUT_S)
        shown = " ".join([main.rsplit(".", 1)[-1], *args])
        if ok:
            assert code == 0, f"{shown} exited {code} on {kafka_cluster.name}:\n{out[-3000:]}"
        else:
            assert code != 0, f"{shown} was expected to fail on {kafka_cluster.name}:\n{out[-3000:]}"
        return out

    run.cluster = kafka_cluster
    return run


def _topic_listed(tool, topic: str) -> bool:
    return topic in tool(TOPICS, "--list").split()


def test_kafka_topics_describe_pages_through_describe_topic_partitions(tool):
    # Kafka 4's admin client describes topics with DescribeTopicPartitions (API 75) when the broker
    # serves it, asking page after page with the cursor: 2 partitions per response here
    topic = f"tools-pages-{time.monotonic_ns()}"
    rf = str(tool.cluster.replication_factor)
    tool(TOPICS, "--create", "--topic", topic, "--partitions", "5", "--replication-factor", rf)
    described = tool(TOPICS, "--describe", "--topic", topic, "--partition-size-limit-per-response", "2")
    assert f"PartitionCount: 5\tReplicationFactor: {rf}" in described, described
    assert sorted(int(p) for p in re.findall(rf"Topic: {topic}\tPartition: (\d+)\tLeader: \d+", described)) == [
        0, 1, 2, 3, 4], described
    # every topic (no --topic): the pages run across topics
    everything = tool(TOPICS, "--describe", "--partition-size-limit-per-response", "3")
    assert len(re.findall(rf"Topic: {topic}\tPartition: \d+", everything)) == 5, everything


def test_kafka_topics_create_describe_alter_delete(tool):
    topic = f"tools-{time.monotonic_ns()}"
    rf = str(tool.cluster.replication_factor)
    assert f"Created topic {topic}." in tool(TOPICS, "--create", "--topic", topic, "--partitions", "2",
                                             "--replication-factor", rf, "--config", "retention.ms=3600000")
    described = tool(TOPICS, "--describe", "--topic", topic)
    assert re.search(rf"Topic: {topic}\tTopicId: \S+\tPartitionCount: 2\tReplicationFactor: {rf}\t"
                     r"Configs: .*retention\.ms=3600000", described), described
    assert sorted(int(p) for p in re.findall(r"\tPartition: (\d+)\tLeader: \d+", described)) == [0, 1]
    tool(TOPICS, "--alter", "--topic", topic, "--partitions", "3")
    assert "PartitionCount: 3" in tool(TOPICS, "--describe", "--topic", topic)
    # fewer partitions is refused, as Kafka refuses it (INVALID_PARTITIONS)
    refused = tool(TOPICS, "--alter", "--topic", topic, "--partitions", "1", ok=False)
    assert "InvalidPartitionsException" in refused, refused
    # a duplicate create is refused with Kafka's TopicExistsException
    assert "TopicExistsException" in tool(TOPICS, "--create", "--topic", topic, ok=False)
    assert _topic_listed(tool, topic)
    tool(TOPICS, "--delete", "--topic", topic)
    deadline = time.monotonic() + 30
    while _topic_listed(tool, topic):  # Apache Kafka deletes asynchronously
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after delete"
        time.sleep(0.5)


def test_console_producer_consumer_groups_and_offsets(tool):
    cluster = tool.cluster
    topic = cluster.create_topic(2, prefix="tools")
    group = f"tools-group-{time.monotonic_ns()}"
    lines = [f"k{i}:v{i}" for i in range(12)]
    tool(PRODUCER, "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=:",
         stdin="\n".join(lines) + "\n")
    consumed = tool(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "12", "--group", group,
                    "--property", "print.key=true", "--property", "key.separator=:", "--timeout-ms", "60000")
    assert sorted(ln for ln in consumed.splitlines() if re.fullmatch(r"k\d+:v\d+", ln)) == sorted(lines)
    assert "Processed a total of 12 messages" in consumed

    latest = dict(re.findall(rf"^{topic}:(\d+):(\d+)$", tool(GET_OFFSETS, "--topic", topic), re.M))
    earliest = dict(re.findall(rf"^{topic}:(\d+):(\d+)$", tool(GET_OFFSETS, "--topic", topic, "--time", "-2"), re.M))
    assert sum(int(v) for v in latest.values()) == 12 and set(latest) == {"0", "1"}
    assert earliest == {"0": "0", "1": "0"}

    assert group in tool(GROUPS, "--list").split()

    def described() -> dict[str, tuple[int, int, int]]:
        out = tool(GROUPS, "--describe", "--group", group)
        return {p: (int(cur), int(end), int(lag)) for p, cur, end, lag in re.findall(
            rf"^{group}\s+{topic}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", out, re.M)}

    # the console consumer committed what it printed (its offsets may stop short of the end
    # only for messages it did not print; it printed all 12)
    assert described() == {p: (int(end), int(end), 0) for p, end in latest.items()}
    reset = tool(GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert sorted(re.findall(rf"^{group}\s+{topic}\s+(\d+)\s+0\s*$", reset, re.M)) == ["0", "1"], reset
    assert described() == {p: (0, int(end), int(end)) for p, end in latest.items()}
    assert f"Deletion of requested consumer groups ('{group}') was successful." in tool(
        GROUPS, "--delete", "--group", group)
    assert group not in tool(GROUPS, "--list").split()


def test_consumer_groups_tool_on_a_kip848_group(tool):
    """The console consumer with ``group.protocol=consumer`` (KIP-848), then kafka-consumer-groups on that
    group: listed with its type, described with its offsets and lag (through ConsumerGroupDescribe),
    its state and members, then deleted."""
    cluster = tool.cluster
    topic = cluster.create_topic(2, prefix="tools848")
    group = f"tools848-group-{time.monotonic_ns()}"
    lines = [f"v{i}" for i in range(8)]
    tool(PRODUCER, "--topic", topic, stdin="\n".join(lines) + "\n")
    consumed = tool(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "8", "--group", group,
                    "--consumer-property", "group.protocol=consumer", "--timeout-ms", "60000")
    assert sorted(ln for ln in consumed.splitlines() if re.fullmatch(r"v\d+", ln)) == sorted(lines)
    listed = tool(GROUPS, "--list", "--type")
    assert re.search(rf"^{group}\s+Consumer\s*$", listed, re.M | re.I), listed
    described = tool(GROUPS, "--describe", "--group", group)
    rows = re.findall(rf"^{group}\s+{topic}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", described, re.M)
    assert sorted(p for p, *_ in rows) == ["0", "1"] and all(cur == end and lag == "0" for _, cur, end, lag in rows), \
        described
    state = tool(GROUPS, "--describe", "--group", group, "--state")
    assert re.search(rf"^{group}\s+\S+\s+\(\d+\)\s+(range|uniform)\s+Empty\s+0\s*$", state, re.M), state
    assert f"Deletion of requested consumer groups ('{group}') was successful." in tool(
        GROUPS, "--delete", "--group", group)
    assert group not in tool(GROUPS, "--list").split()


def test_transactions_list_shows_a_committed_transaction(tool):
    from confluent_kafka import Producer

    topic = tool.cluster.create_topic(1, prefix="tools")
    txn_id = f"tools-txn-{time.monotonic_ns()}"
    producer = Producer({"bootstrap.servers": tool.cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"v")
    producer.commit_transaction(30)
    # with transaction.version 2 (Kafka 4.4's default) the commit returns at PrepareCommit and the coordinator
    # writes the markers after: the listing reaches CompleteCommit shortly after, bounded
    wait_until(lambda: re.search(rf"^{txn_id}\s+\d+\s+\d+\s+CompleteCommit\s*$", tool(TRANSACTIONS, "list"), re.M),
               f"{txn_id} listed as CompleteCommit", timeout_s=30, interval_s=0.5)
    described = tool(TRANSACTIONS, "describe", "--transactional-id", txn_id)
    assert re.search(r"CompleteCommit", described), described


def _configs() -> str:
    """kafka-configs.sh's main class for the Kafka under test (it moved to the tools module in 4.4)."""
    from pyspark_kafka.testing import maven

    return maven.config_command_main()


def test_configs_describe_shows_a_topic_override(tool):
    configs = _configs()
    topic = tool.cluster.create_topic(1, config={"retention.ms": "3600000"}, prefix="tools")
    out = tool(configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert f"Dynamic configs for topic {topic} are:" in out
    assert re.search(r"retention\.ms=3600000 sensitive=false", out), out


def test_configs_alter_then_describe_shows_the_new_values(tool):
    configs = _configs()
    topic = tool.cluster.create_topic(1, config={"retention.ms": "3600000"}, prefix="tools")
    altered = tool(configs, "--alter", "--entity-type", "topics", "--entity-name", topic,
                   "--add-config", "retention.ms=7200000,max.message.bytes=2000000")
    assert f"Completed updating config for topic {topic}." in altered, altered
    out = tool(configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert re.search(r"retention\.ms=7200000 sensitive=false", out), out
    assert re.search(r"max\.message\.bytes=2000000 sensitive=false", out), out
    tool(configs, "--alter", "--entity-type", "topics", "--entity-name", topic, "--delete-config", "retention.ms")
    out = tool(configs, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert "retention.ms=" not in out and "max.message.bytes=2000000" in out, out
    refused = tool(configs, "--alter", "--entity-type", "topics", "--entity-name", topic,
                   "--add-config", "retention.ms=soon", ok=False)
    assert "InvalidConfigurationException" in refused, refused


def _produce(cluster, topic: str, count: int, **config) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, **config})
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(30) == 0


def test_delete_records_moves_the_low_watermark(tool, tmp_path):
    topic = tool.cluster.create_topic(1, prefix="tools")
    _produce(tool.cluster, topic, 5)
    spec = tmp_path / "offsets.json"
    spec.write_text('{"partitions": [{"topic": "%s", "partition": 0, "offset": 3}], "version": 1}' % topic)
    out = tool(DELETE_RECORDS, "--offset-json-file", str(spec))
    assert f"partition: {topic}-0\tlow_watermark: 3" in out, out
    assert f"{topic}:0:3" in tool(GET_OFFSETS, "--topic", topic, "--time", "-2").split()
    spec.write_text('{"partitions": [{"topic": "%s", "partition": 0, "offset": 9}], "version": 1}' % topic)
    out = tool(DELETE_RECORDS, "--offset-json-file", str(spec))  # exits 0, errors per partition
    assert f"partition: {topic}-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException" in out, out


def test_log_dirs_lists_the_topics_partitions_with_their_sizes(tool):
    topic = tool.cluster.create_topic(2, prefix="tools")
    _produce(tool.cluster, topic, 5)
    out = tool(LOG_DIRS, "--describe", "--topic-list", topic)
    described = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    partitions = {}
    for broker in described["brokers"]:
        for log_dir in broker["logDirs"]:
            assert log_dir["error"] is None, out
            for p in log_dir["partitions"]:
                partitions.setdefault(p["partition"], set()).add((p["size"] > 0, p["offsetLag"], p["isFuture"]))
    assert partitions == {f"{topic}-0": {(True, 0, False)}, f"{topic}-1": {(False, 0, False)}}, out


def test_transactions_describe_producers_lists_the_producer(tool):
    topic = tool.cluster.create_topic(1, prefix="tools")
    _produce(tool.cluster, topic, 3, **{"enable.idempotence": True, "acks": "all"})
    out = tool(TRANSACTIONS, "describe-producers", "--topic", topic, "--partition", "0")
    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp CurrentTransactionStartOffset
    assert re.search(r"^\d+\s+0\s+-1\s+2\s+\d+\s+None\s*$", out, re.M), out


def test_kafka_features_describe(tool):
    # Apache Kafka prints the recorded 4.4.0 lines; the embedded broker prints the features it implements, Kafka's
    # lines but kraft.version's supported maximum. Both epochs are the broker's metadata image offset
    lines, epochs = describe_lines(tool(FEATURES, "describe"))
    if tool.cluster.name == "embedded":
        assert lines == EMBEDDED_DESCRIBE and len(epochs) == 1 and int(epochs.pop()) > 0, lines
    else:
        assert lines == KAFKA_4_4_0_DESCRIBE and len(epochs) == 1 and int(epochs.pop()) > 0, lines


def test_configs_alter_users_scram_credentials(tool):
    """``kafka-configs --alter --entity-type users --add-config 'SCRAM-SHA-256=[...]'`` sends AlterUserScramCredentials
    (the embedded broker forwards it to its controller, which writes a credential record); both mechanisms of one
    user in one call are refused by both backends (Kafka 4.4's ``ScramControlManager``: a user named twice in one
    request is DUPLICATE_RESOURCE), so they go in two calls; ``--delete-config`` removes one."""
    from confluent_kafka.admin import AdminClient, ScramMechanism

    configs, user = _configs(), f"tools-user-{time.monotonic_ns() % 10**9}"
    both = tool(configs, "--alter", "--entity-type", "users", "--entity-name", user, "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=pw-Tr31],SCRAM-SHA-512=[password=pw-Tr31]", ok=False)
    assert "DuplicateResourceException: A user credential cannot be altered twice in the same request" in both, both
    for spec in ("SCRAM-SHA-256=[iterations=8192,password=pw-Tr31]", "SCRAM-SHA-512=[password=pw-Tr31]"):
        out = tool(configs, "--alter", "--entity-type", "users", "--entity-name", user, "--add-config", spec)
        assert f"Completed updating config for user {user}." in out, out
    admin = AdminClient({"bootstrap.servers": tool.cluster.bootstrap})

    def described():
        infos = admin.describe_user_scram_credentials([user])[user].result(30).scram_credential_infos
        return sorted((i.mechanism, i.iterations) for i in infos)

    assert described() == [(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    out = tool(configs, "--alter", "--entity-type", "users", "--entity-name", user, "--delete-config", "SCRAM-SHA-256")
    assert f"Completed updating config for user {user}." in out, out
    assert described() == [(ScramMechanism.SCRAM_SHA_512, 4096)]

"""The ``pyspark-kafka`` console script (also ``python -m pyspark_kafka``).

Commands (one function each, ``cmd_<name>``; a new command is one ``add_parser``
call plus one function):

- ``broker``: run the embedded Kafka-compatible broker in the foreground.
- ``cluster``: run a replicated embedded cluster (1 or 3 controllers and N brokers) until interrupted.
- ``topics create|list|describe|delete``: like Kafka's ``kafka-topics.sh``.
- ``produce``: stdin lines → records, like ``kafka-console-producer.sh``.
- ``consume``: records → stdout lines, like ``kafka-console-consumer.sh``.
- ``groups list|describe``: consumer groups, offsets and lag, like ``kafka-consumer-groups.sh``.

The tools talk to the cluster only through confluent-kafka (librdkafka), never
through the broker's internals, so they work with any Kafka-protocol broker.

Exit codes: 0 success; 1 runtime error (broker unreachable, a Kafka error, a
failed delivery), printed as one line ``pyspark-kafka <command>: error: ...``
without a traceback; 2 usage error (bad arguments, malformed ``KEY=VALUE``,
a produce input line without the key separator).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time

from pyspark_kafka.cli_common import (  # noqa: F401 (parse_properties: re-exported, the tools' vocabulary)
    admin_client,
    admin_result,
    client_config,
    CliError,
    cluster_metadata,
    command_config,
    CONSOLE_GROUP_ID,
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONNECT_TIMEOUT_MS,
    format_record,
    input_lines,
    make_client,
    parse_key_value,
    parse_properties,
    PRODUCER_DEFAULTS,
    split_record,
    SPOOL_MEMORY_BYTES,
    topic_partitions,
    UsageError,
)


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def cmd_broker(args) -> int:
    """Run the embedded broker until SIGINT/SIGTERM.

    Its log goes to stderr; once listening it logs one line
    ``... pyspark-kafka broker listening on HOST:PORT (data dir DIR)``.
    """
    from pyspark_kafka.broker.errors import ConfigError, KafkaStorageError
    from pyspark_kafka.broker.log.manager import prepare_data_dir
    from pyspark_kafka.broker.server import run_broker

    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        prepare_data_dir(args.data_dir)  # a file given as --data-dir is named as such
    except KafkaStorageError as e:
        raise CliError(str(e)) from None
    try:
        run_broker(args.data_dir, host=args.host, port=args.port, config=dict(args.config))
    except (ConfigError, KafkaStorageError) as e:  # configs checked when the broker is built; meta.properties
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"cannot listen on {args.host}:{args.port} with data dir {args.data_dir!r}: "
                       f"{e.strerror or e}; pick another --port (0 = any free port) or --data-dir") from None
    return 0


def cmd_cluster(args) -> int:
    """Run a replicated cluster (:class:`~pyspark_kafka.broker.cluster.EmbeddedCluster`) until SIGINT/SIGTERM.

    Prints ``bootstrap.servers`` and the path of ``cluster.json`` (each node's id, port, pid, restart command),
    then waits; on SIGINT/SIGTERM stops every process it started, by pid.
    """
    import signal
    import threading

    from pyspark_kafka.broker.cluster import EmbeddedCluster

    try:
        cluster = EmbeddedCluster(args.brokers, data_dir=args.data_dir, port=args.port, config=dict(args.config),
                                  controllers=args.controllers)
    except ValueError as e:
        raise CliError(str(e)) from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster.start()
    except (OSError, RuntimeError, TimeoutError) as e:
        raise CliError(f"cannot start the cluster in {args.data_dir!r}: {e}") from None
    try:
        print(f"pyspark-kafka cluster: {args.brokers} brokers at {cluster.bootstrap_servers}, {args.controllers} "
              f"controller(s) {cluster.controller_ids} (active {cluster.active_controller()}); nodes in "
              f"{cluster.data_dir / 'cluster.json'}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        cluster.stop()
    return 0


def cmd_topics_create(args) -> int:
    """CreateTopics with ``--partitions``, ``--replication-factor`` and ``--config`` overrides."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(args)
    metadata = cluster_metadata(admin, args)
    if args.if_not_exists and args.topic in metadata.topics:
        return 0
    new = NewTopic(args.topic, num_partitions=args.partitions, replication_factor=args.replication_factor,
                   config=dict(args.config))
    timeout_s = args.connect_timeout_ms / 1000
    futures = admin.create_topics([new], operation_timeout=timeout_s, request_timeout=timeout_s)
    admin_result(futures[args.topic], f"creating topic {args.topic!r}", timeout_s + 5)
    print(f"Created topic {args.topic}.")
    return 0


def cmd_topics_list(args) -> int:
    """Topic names from a Metadata request, sorted, one per line."""
    metadata = cluster_metadata(admin_client(args), args)
    for name in sorted(metadata.topics):
        print(name)
    return 0


def topic_overrides(admin, names: list[str], timeout_s: float) -> dict[str, dict[str, str]]:
    """Topic configs set on each topic (DescribeConfigs, source DYNAMIC_TOPIC_CONFIG), as Kafka's tool shows."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, n) for n in names],
                                     request_timeout=timeout_s)
    out = {}
    for resource, fut in futures.items():
        entries = admin_result(fut, f"describing configs of {resource.name}", timeout_s + 5)
        out[resource.name] = {k: e.value for k, e in entries.items()
                              if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return out


def cmd_topics_describe(args) -> int:
    """Per topic: partitions, leader, replicas, ISR, set configs, log start offset and end offset (ListOffsets)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = admin_client(args)
    metadata = cluster_metadata(admin, args)
    names = [args.topic] if args.topic else sorted(metadata.topics)
    parts = [TopicPartition(t, p) for t in names for p in topic_partitions(metadata, t)]
    timeout_s = args.connect_timeout_ms / 1000
    offsets = {}
    for label, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):
        if not parts:
            break
        futures = admin.list_offsets({tp: spec for tp in parts}, request_timeout=timeout_s)
        for tp, fut in futures.items():
            offsets[(tp.topic, tp.partition, label)] = admin_result(
                fut, f"listing {label} offsets of {tp.topic}-{tp.partition}", timeout_s + 5).offset
    configs = topic_overrides(admin, names, timeout_s)
    for name in names:
        tm = metadata.topics[name]
        rf = max((len(pm.replicas) for pm in tm.partitions.values()), default=0)
        print(f"Topic: {name}\tPartitionCount: {len(tm.partitions)}\tReplicationFactor: {rf}"
              f"\tConfigs: {','.join(f'{k}={v}' for k, v in sorted(configs[name].items()))}")
        for pid in sorted(tm.partitions):
            pm = tm.partitions[pid]
            print(f"\tTopic: {name}\tPartition: {pid}\tLeader: {pm.leader}"
                  f"\tReplicas: {','.join(map(str, pm.replicas))}\tIsr: {','.join(map(str, pm.isrs))}"
                  f"\tLogStartOffset: {offsets[(name, pid, 'start')]}\tEndOffset: {offsets[(name, pid, 'end')]}")
    return 0


def cmd_topics_delete(args) -> int:
    """DeleteTopics; a missing topic is an error unless ``--if-exists``."""
    admin = admin_client(args)
    metadata = cluster_metadata(admin, args)
    if args.topic not in metadata.topics:
        if args.if_exists:
            return 0
        raise CliError(f"topic {args.topic!r} does not exist (use --if-exists to ignore)")
    timeout_s = args.connect_timeout_ms / 1000
    futures = admin.delete_topics([args.topic], operation_timeout=timeout_s, request_timeout=timeout_s)
    admin_result(futures[args.topic], f"deleting topic {args.topic!r}", timeout_s + 5)
    print(f"Deleted topic {args.topic}.")
    return 0


def spool_validated(stream, separator: bytes | None):
    """Copy ``stream``'s lines to a spool file (memory, then disk), checking every line.

    Returns the spool, rewound. Raises :class:`UsageError` on the first line without
    ``separator`` before anything is sent, so a bad input never leaves a partial write behind.
    """
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)
    for number, line in enumerate(input_lines(stream), start=1):
        split_record(line, separator, number)
        spool.write(line + b"\n")
    spool.seek(0)
    return spool


def cmd_produce(args) -> int:
    """stdin lines → records, all validated first; exit 1 unless every record is acknowledged."""
    from confluent_kafka import Producer

    separator = args.key_separator.encode() if args.key_separator is not None else None
    spool = spool_validated(sys.stdin.buffer, separator)
    producer = make_client(Producer, client_config(args, **PRODUCER_DEFAULTS))
    if args.partition is not None and args.topic not in cluster_metadata(producer, args).topics:
        # asking for the topic by name would auto-create it with the broker's num.partitions, and
        # then refuse --partition: refuse first, leaving nothing behind
        raise CliError(f"topic {args.topic!r} does not exist, so --partition {args.partition} cannot be honoured; "
                       f"create it first: pyspark-kafka topics create --topic {args.topic} "
                       f"--partitions {args.partition + 1}")
    partitions = topic_partitions(cluster_metadata(producer, args, args.topic), args.topic)
    if args.partition is not None and args.partition not in partitions:
        raise UsageError(f"--partition {args.partition}: topic {args.topic!r} has partitions "
                         f"{partitions[0]}..{partitions[-1]}")
    failed: list[str] = []
    delivered = 0

    def on_delivery(err, msg):
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failed.append(f"{err.name()}: {err.str()}")

    extra = {} if args.partition is None else {"partition": args.partition}
    with spool:
        for number, line in enumerate(input_lines(spool), start=1):
            key, value = split_record(line, separator, number)
            while True:
                try:
                    producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery, **extra)
                    break
                except BufferError:  # local queue full: serve delivery reports, then retry
                    producer.poll(0.1)
            producer.poll(0)
    remaining = producer.flush()  # bounded by message.timeout.ms: every record gets a report
    if failed or remaining:
        raise CliError(f"{len(failed) + remaining} record(s) not delivered to {args.topic!r} "
                       f"({delivered} delivered); first error: {failed[0] if failed else 'timed out'}")
    print(f"Produced {delivered} record(s) to {args.topic}.", file=sys.stderr)
    return 0


def cmd_consume(args) -> int:
    """Records → stdout lines until ``--max-messages`` or ``--timeout-ms`` of idleness (or Ctrl-C).

    Without ``--group``: assign() on every partition, nothing committed. With it: subscribe()
    and commit the offsets of the records printed (stored after each write).
    """
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

    start = "earliest" if args.from_beginning else "latest"
    if args.group:
        settings = {"group.id": args.group, "auto.offset.reset": start, "enable.auto.offset.store": False}
    else:
        settings = {"group.id": CONSOLE_GROUP_ID, "enable.auto.commit": False}
    consumer = make_client(Consumer, client_config(args, **settings))
    out = sys.stdout.buffer
    separator = args.key_separator.encode()
    count = 0
    try:
        partitions = topic_partitions(cluster_metadata(consumer, args, args.topic), args.topic)
        if args.group:
            consumer.subscribe([args.topic])
        else:
            offset = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
            consumer.assign([TopicPartition(args.topic, p, offset) for p in partitions])
        idle_deadline = None if args.timeout_ms is None else time.monotonic() + args.timeout_ms / 1000
        while args.max_messages is None or count < args.max_messages:
            wait = 0.5 if idle_deadline is None else max(0.0, min(0.5, idle_deadline - time.monotonic()))
            msg = consumer.poll(wait)
            if msg is None:
                if idle_deadline is not None and time.monotonic() >= idle_deadline:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise CliError(f"consuming {args.topic!r}: {msg.error().name()}: {msg.error().str()}")
            out.write(format_record(msg.key(), msg.value(), args.print_key, separator))
            out.flush()
            if args.group:
                consumer.store_offsets(msg)
            count += 1
            if idle_deadline is not None:
                idle_deadline = time.monotonic() + args.timeout_ms / 1000
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()  # with --group: commits the offsets of the records printed
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def cmd_groups(args) -> int:
    """``groups list`` (names) and ``groups describe [--group G]``: per partition the committed offset,
    log end offset, lag and owning member, like Kafka's ``kafka-consumer-groups.sh --describe``."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = admin_client(args)
    timeout_s = args.connect_timeout_ms / 1000
    listed = admin_result(admin.list_consumer_groups(request_timeout=timeout_s), "listing consumer groups", timeout_s + 5)
    names = sorted(g.group_id for g in listed.valid)
    if args.action == "list":
        for name in names:
            print(name)
        return 0
    if args.group:
        if args.group not in names:
            raise CliError(f"consumer group {args.group!r} does not exist (see `pyspark-kafka groups list`)")
        names = [args.group]
    described = admin.describe_consumer_groups(names, request_timeout=timeout_s) if names else {}
    for name in names:
        desc = admin_result(described[name], f"describing group {name!r}", timeout_s + 5)
        owner = {(tp.topic, tp.partition): m for m in desc.members for tp in m.assignment.topic_partitions}
        fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(name)], request_timeout=timeout_s)[name]
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in admin_result(fut, f"listing offsets of group {name!r}", timeout_s + 5).topic_partitions}
        parts = sorted(set(committed) | set(owner))
        ends = {}
        if parts:
            futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in parts},
                                         request_timeout=timeout_s)
            ends = {(tp.topic, tp.partition): admin_result(f, f"end offset of {tp.topic}-{tp.partition}", timeout_s + 5).offset
                    for tp, f in futures.items()}
        print(f"\nGROUP {name}  STATE {desc.state.name}  MEMBERS {len(desc.members)}")
        print("TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID")
        for key in parts:
            current = committed.get(key, -1)
            current = current if current is not None and current >= 0 else None
            member = owner.get(key)
            lag = ends[key] - current if current is not None else None
            cells = [key[0], key[1], "-" if current is None else current, ends[key], "-" if lag is None else lag,
                     member.member_id if member else "-", (member.host or "-") if member else "-",
                     member.client_id if member else "-"]
            print("\t".join(str(c) for c in cells))
    return 0


# ---------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------


def broker_config_pair(text: str) -> tuple[str, str]:
    """``--config`` of ``broker``: ``KEY=VALUE`` whose key the broker knows (exit 2 otherwise)."""
    from pyspark_kafka.broker.config import BrokerConfig
    from pyspark_kafka.broker.errors import KafkaError

    key, value = parse_key_value(text)
    try:
        BrokerConfig({key: value})
    except KafkaError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return key, value


def _client_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT[,HOST:PORT]",
                        help=f"Kafka brokers to connect to (default {DEFAULT_BOOTSTRAP})")
    common.add_argument("--command-config", action="append", default=[], metavar="KEY=VALUE|FILE",
                        help="client setting passed to librdkafka, or a properties file of them (repeatable)")
    common.add_argument("--connect-timeout-ms", type=int, default=DEFAULT_CONNECT_TIMEOUT_MS, metavar="MS",
                        help=f"give up when no broker answers within this time (default {DEFAULT_CONNECT_TIMEOUT_MS})")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree: one subparser per command, ``func`` set to its ``cmd_*`` function."""
    parser = argparse.ArgumentParser(prog="pyspark-kafka", description="Run the embedded Kafka-compatible broker; "
                                     "Kafka-style tools for topics, producing, consuming and groups.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    client = _client_options()

    p = sub.add_parser("broker", help="run the embedded Kafka-compatible broker")
    p.add_argument("--data-dir", required=True, help="directory holding the log segments (created if missing)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only); not used with --config listeners=...")
    p.add_argument("--port", type=int, default=9092, help="port to bind, 0 for a free one (default 9092); not used with --config listeners=...")
    p.add_argument("--config", type=broker_config_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="broker setting with Kafka's name, e.g. log.segment.bytes=1048576 or "
                        "listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094 (repeatable)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="least severe broker log line written to stderr (default info)")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("cluster", help="run a replicated embedded cluster: a controller and N broker processes")
    p.add_argument("--brokers", type=int, default=3, help="number of brokers, node ids 0..N-1 (default 3)")
    p.add_argument("--controllers", type=int, default=1, choices=(1, 3),
                   help="controller processes, node ids 3000..: 1 = a single-voter metadata log (default), 3 = a "
                        "Raft quorum (KIP-595) that survives the loss of one controller")
    p.add_argument("--data-dir", required=True, help="holds node-<id>/ data directories and cluster.json")
    p.add_argument("--port", type=int, default=None,
                   help="first broker port: brokers listen on PORT..PORT+N-1 (default: free ports)")
    p.add_argument("--config", type=broker_config_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="broker setting with Kafka's name for every node, e.g. min.insync.replicas=2 (repeatable)")
    p.set_defaults(func=cmd_cluster)

    topics = sub.add_parser("topics", help="create, list, describe or delete topics").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = topics.add_parser("create", parents=[client], help="create a topic")
    p.add_argument("--topic", required=True, help="name of the topic to create")
    p.add_argument("--partitions", type=int, default=1, help="number of partitions (default 1)")
    p.add_argument("--replication-factor", type=int, default=1, help="replicas per partition (default 1)")
    p.add_argument("--config", type=parse_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="topic config with Kafka's name, e.g. retention.ms=60000 (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    p.set_defaults(func=cmd_topics_create)
    p = topics.add_parser("list", parents=[client], help="list topic names")
    p.set_defaults(func=cmd_topics_list)
    p = topics.add_parser("describe", parents=[client],
                          help="partitions, leader, log start offset and end offset (high watermark)")
    p.add_argument("--topic", help="one topic (default: all)")
    p.set_defaults(func=cmd_topics_describe)
    p = topics.add_parser("delete", parents=[client], help="delete a topic")
    p.add_argument("--topic", required=True, help="name of the topic to delete")
    p.add_argument("--if-exists", action="store_true", help="succeed when the topic does not exist")
    p.set_defaults(func=cmd_topics_delete)

    p = sub.add_parser("produce", parents=[client], help="send stdin lines as records")
    p.add_argument("--topic", required=True, help="topic to write to (auto-created by the broker when missing, "
                                                  "unless --partition is given)")
    p.add_argument("--key-separator", metavar="SEP", help="each line is KEY<SEP>VALUE (split at the first SEP)")
    p.add_argument("--partition", type=int, help="send every record to this partition (default: by key hash)")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", parents=[client], help="print record values, one per line")
    p.add_argument("--topic", required=True, help="topic to read (every partition)")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the log start offset (with --group: only when the group has no committed offset)")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    p.add_argument("--group", metavar="G", help="join consumer group G (subscribe) and commit the offsets printed")
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="exit when no record arrives for MS ms")
    p.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    p.add_argument("--key-separator", default="\t", metavar="SEP", help="separator for --print-key (default TAB)")
    p.set_defaults(func=cmd_consume)

    groups = sub.add_parser("groups", help="list consumer groups, or describe offsets and lag").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = groups.add_parser("list", parents=[client], help="list consumer group names")
    p.set_defaults(func=cmd_groups)
    p = groups.add_parser("describe", parents=[client],
                          help="committed offset, log end offset, lag and member per partition")
    p.add_argument("--group", metavar="G", help="one group (default: all)")
    p.set_defaults(func=cmd_groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``pyspark-kafka``; returns the exit code (0, 1 runtime error, 2 usage error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    name = " ".join(filter(None, [args.command, getattr(args, "action", None)]))
    try:
        if hasattr(args, "command_config"):
            args.client_config = command_config(args.command_config)
        return args.func(args)
    except UsageError as e:
        print(f"pyspark-kafka {name}: error: {e}", file=sys.stderr)
        return 2
    except CliError as e:
        print(f"pyspark-kafka {name}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `consume ... | head`: the reader left, not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130

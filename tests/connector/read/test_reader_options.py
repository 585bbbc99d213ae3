"""Reader option parsing and validation: every bad option fails with a message naming it and the fix.

Most cases call the parser directly (no Spark, no broker); a few go through Spark to show the
message reaches the user at load()/start, and `assign` of an unknown topic goes to the broker.
"""

from __future__ import annotations

import pytest

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import OptionError
from pyspark_kafka.read import (
    KafkaBatchReader,
    KafkaStreamReader,
    kafka_schema,
    parse_duration_ms,
    parse_reader_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}


def opts(**kw):
    out = dict(BASE)
    for k, v in kw.items():
        k = k.replace("__", ".")
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize(
    "options, mode, fragment",
    [
        (opts(**{"kafka__bootstrap__servers": None}), None, "option 'kafka.bootstrap.servers' is required"),
        (opts(subscribe=None), None, "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set, got none"),
        (opts(assign='{"t":[0]}'), None, "got options 'subscribe', 'assign'"),
        (opts(subscribe=" , "), None, "option 'subscribe' names no topic"),
        (opts(subscribe=None, subscribePattern=" "), None, "option 'subscribePattern' is empty"),
        (opts(subscribe=None, subscribePattern="a(b"), None, "'subscribePattern' is not a valid regular expression"),
        (opts(subscribe=None, assign="t:0"), None, "option 'assign' must be JSON"),
        (opts(subscribe=None, assign='{"t":"0"}'), None, "option 'assign' must map topics to lists"),
        (opts(startingOffsets='{"t":{"0":"x"}}'), None, "option 'startingOffsets' must map partitions to integers"),
        (opts(startingOffsets="{oops"), None, "option 'startingOffsets' must be a JSON object"),
        (opts(endingOffsets="[]"), None, "option 'endingOffsets' must be a JSON object"),
        (opts(startingTimestamp="now"), None, "option 'startingTimestamp' must be one timestamp"),
        (opts(maxOffsetsPerTrigger="-5"), None, "option 'maxOffsetsPerTrigger' must be >= 1, got -5"),
        (opts(maxOffsetsPerTrigger="lots"), None, "option 'maxOffsetsPerTrigger' must be an integer"),
        (opts(minOffsetsPerTrigger="0"), None, "option 'minOffsetsPerTrigger' must be >= 1"),
        (opts(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5"), None, "'minOffsetsPerTrigger' (10) is higher than 'maxOffsetsPerTrigger' (5)"),
        (opts(maxTriggerDelay="soon"), None, "option 'maxTriggerDelay' must be a duration"),
        (opts(minPartitions="0"), None, "option 'minPartitions' must be >= 1"),
        (opts(maxRecordsPerPartition="-1"), None, "option 'maxRecordsPerPartition' must be >= 1"),
        (opts(failOnDataLoss="maybe"), None, "option 'failOnDataLoss' must be 'true' or 'false'"),
        (opts(includeHeaders="yes"), None, "option 'includeHeaders' must be 'true' or 'false'"),
        (opts(startingOffsetsByTimestampStrategy="nearest"), None, "'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'"),
        (opts(**{"kafka__auto__offset__reset": "earliest"}), None, "'kafka.auto.offset.reset' is not supported: set the source option 'startingOffsets'"),
        (opts(**{"kafka__enable__auto__commit": "true"}), None, "'kafka.enable.auto.commit' is not supported"),
        (opts(**{"kafka__value__deserializer": "x"}), None, "'kafka.value.deserializer' is not supported"),
        (opts(**{"kafkaConsumer__pollTimeoutMs": "0"}), None, "option 'kafkaConsumer.pollTimeoutMs' must be >= 1"),
        # batch-only rules
        (opts(startingOffsets="latest"), "batch", "'startingOffsets' can't be 'latest' for batch queries"),
        (opts(startingOffsets='{"t":{"0":-1}}'), "batch", "for t-0 can't be latest (-1)"),
        (opts(endingOffsets="earliest"), "batch", "'endingOffsets' can't be 'earliest' for batch queries"),
        (opts(startingOffsets='{"t":{"0":7}}', endingOffsets='{"t":{"0":3}}'), "batch", "is greater than 'endingOffsets'"),
        # streaming-only rules
        (opts(endingOffsets="latest"), "stream", "option 'endingOffsets' is not valid in streaming queries"),
        (opts(endingOffsetsByTimestamp='{"t":{"0":1}}'), "stream", "'endingOffsetsByTimestamp' is not valid in streaming"),
        (opts(endingTimestamp="1"), "stream", "'endingTimestamp' is not valid in streaming"),
    ],
)
def test_bad_options_name_the_option(options, mode, fragment):
    with pytest.raises(OptionError) as exc:
        parse_reader_options(options, mode)
    assert fragment in str(exc.value)


def test_defaults_follow_spark():
    batch = parse_reader_options(BASE, "batch")
    stream = parse_reader_options(BASE, "stream")
    assert batch.starting == O.EarliestLimit() and batch.ending == O.LatestLimit()
    assert stream.starting == O.LatestLimit() and stream.ending is None
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    assert batch.max_trigger_delay_ms == 15 * 60_000
    assert batch.poll_timeout_ms == 120_000
    assert batch.max_offsets_per_trigger is None and batch.min_partitions is None


def test_option_names_are_case_insensitive():
    parsed = parse_reader_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "e-.*", "MAXOFFSETSPERTRIGGER": "7", "includeheaders": "TRUE"},
        "stream",
    )
    assert parsed.subscription.kind == "subscribePattern"
    assert parsed.max_offsets_per_trigger == 7 and parsed.include_headers is True


@pytest.mark.parametrize(
    "text, ms",
    [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("500", 500), ("2h", 7_200_000), ("1d", 86_400_000), ("3min", 180_000), ("1500us", 1)],
)
def test_parse_duration_ms(text, ms):
    assert parse_duration_ms(text, "maxTriggerDelay") == ms


@pytest.mark.parametrize(
    "cluster, options, expected",
    [
        ({"t": [0, 1], "u": [0]}, opts(subscribe="t,missing"), [("t", 0), ("t", 1)]),
        ({"e-1": [0], "e-2": [0, 1], "x-e-1": [0], "__e": [0]}, opts(subscribe=None, subscribePattern="e-.*"), [("e-1", 0), ("e-2", 0), ("e-2", 1)]),
        ({"t": [0, 1, 2]}, opts(subscribe=None, assign='{"t":[2,0]}'), [("t", 0), ("t", 2)]),
    ],
)
def test_subscription_selects_partitions(cluster, options, expected):
    assert parse_reader_options(options, None).subscription.select(cluster) == expected


@pytest.mark.parametrize(
    "assign, fragment",
    [('{"nope":[0]}', "names topic 'nope', which does not exist"), ('{"t":[5]}', "names partition t-5, but topic 't' has partitions [0, 1]")],
)
def test_assign_must_name_existing_partitions(assign, fragment):
    sub = parse_reader_options(opts(subscribe=None, assign=assign), None).subscription
    with pytest.raises(OptionError) as exc:
        sub.select({"t": [0, 1]})
    assert fragment in str(exc.value)


def test_custom_schema_is_rejected():
    with pytest.raises(OptionError, match="fixed schema"):
        KafkaBatchReader(BASE, kafka_schema(True))
    with pytest.raises(OptionError, match="fixed schema"):
        KafkaStreamReader(BASE, kafka_schema(True))


def test_assign_unknown_topic_fails_at_planning(bootstrap):
    reader = KafkaBatchReader(
        {"kafka.bootstrap.servers": bootstrap, "assign": '{"no-such-topic-xyz":[0]}'}, kafka_schema(False)
    )
    with pytest.raises(OptionError, match="'assign' names topic 'no-such-topic-xyz', which does not exist"):
        reader.partitions()


def test_explicit_starting_offsets_must_cover_every_partition(bootstrap, make_topic):
    topic = make_topic(partitions=2)
    reader = KafkaBatchReader(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": f'{{"{topic}":{{"0":0}}}}'},
        kafka_schema(False),
    )
    with pytest.raises(OptionError, match=f"must name every subscribed topic-partition.*{topic}-1"):
        reader.partitions()


def test_secrets_never_appear_in_client_errors(bootstrap):
    reader = KafkaBatchReader(
        {**opts(subscribe="t"), "kafka.bootstrap.servers": bootstrap, "kafka.sasl.password": "hunter2", "kafka.no.such.setting": "1"},
        kafka_schema(False),
    )
    with pytest.raises(OptionError) as exc:
        reader.partitions()
    message = str(exc.value)
    assert "no.such.setting" in message and "hunter2" not in message and "[redacted]" in message


def test_bad_consumer_setting_fails_on_the_driver(bootstrap):
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": "t", "kafka.isolation.level": "sometimes"}
    with pytest.raises(OptionError, match="cannot create a Kafka consumer.*isolation.level"):
        KafkaBatchReader(options, kafka_schema(False)).partitions()
    stream = KafkaStreamReader(options, kafka_schema(False))
    try:
        with pytest.raises(OptionError, match="isolation.level"):
            stream.initialOffset()
    finally:
        stream.stop()


def test_option_errors_reach_the_user_through_spark(spark, bootstrap):
    def reader():
        return spark.read.format("pykafka").option("kafka.bootstrap.servers", bootstrap)

    with pytest.raises(Exception, match="exactly one of the options 'subscribe', 'subscribePattern', 'assign'"):
        reader().option("subscribe", "a").option("assign", '{"a":[0]}').load()
    with pytest.raises(Exception, match="'startingOffsets' can't be 'latest' for batch queries"):
        reader().option("subscribe", "a").option("startingOffsets", "latest").load().collect()
    stream = spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "a")
    with pytest.raises(Exception, match="'endingOffsets' is not valid in streaming queries"):
        query = stream.option("endingOffsets", "latest").load().writeStream.format("noop").start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


def test_executor_consumers_get_a_generated_group_or_kafka_group_id():
    from pyspark_kafka.read import executor_conf

    generated = executor_conf(BASE, "spark-kafka-relation-123-executor")
    assert generated["group.id"] == "spark-kafka-relation-123-executor"
    assert generated["enable.auto.commit"] is False and generated["auto.offset.reset"] == "error"
    assert generated["isolation.level"] == "read_uncommitted"  # the Java client's default, not librdkafka's
    assert generated["fetch.wait.max.ms"] == 20
    chosen = executor_conf(
        {**BASE, "kafka.group.id": "mine", "kafka.isolation.level": "read_committed", "kafka.fetch.wait.max.ms": "100"},
        "ignored",
    )
    assert chosen["group.id"] == "mine" and chosen["isolation.level"] == "read_committed"
    assert chosen["fetch.wait.max.ms"] == "100"
    reader = KafkaBatchReader({**BASE, "groupIdPrefix": "team-a"}, kafka_schema(False))
    assert reader._conf["group.id"].startswith("team-a-") and reader._conf["group.id"].endswith("-executor")

"""Table-driven tests of the pure offset rules (pyspark_kafka.offsets), checked against Spark's behaviour."""

from __future__ import annotations

import pytest

from pyspark_kafka import offsets as O
from pyspark_kafka.errors import OptionError


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"t":{"0":23,"1":-2}}', {("t", 0): 23, ("t", 1): -2}),
        ('{"a":{"0":-1},"b":{"3":7}}', {("a", 0): -1, ("b", 3): 7}),
        ("{}", {}),
        (' {"t" : { "10" : 5 } } ', {("t", 10): 5}),
    ],
)
def test_parse_partition_offsets(text, expected):
    assert O.parse_partition_offsets(text) == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("not json", "must be a JSON object"),
        ("[1,2]", "must be a JSON object"),
        ('{"t":[0,1]}', "must be a JSON object"),
        ('{"t":{"x":1}}', "'x' of topic 't' is not a partition number"),
        ('{"t":{"-1":1}}', "is not a partition number"),
        ('{"t":{"0":"5"}}', "must map partitions to integers"),
        ('{"t":{"0":1.5}}', "must map partitions to integers"),
        ('{"t":{"0":true}}', "must map partitions to integers"),
    ],
)
def test_parse_partition_offsets_rejects(text, fragment):
    with pytest.raises(OptionError, match="'startingOffsets'") as exc:
        O.parse_partition_offsets(text, "startingOffsets")
    assert fragment in str(exc.value)
    assert '{"topicA":{"0":23' in str(exc.value)  # shows the expected form


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a":[1,0],"b":[2]}', [("a", 0), ("a", 1), ("b", 2)]),
        ('{"a":[0,0]}', [("a", 0)]),
    ],
)
def test_parse_assign(text, expected):
    assert O.parse_assign(text) == expected


@pytest.mark.parametrize("text", ['{"a":0}', '{"a":["0"]}', '{"a":[-1]}', "{}", '{"a":[]}', "x"])
def test_parse_assign_rejects(text):
    with pytest.raises(OptionError, match="option 'assign'"):
        O.parse_assign(text)


def test_offset_json_round_trip_is_sorted_and_stringly_keyed():
    offsets = {("b", 1): 7, ("a", 10): 3, ("a", 2): 5}
    as_json = O.offsets_to_json_dict(offsets)
    assert as_json == {"a": {"2": 5, "10": 3}, "b": {"1": 7}}
    assert list(as_json) == ["a", "b"] and list(as_json["a"]) == ["2", "10"]
    assert O.offsets_from_json_dict(as_json) == offsets


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, O.EarliestLimit()),
        ({"startingOffsets": "latest"}, O.LatestLimit()),
        ({"STARTINGOFFSETS": " Earliest "}, O.EarliestLimit()),
        ({"startingOffsets": '{"t":{"0":5}}'}, O.SpecificOffsets({("t", 0): 5})),
        # Spark's precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets
        (
            {"startingOffsets": "latest", "startingOffsetsByTimestamp": '{"t":{"0":100}}'},
            O.SpecificTimestamps({("t", 0): 100}, "error"),
        ),
        (
            {"startingOffsetsByTimestamp": '{"t":{"0":100}}', "startingTimestamp": "200", "startingOffsets": "latest"},
            O.GlobalTimestamp(200, "error"),
        ),
        (
            {"startingTimestamp": "200", "startingOffsetsByTimestampStrategy": "LATEST"},
            O.GlobalTimestamp(200, "latest"),
        ),
    ],
)
def test_offset_limit_precedence(options, expected):
    assert O.offset_limit(options, "starting", O.EarliestLimit()) == expected


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"startingTimestamp": "yesterday"}, "'startingTimestamp' must be one timestamp"),
        ({"startingOffsetsByTimestamp": "{bad"}, "'startingOffsetsByTimestamp' must be a JSON object"),
        ({"startingOffsets": "earliest-ish"}, "'startingOffsets' must be a JSON object"),
        ({"startingOffsetsByTimestampStrategy": "closest"}, "must be 'error' or 'latest'"),
    ],
)
def test_offset_limit_rejects(options, fragment):
    with pytest.raises(OptionError) as exc:
        O.offset_limit(options, "starting", O.EarliestLimit())
    assert fragment in str(exc.value)


@pytest.mark.parametrize(
    "start, end, fragment",
    [
        (O.LatestLimit(), O.LatestLimit(), "'startingOffsets' can't be 'latest' for batch"),
        (O.SpecificOffsets({("t", 0): -1}), O.LatestLimit(), "for t-0 can't be latest (-1)"),
        (O.EarliestLimit(), O.EarliestLimit(), "'endingOffsets' can't be 'earliest' for batch"),
        (O.EarliestLimit(), O.SpecificOffsets({("t", 0): -2}), "for t-0 can't be earliest (-2)"),
        (O.SpecificOffsets({("t", 0): 1}), O.SpecificOffsets({("t", 1): 5}), "must name the same topic-partitions"),
        (O.SpecificOffsets({("t", 0): 9}), O.SpecificOffsets({("t", 0): 5}), "(9) is greater than 'endingOffsets' (5)"),
        (
            O.SpecificTimestamps({("t", 0): 9}),
            O.SpecificTimestamps({("t", 0): 5}),
            "'startingOffsetsByTimestamp' for t-0 (9) is greater",
        ),
    ],
)
def test_check_batch_limits_rejects(start, end, fragment):
    with pytest.raises(OptionError) as exc:
        O.check_batch_limits(start, end)
    assert fragment in str(exc.value)


@pytest.mark.parametrize(
    "start, end",
    [
        (O.EarliestLimit(), O.LatestLimit()),
        (O.SpecificOffsets({("t", 0): -2}), O.SpecificOffsets({("t", 0): -1})),  # markers are not compared
        (O.SpecificOffsets({("t", 0): 5}), O.SpecificOffsets({("t", 0): 5})),
        (O.GlobalTimestamp(1), O.SpecificOffsets({("t", 0): 5})),
    ],
)
def test_check_batch_limits_accepts(start, end):
    O.check_batch_limits(start, end)


def test_check_covers_partitions():
    O.check_covers_partitions({("t", 0), ("t", 1)}, [("t", 1), ("t", 0)], "startingOffsets")
    with pytest.raises(OptionError, match=r"specified \[t-0\], subscribed \[t-0, t-1\]"):
        O.check_covers_partitions({("t", 0)}, [("t", 0), ("t", 1)], "startingOffsets")


@pytest.mark.parametrize(
    "found, starting, strategy, expected",
    [
        (42, True, "error", 42),
        (-1, True, "latest", O.LATEST),
        (-1, False, "error", O.LATEST),  # ending offsets fall back to latest, as Spark
    ],
)
def test_resolve_timestamp_offset(found, starting, strategy, expected):
    assert O.resolve_timestamp_offset(("t", 0), found, 1000, starting, strategy) == expected


def test_resolve_timestamp_offset_no_match_is_an_error_by_default():
    with pytest.raises(OptionError, match="t-0 has a timestamp at or after 1000.*startingOffsetsByTimestampStrategy=latest"):
        O.resolve_timestamp_offset(("t", 0), -1, 1000, True, "error")


def R(t, p, a, b):
    return O.OffsetRange(t, p, a, b)


def test_plan_ranges_new_partition_starts_at_earliest():
    losses = []
    ranges = O.plan_ranges({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 1): 0}, losses.append)
    assert ranges == [R("t", 0, 5, 9), R("t", 1, 0, 4)]
    assert losses == []


@pytest.mark.parametrize(
    "start, until, earliest, fragment, expected",
    [
        ({}, {("t", 1): 9}, {("t", 1): 3}, "added partition t-1 starts from offset 3", [R("t", 1, 3, 9)]),
        ({}, {("t", 1): 9}, {}, "cannot find earliest offsets of new partitions [t-1]", []),
        ({("t", 0): 5, ("u", 0): 1}, {("t", 0): 5}, {}, "partitions [u-0] are gone", [R("t", 0, 5, 5)]),
        ({("t", 0): 50}, {("t", 0): 10}, {}, "t-0's offset went back from 50 to 10", [R("t", 0, 10, 10)]),
    ],
)
def test_plan_ranges_reports_data_loss(start, until, earliest, fragment, expected):
    losses = []
    assert O.plan_ranges(start, until, earliest, losses.append) == expected
    assert len(losses) == 1 and fragment in losses[0]


def test_plan_ranges_rereads_a_recreated_partition_from_earliest():
    losses = []
    ranges = O.plan_ranges({("t", 0): 50}, {("t", 0): 10}, {}, losses.append, earliest={("t", 0): 0})
    assert ranges == [R("t", 0, 0, 10)]
    assert "reading it again from offset 0" in losses[0]


def test_plan_ranges_data_loss_can_raise():
    def fail(msg):
        raise RuntimeError(msg)

    with pytest.raises(RuntimeError, match="went back"):
        O.plan_ranges({("t", 0): 50}, {("t", 0): 10}, {}, fail)


@pytest.mark.parametrize(
    "ranges, min_parts, max_recs, expected",
    [
        # no options: one input partition per non-empty range
        ([R("t", 0, 1, 4), R("t", 1, 3, 3)], None, None, [R("t", 0, 1, 4)]),
        ([R("t", 0, 1, 4), R("t", 1, 1, 4)], 2, None, [R("t", 0, 1, 4), R("t", 1, 1, 4)]),
        # Spark's KafkaOffsetRangeCalculatorSuite: one range into minPartitions pieces
        ([R("t", 0, 1, 4)], 3, None, [R("t", 0, 1, 2), R("t", 0, 2, 3), R("t", 0, 3, 4)]),
        # skewed ranges (SPARK-36576): 4/24*3 = 0.5 rounds half up to 1, so t-1 stays whole and t-2
        # gets the other 3 - 1 = 2 pieces (not round(20/24*3) = 3)
        (
            [R("t", 1, 1, 5), R("t", 2, 1, 21)],
            3,
            None,
            [R("t", 1, 1, 5), R("t", 2, 1, 11), R("t", 2, 11, 21)],
        ),
        # measured on Spark 4.2.0 (integration_tests/reference, partitions_min_and_max_records): pieces
        # of at most 3 (a: 2+3 per partition, b: 3), then minPartitions=12: the 2-record pieces stay
        # whole and so do their partitions' 3-record pieces; b's pieces get round(3/15*9) = 2 -> 10
        (
            [R("a", p, 0, 5) for p in range(3)] + [R("b", p, 0, 3) for p in range(2)],
            12,
            3,
            [x for p in range(3) for x in (R("a", p, 0, 2), R("a", p, 2, 5))]
            + [x for p in range(2) for x in (R("b", p, 0, 1), R("b", p, 1, 3))],
        ),
        # maxRecordsPerPartition: ceil(100/30) = 4 pieces of 25
        ([R("t", 0, 0, 100)], None, 30, [R("t", 0, 0, 25), R("t", 0, 25, 50), R("t", 0, 50, 75), R("t", 0, 75, 100)]),
        # both: pieces of at most 50, then minPartitions splits further
        (
            [R("t", 0, 0, 100)],
            4,
            50,
            [R("t", 0, 0, 25), R("t", 0, 25, 50), R("t", 0, 50, 75), R("t", 0, 75, 100)],
        ),
        # last piece takes the remainder
        ([R("t", 0, 0, 10)], 3, None, [R("t", 0, 0, 3), R("t", 0, 3, 6), R("t", 0, 6, 10)]),
    ],
)
def test_split_ranges(ranges, min_parts, max_recs, expected):
    assert O.split_ranges(ranges, min_parts, max_recs) == expected


@pytest.mark.parametrize(
    "limit, start, until, expected",
    [
        # proportional to backlog, rounded down
        (10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 100}, {("t", 0): 5, ("t", 1): 5}),
        (30, {("t", 0): 0, ("t", 1): 50}, {("t", 0): 100, ("t", 1): 100}, {("t", 0): 20, ("t", 1): 60}),
        # a share below 1 is rounded up: small partitions are not starved
        (10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 1}, {("t", 0): 9, ("t", 1): 1}),
        # never past the end; partitions without backlog keep their end
        (1000, {("t", 0): 0, ("t", 1): 7}, {("t", 0): 10, ("t", 1): 7}, {("t", 0): 10, ("t", 1): 7}),
        # nothing to read
        (10, {("t", 0): 4}, {("t", 0): 4}, {("t", 0): 4}),
        # unknown start (should not happen) keeps the end
        (10, {("t", 0): 0}, {("t", 0): 100, ("t", 9): 50}, {("t", 0): 10, ("t", 9): 50}),
    ],
)
def test_rate_limit(limit, start, until, expected):
    assert O.rate_limit(limit, start, until) == expected


def test_rate_limit_total_never_exceeds_limit_by_more_than_partition_count():
    start = {("t", p): 0 for p in range(7)}
    until = {("t", p): 1000 + 37 * p for p in range(7)}
    end = O.rate_limit(100, start, until)
    total = sum(end[tp] - start[tp] for tp in start)
    assert 100 - 7 <= total <= 100


@pytest.mark.parametrize(
    "available, min_rows, now, last, max_delay, expected",
    [
        (5, 10, 1_000, 0, 60_000, True),  # too few, delay not over
        (10, 10, 1_000, 0, 60_000, False),  # enough
        (5, 10, 60_000, 0, 60_000, False),  # delay over: run anyway
        (0, 10, 61_000, 1_000, 60_000, False),
        (0, 10, 60_999, 1_000, 60_000, True),
    ],
)
def test_should_delay_batch(available, min_rows, now, last, max_delay, expected):
    assert O.should_delay_batch(available, min_rows, now, last, max_delay) is expected


def test_available_records_counts_new_partitions_from_zero():
    assert O.available_records({("t", 0): 5}, {("t", 0): 8, ("t", 1): 4}) == 7

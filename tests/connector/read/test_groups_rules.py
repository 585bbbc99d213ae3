"""Table-driven tests of the consumer-group rules in pyspark_kafka.groups (pure functions, no I/O)."""

from __future__ import annotations

import re

import pytest

from pyspark_kafka.read import consumer_group as G
from pyspark_kafka import offsets as O
from pyspark_kafka.errors import OptionError
from pyspark_kafka.read import parse_reader_options

A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)


@pytest.mark.parametrize(
    "processed, committed, expected",
    [
        ({A0: 5, A1: 7}, {}, {A0: 5, A1: 7}),  # nothing committed yet
        ({A0: 5, A1: 7}, {A0: 5, A1: None}, {A1: 7}),  # unchanged partitions are left alone
        ({A0: 5, A1: 7}, {A0: 9, A1: 3}, {A1: 7}),  # never backwards: the group is ahead on a-0
        ({A0: -1}, {}, {}),  # a negative offset is never committed
    ],
)
def test_offsets_to_commit_never_moves_backwards(processed, committed, expected):
    assert G.offsets_to_commit(processed, committed) == expected


def _start(committed, reset="latest", losses=None):
    earliest, latest = {A0: 10, A1: 0, A2: 0}, {A0: 50, A1: 20, A2: 30}
    report = (losses.append if losses is not None else _fail)
    return G.group_start_offsets(committed, earliest, latest, reset, "g", report)


def _fail(msg):
    raise AssertionError(msg)


@pytest.mark.parametrize(
    "committed, reset, expected",
    [
        ({A0: 12, A1: 5, A2: 30}, "latest", {A0: 12, A1: 5, A2: 30}),  # every partition from its commit
        ({A0: 12}, "latest", {A0: 12, A1: 20, A2: 30}),  # no commit: kafka.auto.offset.reset=latest
        ({A0: 12, A1: None}, "earliest", {A0: 12, A1: 0, A2: 0}),  # no commit: earliest (log start offset)
    ],
)
def test_group_start_offsets(committed, reset, expected):
    assert _start(committed, reset) == expected


def test_group_start_without_commit_and_reset_none_names_the_partitions():
    with pytest.raises(OptionError, match=r"group 'g' has no committed offset for a-1, a-2 and kafka.auto.offset.reset is 'none'"):
        _start({A0: 12}, "none")


def test_group_start_outside_the_log_is_data_loss_then_clamped():
    losses = []
    got = _start({A0: 3, A1: 25, A2: 30}, "latest", losses)
    assert got == {A0: 10, A1: 20, A2: 30}
    assert "committed offset 3 for a-0, below the log start offset [10, 50]" in losses[0]
    assert "committed offset 25 for a-1, above the latest offset" in losses[1]
    assert len(losses) == 2


@pytest.mark.parametrize(
    "begin, owned, continuing, adopt, reading, adopted, released",
    [
        # steady state: read every owned partition from begin
        ({A0: 5, A1: 7}, {A0, A1}, {A0, A1}, {}, [A0, A1], {}, []),
        # a partition revoked: left out of the end offsets
        ({A0: 5, A1: 7}, {A0}, {A0}, {}, [A0], {}, [A1]),
        # a newly assigned partition enters at the group's offset (empty range), read from the next batch
        ({A0: 5}, {A0, A1}, {A0}, {A1: 40}, [A0], {A1: 40}, []),
        # owned again (or after a restart) and the group agrees with begin: keep reading
        ({A0: 5, A1: 7}, {A0, A1}, {A0}, {A1: 7}, [A0, A1], {}, []),
        # owned again but another member moved the group on: release now, adopt next batch
        ({A0: 5, A1: 7}, {A0, A1}, {A0}, {A1: 30}, [A0], {}, [A1]),
        # not assigned yet (joining): nothing
        ({}, set(), set(), {}, [], {}, []),
    ],
)
def test_member_plan(begin, owned, continuing, adopt, reading, adopted, released):
    assert G.needs_adoption(begin, owned, continuing) == sorted(adopt)
    plan = G.member_plan(begin, owned, continuing, adopt)
    assert (plan.reading, plan.adopted, plan.released) == (reading, adopted, released)


BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}


@pytest.mark.parametrize(
    "extra, mode, message",
    [
        ({"commitOffsets": "true"}, "stream", "option commitOffsets=true needs 'kafka.group.id'"),
        ({"startingOffsets": "group"}, "batch", "option startingOffsets=group needs 'kafka.group.id'"),
        ({"groupMembership": "true"}, "stream", "option groupMembership=true needs 'kafka.group.id'"),
        ({"kafka.group.id": "g", "commitOffsets": "true"}, "batch", "Use pyspark_kafka.groups.read_batch"),
        ({"kafka.group.id": "g", "groupMembership": "true"}, "batch", "'groupMembership' is not supported by spark.read"),
        ({"kafka.group.id": "g", "groupMembership": "true", "commitOffsets": "false"}, "stream",
         "groupMembership=true and commitOffsets=false can't be combined"),
        ({"kafka.group.id": "g", "groupMembership": "true", "startingOffsets": "earliest"}, "stream",
         "'startingOffsets' can't be used with groupMembership=true"),
        ({"kafka.group.id": "g", "kafka.auto.offset.reset": "earliest"}, "stream",
         "'kafka.auto.offset.reset' is not supported: set the source option 'startingOffsets'"),
        ({"kafka.group.id": "g", "startingOffsets": "group", "kafka.auto.offset.reset": "oldest"}, "stream",
         "must be 'earliest', 'latest' or 'none', got 'oldest'"),
        ({"kafka.group.id": "g", "endingOffsets": "group"}, "batch", "'endingOffsets' can't be 'group'"),
        ({"kafka.group.id": "g", "commitOffsets": "yes"}, "stream", "'commitOffsets' must be 'true' or 'false'"),
    ],
)
def test_group_option_errors_name_the_option_and_the_fix(extra, mode, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        parse_reader_options({**BASE, **extra}, mode=mode)


def test_group_membership_needs_subscribe_or_pattern():
    opts = {"kafka.bootstrap.servers": "127.0.0.1:9", "assign": '{"t":[0]}', "kafka.group.id": "g",
            "groupMembership": "true"}
    with pytest.raises(OptionError, match="needs 'subscribe' or 'subscribePattern'"):
        parse_reader_options(opts, mode="stream")


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({}, G.GroupOptions()),
        ({"kafka.group.id": "g", "commitOffsets": "true"}, G.GroupOptions("g", commit_offsets=True)),
        ({"kafka.group.id": "g", "startingOffsets": "group", "kafka.auto.offset.reset": "smallest"},
         G.GroupOptions("g", start_from_group=True, offset_reset="earliest")),
        # membership commits by default and starts from the group
        ({"kafka.group.id": "g", "groupMembership": "true", "kafka.auto.offset.reset": "none"},
         G.GroupOptions("g", commit_offsets=True, membership=True, offset_reset="none")),
    ],
)
def test_group_options_parsed(extra, expected):
    assert parse_reader_options({**BASE, **extra}, mode="stream").group == expected


def test_starting_offsets_group_is_a_limit_only_for_starting():
    assert O.offset_limit({"startingOffsets": "GROUP"}, "starting", O.EarliestLimit()) == O.GroupLimit()

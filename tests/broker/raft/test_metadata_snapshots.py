"""Metadata log snapshots (KIP-630): written when due, loaded on restart so only the tail is replayed, refused
when torn or corrupt (fallback to an older snapshot or the log), and whole: the image from snapshot + tail equals
the image replayed from offset 0. In-process logs (the one-voter log and a one-voter Raft quorum); the image
equality on a real cluster run is in ``tests/broker/cluster/test_cluster_snapshots.py``."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pyspark_kafka.broker.controller.image import ClusterImage, decode, encode
from pyspark_kafka.broker.controller.metadata_snapshot import image_from_snapshot, metadata_snapshots
from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog
from pyspark_kafka.broker.raft import RaftMetadataLog
from pyspark_kafka.broker.raft.storage import MetadataLogStorage
from pyspark_kafka.broker.controller.snapshots import (
    SnapshotError, SnapshotPolicy, SnapshotStore, decode_snapshot, encode_snapshot, snapshot_name,
)
from support.raft import FAST, free_ports

#: every record type of the metadata image, with changes over time (configs replaced, ACL removed, SCRAM
#: credential replaced and removed, fencing)
def history() -> list[dict]:
    acl = {"type": "acl", "resource_type": 2, "resource_name": "t", "pattern_type": 3, "principal": "User:a",
           "host": "*", "operation": 3, "permission_type": 3}
    scram = {"type": "scram_credential", "mechanism": 1, "salt": "c2FsdA==", "stored_key": "c3Q=",
             "server_key": "c2Y=", "iterations": 4096}
    return [
        {"type": "broker", "id": 0, "epoch": 0, "host": "127.0.0.1", "port": 9092},
        {"type": "broker", "id": 1, "epoch": 1, "host": "127.0.0.1", "port": 9093},
        {"type": "unfence", "id": 0, "epoch": 0},
        {"type": "unfence", "id": 1, "epoch": 1},
        {"type": "topic", "name": "t", "topic_id": "id-t", "configs": {"cleanup.policy": "compact"}},
        {"type": "partition", "topic": "t", "partition": 0, "replicas": [0, 1], "isr": [0, 1], "leader": 0,
         "leader_epoch": 0, "partition_epoch": 0},
        {"type": "topic", "name": "gone", "topic_id": "id-g", "configs": {}},
        {"type": "partition", "topic": "gone", "partition": 0, "replicas": [1], "isr": [1], "leader": 1,
         "leader_epoch": 0, "partition_epoch": 0},
        {"type": "config", "name": "t", "configs": {"retention.ms": "1000"}},
        {"type": "dynamic_config", "resource": "broker", "name": "", "configs": {"log.retention.ms": "5"}},
        {"type": "dynamic_config", "resource": "group", "name": "g", "configs": {"x": "1"}},
        dict(acl, id="a1"), dict(acl, id="a2", principal="User:b"),
        {"type": "remove_acl", "id": "a1"},
        dict(scram, name="alice"), dict(scram, name="bob"), dict(scram, name="bob", mechanism=2),
        dict(scram, name="alice", iterations=8192),  # a new password
        {"type": "remove_scram_credential", "name": "bob", "mechanism": 1},
        {"type": "producer_ids", "broker": 0, "next": 2000},
        {"type": "fence", "id": 1, "epoch": 1},
        {"type": "partition", "topic": "t", "partition": 0, "replicas": [0, 1], "isr": [0], "leader": 0,
         "leader_epoch": 0, "partition_epoch": 1},
        {"type": "partition", "topic": "t", "partition": 1, "replicas": [1, 0], "isr": [0], "leader": 0,
         "leader_epoch": 1, "partition_epoch": 0, "adding": [1], "removing": []},
        {"type": "remove_topic", "name": "gone", "topic_id": "id-g"},
        {"type": "broker", "id": 1, "epoch": 19, "host": "127.0.0.1", "port": 9095},
        # finalized feature levels (Kafka's FeatureLevelRecord); level 0 removes one
        {"type": "feature", "name": "metadata.version", "level": 33},
        {"type": "feature", "name": "group.version", "level": 1},
        {"type": "feature", "name": "x.version", "level": 2},
        {"type": "feature", "name": "x.version", "level": 0},
    ]


def replay(records: list[bytes]) -> ClusterImage:
    image = ClusterImage()
    for offset, raw in enumerate(records):
        image.apply(offset, decode(raw))
    return image


def test_image_from_snapshot_records_equals_the_full_replay_at_every_offset():
    """0.01 s. For every prefix of the history: snapshot records of the replayed image rebuild an equal image."""
    records = [encode(r) for r in history()]
    for end in range(len(records) + 1):
        full = replay(records[:end])
        snap = image_from_snapshot(end, [encode(r) for r in full.snapshot_records()])
        assert snap.same_as(full), end
        tail = records[end:]
        for offset, raw in enumerate(tail, start=end):  # snapshot + tail == whole replay
            snap.apply(offset, decode(raw))
        assert snap.same_as(replay(records)), end


def test_snapshot_file_format_refuses_torn_and_corrupt_files(tmp_path):
    """0.01 s."""
    data = encode_snapshot(42, 3, [b"a", b"", b"xyz"])
    assert decode_snapshot(data) == (42, 3, [b"a", b"", b"xyz"])
    assert snapshot_name(42, 3) == "00000000000000000042-0000000003.checkpoint"  # Kafka's naming
    for bad, cause in ((data[:-1], "not a whole"), (data[:10], "shorter"),
                       (data[:20] + bytes([data[20] ^ 1]) + data[21:], "checksum")):
        with pytest.raises(SnapshotError, match=cause):
            decode_snapshot(bad)


def test_every_field_of_a_snapshot_file_damaged_behind_a_valid_checksum_is_refused():
    """The checks behind the CRC: each header and length field set to a value that cannot be right, the CRC
    recomputed, so only the structural check can refuse it. 0.01 s."""
    import struct
    import zlib

    def with_crc(body: bytes) -> bytes:
        return body + struct.pack(">I", zlib.crc32(body)) + b"PKSNAPOK"

    good = encode_snapshot(42, 3, [b"a", b"", b"xyz"])
    body = bytearray(good[:-12])
    cases = {
        "count negative": (20, -1, "record count"),
        "count past the file": (20, 1000, "record count"),
        "count one short": (20, 2, "bytes after"),
        "count one more": (20, 4, "record count|no room"),
        "first length negative": (24, -1, "overruns"),
        "first length past the file": (24, 2**31 - 1, "overruns"),
        "last length one long": (24 + 4 + 1 + 4 + 0, 4, "overruns"),
    }
    for name, (at, value, cause) in cases.items():
        bad = bytearray(body)
        bad[at:at + 4] = struct.pack(">i", value)
        with pytest.raises(SnapshotError, match=cause):
            decode_snapshot(with_crc(bytes(bad)))
    bad = bytearray(body)
    bad[8:16] = struct.pack(">q", -5)  # end offset
    with pytest.raises(SnapshotError, match="end offset"):
        decode_snapshot(with_crc(bytes(bad)))
    with pytest.raises(SnapshotError, match="not a whole"):
        decode_snapshot(with_crc(b"XXSNAP01" + bytes(body[8:])))  # magic
    with pytest.raises(SnapshotError, match="no room|record count"):
        decode_snapshot(with_crc(bytes(body[:24])))  # records cut off, count kept


def test_snapshot_reader_survives_coverage_guided_fuzzing(tmp_path):
    """``tests/support/fuzz_snapshots.py`` (atheris), 20,000 inputs, fixed seed, a few seconds: no input may
    make ``decode_snapshot`` raise anything but SnapshotError or accept bytes our writer would not write."""
    from pathlib import Path

    from support.libfuzzer import run_bounded

    target = Path(__file__).resolve().parents[2] / "support" / "fuzz_snapshots.py"
    run_bounded(target, tmp_path, 20000, 20261129, ["-timeout=20", "-rss_limit_mb=2048"])


def test_policy_reads_kafka_names_and_defaults():
    """0.00 s. Kafka 4.4's MetadataLogConfig: 20 MiB of new record bytes, or one hour."""
    assert SnapshotPolicy.from_config({}) == SnapshotPolicy(20971520, 3600000)
    policy = SnapshotPolicy.from_config({"metadata.log.max.record.bytes.between.snapshots": "100",
                                         "metadata.log.max.snapshot.interval.ms": "0"})
    assert (policy.due(99, 1e9), policy.due(100, 0)) == (False, True)
    assert SnapshotPolicy(10**9, 50).due(1, 60) and not SnapshotPolicy(10**9, 50).due(0, 60)
    with pytest.raises(ValueError, match="metadata.log.max.record.bytes.between.snapshots='x' is not an integer"):
        SnapshotPolicy.from_config({"metadata.log.max.record.bytes.between.snapshots": "x"})


SMALL = {"metadata.log.max.record.bytes.between.snapshots": "2000"}


async def _voter_run(data_dir, records: list[bytes]) -> None:
    log = SingleVoterMetadataLog(0, data_dir, 0, snapshots=metadata_snapshots(data_dir / "__cluster_metadata-0", SMALL))
    await log.start()
    for raw in records:
        await log.append([raw])
    await log.stop()


async def _voter_restart(data_dir) -> tuple[SingleVoterMetadataLog, ClusterImage]:
    log = SingleVoterMetadataLog(0, data_dir, 0, snapshots=metadata_snapshots(data_dir / "__cluster_metadata-0", SMALL))
    await log.start()
    image = ClusterImage()
    log.subscribe(lambda offset, raw: image.apply(offset, decode(raw)))
    await log.stop()
    return log, image


def _many() -> list[bytes]:
    base = history()
    return [encode(r) for r in base] + [encode({"type": "dynamic_config", "resource": "broker", "name": str(i % 3),
                                                "configs": {"k": str(i)}}) for i in range(400)]


def test_one_voter_log_writes_snapshots_and_restart_replays_only_the_tail(tmp_path):
    """0.3 s. 420 records, a snapshot every ~2000 bytes: a restart replays at most the records after the newest
    snapshot (counted), and the image equals the full replay."""
    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    store = SnapshotStore(tmp_path / "__cluster_metadata-0")
    assert len(store.paths()) == 2  # the newest two are kept
    newest = store.load_latest()
    log, image = asyncio.run(_voter_restart(tmp_path))
    assert log.snapshots.loaded.end_offset == newest.end_offset > 0
    assert log.replayed_records == len(records) - newest.end_offset
    assert log.replayed_records <= 2000 // min(len(r) for r in records) + 1  # bounded by the snapshot interval
    assert image.same_as(replay(records))


def test_corrupt_newest_snapshot_falls_back_to_the_older_one_then_to_the_log(tmp_path, caplog):
    """0.3 s. A flipped byte in the newest snapshot: refused with an ERROR naming the file, the older one used;
    both damaged (one torn): the whole log is replayed. The image is right every time."""
    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    newest, older = SnapshotStore(tmp_path / "__cluster_metadata-0").paths()
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, "pyspark_kafka.metadata_snapshots"):
        log, image = asyncio.run(_voter_restart(tmp_path))
    assert f"{newest}: checksum mismatch" in caplog.text and "falling back" in caplog.text
    assert log.snapshots.loaded.path == older
    assert image.same_as(replay(records))
    newest, older = SnapshotStore(tmp_path / "__cluster_metadata-0").paths()  # the restart wrote none (no new bytes)
    older.write_bytes(older.read_bytes()[:-5])  # torn
    newest.write_bytes(b"")
    caplog.clear()
    with caplog.at_level(logging.ERROR, "pyspark_kafka.metadata_snapshots"):
        log, image = asyncio.run(_voter_restart(tmp_path))
    assert caplog.text.count("metadata snapshot refused") == 2
    assert log.snapshots.loaded is None and log.replayed_records == len(records)
    assert image.same_as(replay(records))


def test_raft_voter_writes_snapshots_and_restart_replays_only_the_tail(tmp_path):
    """About 2 s. A one-voter Raft quorum (the Raft client's own commit and delivery path): snapshots written with
    the leader epoch in their name; after a restart the listener sees the snapshot then only the tail, and the
    image equals the full replay."""
    records = _many()
    voters = f"0@127.0.0.1:{free_ports(1)[0]}"
    config = {"node.id": "0", "controller.quorum.voters": voters, **FAST}

    async def run() -> None:
        log = RaftMetadataLog(tmp_path, config, snapshots=metadata_snapshots(tmp_path / "__cluster_metadata-0", SMALL))
        await log.start()
        for _ in range(200):
            if log.leader()[0] == 0:
                break
            await asyncio.sleep(0.02)
        for raw in records:
            for _ in range(200):  # until the controller's epoch is committed
                try:
                    await log.append([raw])
                    break
                except Exception:
                    await asyncio.sleep(0.02)
        await log.stop()

    async def restart() -> tuple[RaftMetadataLog, ClusterImage, list]:
        log = RaftMetadataLog(tmp_path, config, snapshots=metadata_snapshots(tmp_path / "__cluster_metadata-0", SMALL))
        image, offsets = ClusterImage(), []
        log.subscribe(lambda offset, raw: (offsets.append(offset), image.apply(offset, decode(raw))))
        await log.start()
        for _ in range(300):  # until it leads again and its new epoch's LeaderChange batch is committed
            if log.leader()[0] == 0 and log.committed_offset() == log.storage.end_offset:
                break
            await asyncio.sleep(0.02)
        await log.stop()
        return log, image, offsets

    asyncio.run(run())
    paths = SnapshotStore(tmp_path / "__cluster_metadata-0").paths()
    assert paths and paths[0].name.endswith("-0000000001.checkpoint")  # leader epoch 1
    log, image, offsets = asyncio.run(restart())
    end = log.snapshots.loaded.end_offset
    # offsets: the leader change batches take offsets, so the records' offsets are not 0..n-1: compare by content
    storage = MetadataLogStorage(tmp_path)
    full = ClusterImage()
    for offset, raw in storage.records(0, storage.end_offset):
        full.apply(offset, decode(raw))
    assert full.offset > end and image.same_as(full)
    assert set(offsets[:len(log.snapshots.loaded.records)]) == {end - 1}
    assert log.replayed_records == sum(1 for _ in storage.records(end, storage.end_offset))
    storage.close()
    assert log.replayed_records < len(records) // 4


def test_observer_refuses_its_snapshot_when_the_voters_log_is_shorter(tmp_path, caplog):
    """0.3 s. A broker (one-voter observer) with a snapshot at offset ~400 fetching from a controller whose log was
    replaced by a new, empty one: continuing from 400 would build a wrong image silently. It logs an ERROR, deletes
    its snapshots (a restart replays from 0) and applies nothing more."""
    from pyspark_kafka.broker.controller.channel import start_channel_server

    observer_dir = tmp_path / "broker.metadata"
    asyncio.run(_voter_run(observer_dir, _many()))  # a snapshot history as the broker's own
    assert SnapshotStore(observer_dir / "__cluster_metadata-0").paths()

    async def run() -> tuple[list, bool]:
        voter = SingleVoterMetadataLog(9, tmp_path / "new-controller", 9)
        await voter.start()

        async def handle(request: dict) -> dict:
            records = await voter.read(request["offset"], request["max_records"], 50)
            return {"error_code": 0, "records": [r.decode() for r in records], "end_offset": voter.committed_offset()}

        port = free_ports(1)[0]
        server = await start_channel_server("127.0.0.1", port, handle)
        observer = SingleVoterMetadataLog(0, observer_dir, 9, ("127.0.0.1", port),
                                          snapshots=metadata_snapshots(observer_dir / "__cluster_metadata-0", SMALL))
        seen = []
        observer.subscribe(lambda offset, raw: seen.append(offset))
        await observer.start()
        for _ in range(250):  # bounded: the fetch loop ends on the refusal
            if observer._task.done():
                break
            await asyncio.sleep(0.02)
        ended = observer._task.done()
        await voter.append([encode({"type": "broker", "id": 5, "epoch": 0, "host": "h", "port": 1})])
        await asyncio.sleep(0.1)
        await observer.stop()
        await voter.stop()
        server.close()
        return seen, ended

    with caplog.at_level(logging.ERROR, "pyspark_kafka.controller"):
        seen, ended = asyncio.run(run())
    assert ended and "the controller's log ends at offset 0, before this node's position" in caplog.text
    assert not SnapshotStore(observer_dir / "__cluster_metadata-0").paths()
    assert 0 not in seen  # the new log's record was not applied on top of the old snapshot


# --- a restart reads only the log after the snapshot (metadata.log.positions) ------------------------------------

def _metadata_dir(data_dir):
    return data_dir / "__cluster_metadata-0"


async def _read_all(data_dir) -> tuple[SingleVoterMetadataLog, list[bytes]]:
    """Start the voter, read its whole log as an observer's fetch does (from offset 0), stop."""
    log = SingleVoterMetadataLog(0, data_dir, 0, snapshots=metadata_snapshots(_metadata_dir(data_dir), SMALL))
    await log.start()
    try:
        return log, await log.read(0, 10**6, 0)
    finally:
        await log.stop()


def test_restart_reads_only_the_log_after_the_snapshot_and_the_rest_when_fetched(tmp_path):
    """0.3 s. After 420 records (snapshots every ~2000 bytes) a restart reads from metadata.log only the records
    after the newest snapshot (``loaded_records``), builds the same image as the full replay, and still serves
    the whole log from offset 0 to an observer (read and CRC-checked then). Appends after such a start are
    recorded at the right positions: a second restart from a newer snapshot again reads only its tail."""
    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    newest = SnapshotStore(_metadata_dir(tmp_path)).load_latest()
    log, image = asyncio.run(_voter_restart(tmp_path))
    assert log.snapshots.loaded.end_offset == newest.end_offset
    assert log.loaded_records == len(records) - newest.end_offset < 40
    assert image.same_as(replay(records))
    _, served = asyncio.run(_read_all(tmp_path))
    assert served == records

    more = [encode({"type": "dynamic_config", "resource": "broker", "name": "x", "configs": {"n": str(i)}})
            for i in range(60)]
    asyncio.run(_voter_run(tmp_path, more))  # starts from the snapshot, appends, writes newer snapshots
    newer = SnapshotStore(_metadata_dir(tmp_path)).load_latest()
    assert newer.end_offset > newest.end_offset
    log, image = asyncio.run(_voter_restart(tmp_path))
    assert log.loaded_records == len(records) + len(more) - newer.end_offset
    assert image.same_as(replay(records + more))
    _, served = asyncio.run(_read_all(tmp_path))
    assert served == records + more


def test_a_damaged_record_before_the_snapshot_is_never_served_and_nothing_is_truncated(tmp_path, caplog):
    """0.2 s. A flipped byte in the first record: the start (from the snapshot) does not read it and builds the
    right image; the file keeps every byte (no truncation: the records after it are whole); a fetch from
    offset 0 raises CorruptRecordError naming the file, the offset and the fix, while a fetch past the snapshot
    is served."""
    from pyspark_kafka.broker.errors import CorruptRecordError

    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    path = _metadata_dir(tmp_path) / "metadata.log"
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # inside record 0's bytes
    path.write_bytes(bytes(data))
    log, image = asyncio.run(_voter_restart(tmp_path))
    assert image.same_as(replay(records))
    assert path.stat().st_size == len(data)

    async def fetch(offset: int) -> list[bytes]:
        voter = SingleVoterMetadataLog(0, tmp_path, 0, snapshots=metadata_snapshots(_metadata_dir(tmp_path), SMALL))
        await voter.start()
        try:
            return await voter.read(offset, 10**6, 0)
        finally:
            await voter.stop()

    with pytest.raises(CorruptRecordError, match=r"metadata.log: the record at offset 0 \(byte 0\) is torn or fails "
                                                 r"its CRC, before the snapshot's end offset \d+.*restore"):
        asyncio.run(fetch(0))
    end = log.snapshots.loaded.end_offset
    assert asyncio.run(fetch(end)) == records[end:]


@pytest.mark.parametrize("damage", ["shifted position", "other crc", "checksum line", "torn", "garbage", "missing",
                                    "count"])
def test_positions_that_do_not_match_the_file_fall_back_to_reading_the_whole_log(tmp_path, caplog, damage):
    """0.1 s each. ``metadata.log.positions`` damaged or not matching the log (a position one byte off, another
    frame's CRC, its own checksum wrong, torn, garbage, deleted, a wrong count): the start reads the whole log
    (with a WARNING naming the cause, except for a missing file), the image is right, and no byte of the log is
    cut."""
    from pyspark_kafka.broker.controller.single_voter_log import POSITIONS_FILE, LogPositions

    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    positions = _metadata_dir(tmp_path) / POSITIONS_FILE
    entries = LogPositions(positions).read()
    assert len(entries) >= 2
    end, (position, length, crc) = max(entries.items())
    if damage == "shifted position":
        LogPositions(positions).add(end, position + 1, (length, crc))
    elif damage == "other crc":
        LogPositions(positions).add(end, position, (length, crc ^ 1))
    elif damage in ("checksum line", "torn", "garbage", "count"):
        text = positions.read_bytes()
        positions.write_bytes({"checksum line": text[:-2] + (b"1" if text[-2:-1] != b"1" else b"2") + b"\n", "torn": text[:-3],
                               "garbage": b"\xff\x00" + text, "count": text.replace(b"\n", b"\n9", 1)[:]}[damage])
    else:
        positions.unlink()
    size = (_metadata_dir(tmp_path) / "metadata.log").stat().st_size
    with caplog.at_level(logging.WARNING, "pyspark_kafka.controller"):
        log, image = asyncio.run(_voter_restart(tmp_path))
    assert log.loaded_records == len(records)
    assert image.same_as(replay(records))
    assert (_metadata_dir(tmp_path) / "metadata.log").stat().st_size == size
    if damage != "missing":
        assert "reading the whole" in caplog.text


def test_a_torn_tail_after_the_snapshot_is_truncated_as_before(tmp_path, caplog):
    """0.1 s. A crash in the middle of an append after the newest snapshot: the start from the snapshot truncates
    the torn frame (WARNING), keeps every whole record, and the next append lands after them."""
    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    path = _metadata_dir(tmp_path) / "metadata.log"
    size = path.stat().st_size
    with open(path, "ab") as file:
        file.write(b"\x00\x00\x00\x40\x12\x34")  # a frame header whose bytes never came
    with caplog.at_level(logging.WARNING, "pyspark_kafka.controller"):
        log, image = asyncio.run(_voter_restart(tmp_path))
    assert "truncating a torn tail of 6 bytes" in caplog.text
    assert path.stat().st_size == size and image.same_as(replay(records))
    assert log.loaded_records < len(records)
    extra = [encode({"type": "feature", "name": "y.version", "level": 1})]
    asyncio.run(_voter_run(tmp_path, extra))
    _, served = asyncio.run(_read_all(tmp_path))
    assert served == records + extra


def test_the_positions_file_reader_refuses_every_single_byte_change(tmp_path):
    """0.2 s. Every byte of a real positions file changed to each of a few values: ``read`` returns either the
    original entries (a change it cannot see, e.g. none) or nothing (refused), never other entries, and raises
    nothing."""
    from pyspark_kafka.broker.controller.single_voter_log import LogPositions

    path = tmp_path / "p"
    good = LogPositions(path)
    for end in (100, 250, 400):
        good.add(end, end * 37, (30 + end % 7, 0xDEADBEEF - end))
    original, data = good.read(), path.read_bytes()
    assert original == {100: (3700, 32, 0xDEADBEEF - 100), 250: (9250, 35, 0xDEADBEEF - 250),
                        400: (14800, 31, 0xDEADBEEF - 400)}
    logging.disable(logging.WARNING)
    try:
        for i in range(len(data)):
            for value in (0x00, 0x20, 0x30, 0x39, 0x0A, 0xFF, data[i] ^ 1):
                path.write_bytes(data[:i] + bytes([value]) + data[i + 1:])
                assert LogPositions(path).read() in (original, {}), (i, value)
            path.write_bytes(data[:i])
            assert LogPositions(path).read() in (original, {}), i
    finally:
        logging.disable(logging.NOTSET)


def test_a_log_cut_below_every_snapshot_rebuilds_the_image_from_the_log(tmp_path, caplog):
    """0.2 s. ``metadata.log`` restored from an old backup (3 records) beside snapshots at offset ~400: the recorded
    positions lie past the file's end and the snapshots past the log end, so both are refused (logged) and the
    image (the one a combined node's controller and broker read, ``shared_image``) is the replay of the 3
    records, and stays right after an append. Before, the image kept the refused snapshot's state."""
    from pyspark_kafka.broker.controller.single_voter_log import _frames

    records = _many()
    asyncio.run(_voter_run(tmp_path, records))
    path = _metadata_dir(tmp_path) / "metadata.log"
    data = path.read_bytes()
    _, cut, _ = _frames(data, 3)
    path.write_bytes(data[:cut])
    extra = encode({"type": "feature", "name": "z.version", "level": 1})

    async def run() -> tuple[bool, bool]:
        log = SingleVoterMetadataLog(0, tmp_path, 0, snapshots=metadata_snapshots(_metadata_dir(tmp_path), SMALL))
        await log.start()
        try:
            started = log.shared_image().same_as(replay(records[:3]))
            await log.append([extra])
            return started, log.shared_image().same_as(replay(records[:3] + [extra]))
        finally:
            await log.stop()

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(run()) == (True, True)
    assert "past the log end offset" in caplog.text and "reading the whole log" in caplog.text


def test_metadata_log_parsers_survive_coverage_guided_fuzzing(tmp_path):
    """``tests/support/fuzz_metadata_log.py`` (atheris), 50,000 inputs, fixed seed, a few seconds: the frame parser
    of ``metadata.log`` and ``LogPositions.decode`` raise nothing unexpected, and what they accept our writers
    write back byte for byte."""
    from pathlib import Path

    from support.libfuzzer import run_bounded

    target = Path(__file__).resolve().parents[2] / "support" / "fuzz_metadata_log.py"
    run_bounded(target, tmp_path, 50000, 20261129, ["-timeout=20", "-rss_limit_mb=2048"])

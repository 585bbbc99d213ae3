"""Fuzzing in CI: bounded, seeded, reproducible; every past crash replayed.

- ``test_regression_inputs``: each file of ``fuzz_corpus/regressions/`` (inputs that once
  crashed, hung or misled the broker) sent to a broker process;
- ``test_network_mutation_fuzz``: :data:`NETWORK_FRAMES` mutated client frames (bit flips,
  truncation, lying sizes and counts, null arrays, bad api keys and versions, CRC-valid lying
  batches, compression bombs) sent to a broker process;
- ``test_inprocess_coverage_guided_fuzz``: atheris (libFuzzer) over decoding and handling,
  :data:`INPROCESS_RUNS` inputs from the captured seeds.

After each: the process is alive, a fresh confluent-kafka client produces and fetches, the
data written before reads back intact, and (network fuzz) resident memory grew by less than
:data:`RSS_GROWTH_LIMIT_KIB`. Reproduce a failure with the seed in its message.
"""

from __future__ import annotations

import os
import resource
import socket
from pathlib import Path

import pytest

from support.fuzz_capture import CAPTURE_CONFIG
from support.fuzz_corpus import REGRESSIONS_DIR, read_frames, seeds
from support.libfuzzer import run_bounded
from support.fuzz_network import BrokerProcess, answers_api_versions, fuzz
from support.client_records import RECORDS, as_tuples, consume, expected, produce

NETWORK_SEED = 20261123
NETWORK_FRAMES = 3000
INPROCESS_RUNS = 10000
RSS_GROWTH_LIMIT_KIB = 48 * 1024
SUPPORT = Path(__file__).resolve().parents[2] / "support"
FUZZ_NOFILE = 2048  # the fuzzed broker's open-file limit: it may hold (2048 - 512) / 3 = 512 partitions


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory):
    # the authorizer is on (ACL APIs and checks are fuzzed too); PLAINTEXT clients are super users
    with BrokerProcess(tmp_path_factory.mktemp("fuzzed") / "data", config=CAPTURE_CONFIG, nofile=FUZZ_NOFILE) as b:
        yield b


@pytest.fixture(scope="module")
def guard(broker_process):
    """50 records (gzip) written before any fuzzing; must read back intact after every phase."""
    from support.topics import create_topic

    topic = create_topic(broker_process.bootstrap, "fuzz-guard", partitions=1)
    produce(broker_process.bootstrap, topic, RECORDS[:50], **{"compression.codec": "gzip"})
    return topic


def assert_healthy(b: BrokerProcess, guard_topic: str) -> None:
    assert b.alive(), f"broker died (exit {b.proc.returncode}):\n{b.log_tail()}"
    assert answers_api_versions(b.bootstrap), f"broker does not answer:\n{b.log_tail()}"
    assert as_tuples(consume(b.bootstrap, guard_topic, 50)) == expected(RECORDS[:50])
    from support.topics import create_topic

    fresh = create_topic(b.bootstrap, f"fresh-{os.urandom(4).hex()}", partitions=1)
    produce(b.bootstrap, fresh, RECORDS[:5])
    assert as_tuples(consume(b.bootstrap, fresh, 5)) == expected(RECORDS[:5])


def _send_and_wait(bootstrap: str, wire: bytes, timeout_s: float = 10.0) -> bytes:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(wire)
        try:
            return sock.recv(1 << 16)  # a response, or b"" when the broker closed the connection
        except socket.timeout:
            return b"timeout"


@pytest.mark.parametrize("path", sorted(REGRESSIONS_DIR.glob("*.bin")), ids=lambda p: p.stem)
def test_regression_inputs(broker_process, guard, path):
    for wire in read_frames(path):
        answer = _send_and_wait(broker_process.bootstrap, wire)
        assert answer != b"timeout", f"{path.name}: no answer and no close within 10 s"
    assert_healthy(broker_process, guard)


@pytest.mark.slow
def test_network_mutation_fuzz(broker_process, guard):
    frames = seeds()
    rss_before = broker_process.rss_kib()
    stats = fuzz(broker_process, frames, NETWORK_SEED, NETWORK_FRAMES, time_limit_s=240)
    assert stats.total >= NETWORK_FRAMES * 0.9, stats
    assert set(stats.sent) >= {"bitflip", "truncate", "size_lie", "batch", "bomb", "null_out", "version"}
    assert stats.closed_by_broker > 0  # the broker did refuse garbage: the run reached it
    assert_healthy(broker_process, guard)
    growth = broker_process.rss_kib() - rss_before
    assert growth < RSS_GROWTH_LIMIT_KIB, f"resident memory grew by {growth} KiB over {stats.total} frames"


@pytest.mark.slow
def test_inprocess_coverage_guided_fuzz(tmp_path):
    run_bounded(SUPPORT / "fuzz_inprocess.py", tmp_path, INPROCESS_RUNS, 1, ["-max_len=8192", "-timeout=30"],
                seeds=seeds(), timeout_s=600,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FUZZ_NOFILE, FUZZ_NOFILE)))

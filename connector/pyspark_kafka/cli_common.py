"""What the ``pyspark-kafka`` commands share (see :mod:`pyspark_kafka.cli`): their errors (exit codes 1 and
2), parsing of ``KEY=VALUE``, properties files and input lines, and building confluent-kafka clients whose
failures are one line naming the cause.
"""

from __future__ import annotations

import argparse
import logging
from typing import Callable, Iterable, Iterator

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_CONNECT_TIMEOUT_MS = 10_000
# Records are read from stdin into this spool (memory first, then a temp file) so
# that every line is validated before the first record is sent.
SPOOL_MEMORY_BYTES = 64 * 1024 * 1024
# Client settings the tools change from librdkafka's defaults (overridable with
# --command-config): Java-compatible key hashing (Kafka's DefaultPartitioner, as
# kafka-console-producer.sh and Spark use) and a 30 s delivery bound instead of 300 s.
PRODUCER_DEFAULTS = {"partitioner": "murmur2_random", "message.timeout.ms": "30000"}
CONSOLE_GROUP_ID = "pyspark-kafka-console"  # librdkafka needs one even for assign(); never committed


class CliError(Exception):
    """A runtime failure reported as one line, exit code 1."""


class UsageError(Exception):
    """Bad input from the user, reported as one line, exit code 2."""


# ---------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------


def parse_key_value(text: str) -> tuple[str, str]:
    """``"retention.ms=1000"`` → ``("retention.ms", "1000")``.

    Splits on the first ``=``; the value may be empty or contain ``=``.
    Raises :class:`argparse.ArgumentTypeError` (argparse turns it into exit code 2)
    when there is no ``=`` or the key is empty.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java-style properties file body: ``key=value`` lines, ``#``/``!`` comments.

    Raises :class:`UsageError` naming the line number of a line without ``=``.
    (Line continuations and ``key: value`` are not supported.)
    """
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"line {number} of the properties file is not key=value: {raw!r}")
        out[key.strip()] = value.strip()
    return out


def command_config(values: Iterable[str]) -> dict[str, str]:
    """Merge ``--command-config`` values: each is ``KEY=VALUE`` or a properties file path.

    A value containing ``=`` is one client setting; otherwise it is read as a file of
    client settings (Kafka's ``--command-config`` meaning). Later values win.
    Raises :class:`UsageError` when a file cannot be read or parsed.
    """
    out: dict[str, str] = {}
    for value in values:
        if "=" in value:
            try:
                key, val = parse_key_value(value)
            except argparse.ArgumentTypeError as e:
                raise UsageError(f"--command-config: {e}") from None
            out[key] = val
            continue
        try:
            with open(value, encoding="utf-8") as f:
                out.update(parse_properties(f.read()))
        except OSError as e:
            raise UsageError(f"--command-config {value!r}: not KEY=VALUE and not a readable file ({e.strerror})")
    return out


def split_record(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    """One input line (without its newline) → ``(key, value)``.

    Without a separator the whole line is the value and the key is ``None``. With one,
    the line splits at its first occurrence (as Kafka's console producer does).
    Raises :class:`UsageError` naming ``number`` (1-based) when the separator is absent.
    """
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        shown = line[:80].decode("utf-8", "replace")
        raise UsageError(
            f"no key separator {separator.decode()!r} found on line number {number}: {shown!r}; "
            "nothing was produced. Fix the line or drop --key-separator"
        )
    return key, value


def input_lines(stream) -> Iterator[bytes]:
    """Lines of a binary stream without ``\\n`` / ``\\r\\n``; a last line without newline counts."""
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


def format_record(key: bytes | None, value: bytes | None, print_key: bool, separator: bytes) -> bytes:
    """The output line for one record; a null key or value prints as ``null`` (as Kafka's tools do)."""
    v = b"null" if value is None else value
    if not print_key:
        return v + b"\n"
    k = b"null" if key is None else key
    return k + separator + v + b"\n"


def failure_reason(log_lines: list[str]) -> str:
    """The last librdkafka connection failure, e.g. ``Connect to ipv4#127.0.0.1:1 failed: Connection refused``."""
    for line in reversed(log_lines):
        _, _, reason = line.rpartition("/bootstrap: ")
        if reason:
            return reason.split(" (after ")[0]
    return "no response"


# ---------------------------------------------------------------------------
# Client plumbing
# ---------------------------------------------------------------------------


class _Captured(logging.Handler):
    """Keeps librdkafka's log lines (last 50) instead of printing them."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines = (self.lines + [record.getMessage()])[-50:]


_librdkafka_log = _Captured()


def client_config(args, **extra) -> dict:
    """confluent-kafka settings: bootstrap, tool defaults, then ``--command-config`` (wins)."""
    logger = logging.getLogger("pyspark_kafka.cli.librdkafka")
    logger.propagate = False
    if _librdkafka_log not in logger.handlers:
        logger.addHandler(_librdkafka_log)
    return {"bootstrap.servers": args.bootstrap_server, **extra, **args.client_config, "logger": logger}


def make_client(factory: Callable, config: dict):
    """Build a confluent-kafka client; an unknown or invalid setting is a usage error."""
    from confluent_kafka import KafkaException

    try:
        return factory(config)
    except KafkaException as e:
        raise UsageError(f"invalid client setting: {e.args[0].str()} (check --command-config)") from None
    except (ValueError, TypeError) as e:
        raise UsageError(f"invalid client setting: {e} (check --command-config)") from None


def cluster_metadata(client, args, topic: str | None = None):
    """Metadata from ``client`` within ``--connect-timeout-ms``.

    Raises :class:`CliError` naming the bootstrap address, the timeout and the
    connection failure when no broker answers.
    """
    from confluent_kafka import KafkaException

    timeout_s = args.connect_timeout_ms / 1000
    try:
        return client.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as e:
        if hasattr(client, "poll"):
            client.poll(0)  # delivers queued librdkafka log lines to the capture
        raise CliError(
            f"cannot reach a Kafka broker at {args.bootstrap_server} within {timeout_s:g} s "
            f"({failure_reason(_librdkafka_log.lines) if _librdkafka_log.lines else e.args[0].str()}); "
            "check --bootstrap-server and that the broker is running"
        ) from None


def topic_partitions(metadata, topic: str) -> list[int]:
    """Partition ids of ``topic``; raises :class:`CliError` when the topic does not exist."""
    tm = metadata.topics.get(topic)
    if tm is None or tm.error is not None:
        reason = tm.error.str() if tm is not None and tm.error is not None else "unknown topic"
        raise CliError(f"topic {topic!r} is not available ({reason}); create it with: "
                       f"pyspark-kafka topics create --topic {topic}")
    return sorted(tm.partitions)


def admin_client(args):
    """A confluent-kafka AdminClient for the command's ``--bootstrap-server`` and ``--command-config``."""
    from confluent_kafka.admin import AdminClient

    return make_client(AdminClient, client_config(args))


def admin_result(future, what: str, timeout_s: float):
    """Wait for an AdminClient future; Kafka errors become :class:`CliError` naming ``what``."""
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout=timeout_s)
    except KafkaException as e:
        err = e.args[0]
        raise CliError(f"{what} failed: {err.name()}: {err.str()}") from None
    except TimeoutError:
        raise CliError(f"{what}: no answer within {timeout_s:g} s") from None

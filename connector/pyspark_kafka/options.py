"""Option handling shared by the reader, the writer and the sinks.

Spark hands a data source its options as a case-insensitive string map. The
``kafka.*`` client settings among them, and the redaction of their secrets, are
:mod:`pyspark_kafka.kafka.client_config` (the client layer both sides share).
"""

from __future__ import annotations

from typing import Mapping

from pyspark_kafka.errors import OptionError


def get_option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """Case-insensitive lookup of one option (Spark option names are case-insensitive)."""
    ln = name.lower()
    for k, v in options.items():
        if k.lower() == ln:
            return v
    return default


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Parse a boolean option (``true``/``false``, any case).

    Raises OptionError naming the option when the value is neither.
    """
    raw = get_option(options, name)
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise OptionError(f"option '{name}' must be 'true' or 'false', got {raw!r}")


def parse_int(options: Mapping[str, str], name: str, default: int | None, *, minimum: int | None = None) -> int | None:
    """Parse an integer option; ``minimum`` bounds it from below.

    Raises OptionError naming the option, the value and the allowed range.
    """
    raw = get_option(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option '{name}' must be >= {minimum}, got {value}")
    return value


def require_bootstrap(options: Mapping[str, str]) -> str:
    """Return ``kafka.bootstrap.servers`` or raise OptionError with the fix."""
    v = get_option(options, "kafka.bootstrap.servers")
    if not v:
        raise OptionError(
            "option 'kafka.bootstrap.servers' is required: "
            ".option('kafka.bootstrap.servers', 'host1:9092,host2:9092')"
        )
    return v

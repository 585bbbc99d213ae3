"""The options of a JAAS ``sasl.jaas.config`` line, as Kafka's ``JaasConfig`` parses them.

``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";``
→ ``("org.apache.kafka.common.security.plain.PlainLoginModule", {"user_alice": "alice-secret"})``.
PLAIN's users are the ``user_<name>`` options (Kafka's ``PlainServerCallbackHandler``).
Errors name the config, never its value (it holds passwords).
"""

from __future__ import annotations

import re

from pyspark_kafka.broker.errors import ConfigError

_HEAD = re.compile(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\s*")
_OPTION = re.compile(r"\s*([A-Za-z0-9_.\-]+)\s*=\s*(\"((?:[^\"\\]|\\.)*)\"|[^\s;\"]+)\s*")


def parse_jaas(config_name: str, text: str) -> tuple[str, dict[str, str]]:
    """``(login module class, options)`` of one JAAS entry. Raises ConfigError naming ``config_name``."""
    m = _HEAD.match(text)
    if m is None:
        raise ConfigError(f"broker config {config_name}: not a JAAS entry; use "
                          "'<LoginModule class> required key=\"value\" ...;'")
    pos, options = m.end(), {}
    while pos < len(text) and text[pos] != ";":
        o = _OPTION.match(text, pos)
        if o is None:
            raise ConfigError(f"broker config {config_name}: malformed JAAS option at character {pos}; "
                              "use key=\"value\" pairs and end with ';'")
        value = o.group(3) if o.group(3) is not None else o.group(2)
        options[o.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    if pos >= len(text) or text[pos:].strip() != ";":
        raise ConfigError(f"broker config {config_name}: a JAAS entry must end with ';' (one login module)")
    return m.group(1), options


def users(options: dict[str, str]) -> dict[str, str]:
    """``{user: password}`` from the ``user_<name>`` options."""
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_") and len(k) > 5}

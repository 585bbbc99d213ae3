"""Kafka Java client settings in ``kafka.*`` options, translated to librdkafka (confluent-kafka).

A Spark job written for Spark's own Kafka connector passes Java client settings
(``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``, ``kafka.max.request.size``...).
librdkafka names many settings the same way, but not all. :func:`to_librdkafka` turns the
``kafka.*`` settings (prefix removed) into librdkafka settings so such a job runs unchanged
but for the format name; the table lives in ``docs/migration.md`` and in :data:`RENAMED`,
:data:`NO_EFFECT` and :data:`SPARK_REFUSES`:

- same name in both clients → passed as is;
- renamed (:data:`RENAMED`, e.g. ``max.request.size`` → ``message.max.bytes``), or converted
  (``buffer.memory`` bytes → ``queue.buffering.max.kbytes``; ``partition.assignment.strategy``
  Java class names → ``range`` / ``roundrobin`` / ``cooperative-sticky``;
  ``compression.<codec>.level`` → ``compression.level``);
- ``ssl.endpoint.identification.algorithm`` empty (the Java client's way to turn the host name
  check off, SslConfigs) → ``none`` (librdkafka refuses an empty value);
- ``sasl.jaas.config`` (PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule,
  Krb5LoginModule with a keytab) → ``sasl.username``/``sasl.password``, librdkafka's OAUTHBEARER
  settings, or ``sasl.kerberos.keytab``/``sasl.kerberos.principal``;
- ``ssl.truststore.*`` (JKS, PKCS12 or PEM) → ``ssl.ca.pem`` (certificates, in memory);
  ``ssl.keystore.*`` of type JKS or PEM → ``ssl.certificate.pem`` + ``ssl.key.pem`` (in
  memory, never written to disk); PKCS12 keystores are read by librdkafka itself;
- settings that only tune the Java client and have no librdkafka counterpart
  (:data:`NO_EFFECT`, e.g. ``max.block.ms``) → dropped with one warning each;
- serializers, which Spark's sink refuses (:data:`SPARK_REFUSES`) →
  :class:`~pyspark_kafka.errors.OptionError` with Spark's reason and the alternative (the
  source's refusals are checked with the source options);
- ``partitioner.class`` with Kafka's built-in classes → our routing (:func:`java_partitioner`);
  any other class, and librdkafka's own ``partitioner`` other than murmur2 → OptionError
  saying how to route instead (the writer computes every record's partition itself, so a
  client-side partitioner would silently do nothing).

Anything else unknown to librdkafka still fails at client creation with librdkafka's message.
Secrets (passwords, keys) are never logged or put in messages.
"""

from __future__ import annotations

import logging
import re
from typing import Mapping

from pyspark_kafka.errors import OptionError

log = logging.getLogger("pyspark_kafka")

RENAMED = {
    "max.request.size": "message.max.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
}
"""Java client name → librdkafka name, same meaning and unit."""

NO_EFFECT = {
    "max.block.ms": "librdkafka never blocks a produce call; delivery is bounded by delivery.timeout.ms",
    "metrics.recorder.level": "librdkafka reports statistics through statistics.interval.ms instead",
    "metric.reporters": "librdkafka reports statistics through statistics.interval.ms instead",
    "socket.connection.setup.timeout.max.ms": "librdkafka has only socket.connection.setup.timeout.ms",
    "partitioner.adaptive.partitioning.enable": "pykafka computes each record's partition itself (option 'partitioner')",
    "partitioner.availability.timeout.ms": "pykafka computes each record's partition itself (option 'partitioner')",
    "exclude.internal.topics": "pykafka assigns partitions explicitly; subscribePattern never matches internal topics",
    "ssl.protocol": "librdkafka negotiates the TLS version with OpenSSL",
    "ssl.enabled.protocols": "librdkafka negotiates the TLS version with OpenSSL",
    "ssl.keymanager.algorithm": "a Java key manager setting",
    "ssl.trustmanager.algorithm": "a Java trust manager setting",
    "ssl.secure.random.implementation": "a Java setting",
    "sasl.login.refresh.window.factor": "librdkafka refreshes OAUTHBEARER tokens itself",
    "sasl.login.refresh.window.jitter": "librdkafka refreshes OAUTHBEARER tokens itself",
    "auto.include.jmx.reporter": "a Java metrics setting",
}
"""Java-only tuning settings accepted and dropped with one warning (reason given)."""

SPARK_REFUSES = {
    "key.serializer": "keys are written as byte arrays; serialize with DataFrame operations before the write",
    "value.serializer": "values are written as byte arrays; serialize with DataFrame operations before the write",
}
"""Producer settings Spark's connector refuses (KafkaSourceProvider.validateSinkOptions), with Spark's
reason. The read side's refusals (deserializers, ``enable.auto.commit``, ``interceptor.classes``,
``auto.offset.reset`` outside the group options) are checked with the source options
(:func:`pyspark_kafka.read.options.parse_reader_options`, :mod:`pyspark_kafka.read.consumer_group`)."""

JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.defaultpartitioner": "murmur2",
    "org.apache.kafka.clients.producer.roundrobinpartitioner": "roundrobin",
}
LIBRDKAFKA_MURMUR2 = ("murmur2", "murmur2_random")
ASSIGNORS = {
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
    "range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky",
}
_LOGIN_MODULE = re.compile(r"^\s*(?P<cls>[\w.$]+)\s+(?P<flag>required|optional|requisite|sufficient)\s*(?P<opts>.*?);?\s*$",
                           re.S)
_JAAS_OPTION = re.compile(r'(?P<key>[\w.]+)\s*=\s*(?:"(?P<q>(?:[^"\\]|\\.)*)"|(?P<u>[^\s;]+))')
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


def parse_jaas(value: str) -> tuple[str, dict[str, str]]:
    """``(login module class, options)`` of a ``sasl.jaas.config`` value.

    ``'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'``
    → ``("org.apache.kafka.common.security.plain.PlainLoginModule", {"username": "u", "password": "p"})``.
    Raises OptionError (without the value: it holds secrets) when it is not one JAAS login module entry.
    """
    m = _LOGIN_MODULE.match(value)
    if m is None:
        raise OptionError("option 'kafka.sasl.jaas.config' is not a JAAS entry of the form "
                          "'<LoginModule class> required key=\"value\" ...;' (value not shown: it holds secrets)")
    opts = {}
    for o in _JAAS_OPTION.finditer(m.group("opts")):
        raw = o.group("q") if o.group("q") is not None else o.group("u")
        opts[o.group("key")] = re.sub(r"\\(.)", r"\1", raw)
    return m.group("cls"), opts


def _jaas_settings(value: str, params: Mapping[str, str]) -> dict[str, str]:
    cls, opts = parse_jaas(value)
    name = cls.rsplit(".", 1)[-1]
    if name in ("PlainLoginModule", "ScramLoginModule"):
        if "username" not in opts or "password" not in opts:
            raise OptionError(f"option 'kafka.sasl.jaas.config': {name} needs username=\"...\" and password=\"...\"")
        return {"sasl.username": opts["username"], "sasl.password": opts["password"]}
    if name == "OAuthBearerLoginModule":
        if "unsecuredLoginStringClaim_sub" in opts:
            return {"enable.sasl.oauthbearer.unsecure.jwt": "true",
                    "sasl.oauthbearer.config": f"principal={opts['unsecuredLoginStringClaim_sub']}"}
        out = {"sasl.oauthbearer.method": "oidc"}
        for java, rd in (("clientId", "sasl.oauthbearer.client.id"), ("clientSecret", "sasl.oauthbearer.client.secret"),
                         ("scope", "sasl.oauthbearer.scope")):
            if java in opts:
                out[rd] = opts[java]
        if "sasl.oauthbearer.token.endpoint.url" not in params:
            raise OptionError("option 'kafka.sasl.jaas.config' uses OAuthBearerLoginModule without "
                              "'kafka.sasl.oauthbearer.token.endpoint.url': set the token endpoint (OIDC), or use "
                              "unsecuredLoginStringClaim_sub=\"...\" for an unsecured test token")
        return out
    if name == "Krb5LoginModule":
        if opts.get("useKeyTab", "").lower() != "true" or "keyTab" not in opts or "principal" not in opts:
            raise OptionError("option 'kafka.sasl.jaas.config': Krb5LoginModule is supported with useKeyTab=true, "
                              "keyTab=\"/path\" and principal=\"user@REALM\" (librdkafka runs kinit with the keytab)")
        return {"sasl.kerberos.keytab": opts["keyTab"], "sasl.kerberos.principal": opts["principal"]}
    raise OptionError(f"option 'kafka.sasl.jaas.config': login module {cls} has no librdkafka equivalent; "
                      "supported: PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule, Krb5LoginModule "
                      "(keytab), or set librdkafka's sasl.username/sasl.password directly")


def _assignors(value: str) -> str:
    out = []
    for item in (v.strip() for v in value.split(",") if v.strip()):
        mapped = ASSIGNORS.get(item.lower())
        if mapped is None:
            raise OptionError(f"option 'kafka.partition.assignment.strategy': {item} has no librdkafka equivalent; "
                              "use RangeAssignor, RoundRobinAssignor or CooperativeStickyAssignor "
                              "(range, roundrobin, cooperative-sticky)")
        out.append(mapped)
    return ",".join(out)


def java_partitioner(params: Mapping[str, str]) -> str | None:
    """The routing a ``kafka.partitioner.class`` / ``kafka.partitioner`` setting asks for, or None.

    Kafka's ``DefaultPartitioner`` and librdkafka's ``murmur2``/``murmur2_random`` → ``murmur2``
    (pykafka's default: Kafka's key hash); ``RoundRobinPartitioner`` → ``roundrobin``. Raises
    OptionError for any other partitioner, saying how to route instead.
    """
    how = ("route with the writer option 'partitioner' ('murmur2', 'roundrobin' or a Python "
           "'module.Class'), or give each row a 'partition' column")
    cls = params.get("partitioner.class")
    chosen = None
    if cls is not None:
        chosen = JAVA_PARTITIONERS.get(cls.strip().lower())
        if chosen is None:
            raise OptionError(f"option 'kafka.partitioner.class' = {cls!r} cannot run in pykafka (a Java class); {how}")
    rd = params.get("partitioner")
    if rd is not None:
        if rd.strip().lower() not in LIBRDKAFKA_MURMUR2:
            raise OptionError(f"option 'kafka.partitioner' = {rd!r} would be ignored: pykafka computes each "
                              f"record's partition itself (Kafka's murmur2 by default); {how}")
        chosen = chosen or "murmur2"
    if params.get("partitioner.ignore.keys", "false").strip().lower() == "true":
        raise OptionError(f"option 'kafka.partitioner.ignore.keys' has no exact equivalent; {how} "
                          "(e.g. .option('partitioner', 'roundrobin'))")
    return chosen


def to_librdkafka(params: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings for ``params`` (``kafka.*`` options, prefix removed, keys lower-cased).

    See the module docstring for the rules. Raises OptionError naming the setting and the
    alternative for a setting that cannot be honoured.
    """
    for key, reason in SPARK_REFUSES.items():
        if key in params:
            raise OptionError(f"Kafka option '{key}' is not supported: {reason} (Spark's Kafka connector refuses "
                              "it too)")
    java_partitioner(params)  # refuses partitioners that would be silently ignored
    out: dict[str, str] = {}
    for key, value in params.items():
        if key in ("partitioner.class", "partitioner", "partitioner.ignore.keys"):
            continue
        if key in NO_EFFECT:
            _warn_once(key, f"ignoring Kafka option 'kafka.{key}': {NO_EFFECT[key]}")
            continue
        if key in RENAMED:
            out[RENAMED[key]] = value
        elif key == "buffer.memory":
            out["queue.buffering.max.kbytes"] = str(max(1, -(-int(value) // 1024)))
        elif key == "partition.assignment.strategy":
            out[key] = _assignors(value)
        elif key.startswith("compression.") and key.endswith(".level"):
            codec = key.split(".")[1]
            if params.get("compression.type", params.get("compression.codec", "")).lower() == codec:
                out["compression.level"] = value
        elif key == "sasl.jaas.config":
            out.update(_jaas_settings(value, params))
        elif key == "ssl.endpoint.identification.algorithm" and not value.strip():
            out[key] = "none"  # the Java client's empty value turns the host name check off; librdkafka says "none"
        elif key.startswith("ssl.truststore.") or key.startswith("ssl.keystore."):
            continue  # handled below, as a whole
        else:
            out[key] = value
    out.update(_ssl_material(params))
    if "ssl.key.pem" in out:
        out.pop("ssl.key.password", None)  # the PEM key handed to librdkafka is not encrypted
    return out


def _ssl_material(params: Mapping[str, str]) -> dict[str, str]:
    from pyspark_kafka.kafka import keystores

    out: dict[str, str] = {}
    ts_type = params.get("ssl.truststore.type", "JKS").upper()
    if "ssl.truststore.location" in params or "ssl.truststore.certificates" in params:
        out["ssl.ca.pem"] = keystores.truststore_pem(
            ts_type, params.get("ssl.truststore.location"), params.get("ssl.truststore.password"),
            params.get("ssl.truststore.certificates"))
    ks_type = params.get("ssl.keystore.type", "JKS").upper()
    if "ssl.keystore.location" in params or "ssl.keystore.key" in params:
        if ks_type == "PKCS12":
            out["ssl.keystore.location"] = params["ssl.keystore.location"]
            if "ssl.keystore.password" in params:
                out["ssl.keystore.password"] = params["ssl.keystore.password"]
        else:
            cert, key = keystores.keystore_pem(
                ks_type, params.get("ssl.keystore.location"), params.get("ssl.keystore.password"),
                params.get("ssl.key.password"), params.get("ssl.keystore.key"),
                params.get("ssl.keystore.certificate.chain"))
            out["ssl.certificate.pem"] = cert
            out["ssl.key.pem"] = key
    return out

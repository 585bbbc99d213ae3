"""The same secured Spark job, with Spark's Kafka option names, on the embedded broker and on Apache Kafka.

One set of options as written for Spark's ``format("kafka")`` over SASL_SSL with SCRAM
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location``/``password``/``type`` as JKS (made with ``keytool``) or PKCS12,
``kafka.ssl.endpoint.identification.algorithm``) runs through ``format("pykafka")``:

- ``embedded``: the embedded broker with a SASL_SSL listener (PEM key store) and a PLAINTEXT
  listener for the admin side; SCRAM users made with AlterUserScramCredentials; the same
  ``StandardAuthorizer`` ACLs as below (``User:ANONYMOUS``, the PLAINTEXT admin channel, is a
  super user on both);
- ``apache-kafka``: Apache Kafka 4.3.1 (Maven Central's jars, :class:`SaslSsl`) with a SASL_SSL
  listener (PKCS12 key store), SCRAM users created at format time and ``StandardAuthorizer``:
  ``etl`` may READ and WRITE the ``secured-`` topics (DESCRIBE implied), ``intruder`` may only
  DESCRIBE them; nobody has a
  group ACL (reads need none, as with Spark's connector; ``startingOffsets=group`` does).

Checked: a batch write then a batch read, an AvailableNow stream (SCRAM-SHA-256, PKCS12 trust
store, host name check off the Java way: ``""``), a wrong password (an authentication error
within the metadata wait, not a hang), a principal without READ/WRITE (topic authorization named),
and on Apache Kafka Spark's own ``format("kafka")`` with the same options reads the same rows.
About 75-120 s here (two backends, one Spark session start, the reference job 30-45 s of it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest

from integration_tests.helpers import consume_all, run_available_now
from support.certs import STORE_PASSWORD, make_pki

pytestmark = pytest.mark.slow

USERS = {"etl": "etl-pw-Qs81", "intruder": "intruder-pw-Zk40"}
TRUST_PASSWORD = "trust-store-Vb27"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
HANG_BOUND_S = 60.0
"""A failed authentication must end the job well within Spark's default ``kafka.default.api.timeout.ms``
(60 s): a hang would wait that long and more (retries)."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The test PKI plus JKS and PKCS12 trust stores made by ``keytool`` (Java's own tool, as users
    make them). Not ``cryptography``'s PKCS12: Java trusts a PKCS12 certificate only with Oracle's
    trusted-key-usage attribute, which keytool writes (Spark's connector with a PKCS12 made without
    it failed its TLS handshakes until a 186 s timeout here; pykafka reads both)."""
    out = make_pki(tmp_path_factory.mktemp("pki"))
    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("keytool (a JDK) is not installed: no JKS trust store")
    for kind in ("JKS", "PKCS12"):
        path = out.ca_pem.parent / f"truststore.{kind.lower()}"
        subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "test-ca", "-file", str(out.ca_pem),
                        "-keystore", str(path), "-storetype", kind, "-storepass", TRUST_PASSWORD],
                       check=True, capture_output=True, timeout=60)
        setattr(out, f"ca_{kind.lower()}", path)
    return out


class Secured:
    """One backend: ``name``, ``bootstrap`` (SASL_SSL, StandardAuthorizer on), ``admin`` (PLAINTEXT,
    a super user, for setup and checks)."""

    def __init__(self, name: str, bootstrap: str, admin: str):
        self.name, self.bootstrap, self.admin = name, bootstrap, admin

    def topic(self, partitions: int = 2) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"secured-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.admin})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        return name


def _embedded(pki):
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    from pyspark_kafka.broker import EmbeddedBroker

    # the same authorizer as the Apache Kafka backend: PLAINTEXT's User:ANONYMOUS is the admin channel
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
              "ssl.keystore.location": str(pki.server_pem), "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
              "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
    broker = EmbeddedBroker(config=config)
    broker.__enter__()
    ports = {lst.name: f"127.0.0.1:{lst.port}" for lst in broker.broker.security.listeners}
    admin = AdminClient({"bootstrap.servers": ports["PLAINTEXT"]})
    # one request per mechanism: a user named twice in one request is refused DUPLICATE_RESOURCE (Kafka 4.4's
    # ScramControlManager, the embedded controller's rule too)
    for m in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), pw.encode())
                   for user, pw in USERS.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
    _create_job_acls(admin)
    return Secured("embedded", ports["SASL_SSL"], ports["PLAINTEXT"]), broker.__exit__


def _create_job_acls(admin) -> None:
    """The ACLs of both backends: ``etl`` may read and write ``secured-*`` topics, ``intruder`` only
    describe them. No group ACL at all: reads with assigned partitions need none (Kafka's Java
    consumer never looks up the coordinator then; pykafka's executors go on when librdkafka's
    lookup is denied)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    def acl(user, op):
        return AclBinding(ResourceType.TOPIC, "secured-", ResourcePatternType.PREFIXED, f"User:{user}", "*", op,
                          AclPermissionType.ALLOW)

    bindings = [acl("etl", AclOperation.READ), acl("etl", AclOperation.WRITE), acl("intruder", AclOperation.DESCRIBE)]
    for future in admin.create_acls(bindings).values():
        future.result(30)


def _apache(pki):
    from confluent_kafka.admin import AdminClient

    from pyspark_kafka.testing.apache_kafka import ApacheKafka, SaslSsl
    from pyspark_kafka.testing.maven import MavenUnavailable

    kafka = ApacheKafka(sasl_ssl=SaslSsl(str(pki.server_p12), STORE_PASSWORD, users=USERS, authorizer=True))
    try:
        kafka.start()
    except MavenUnavailable as e:
        pytest.skip(f"Apache Kafka {kafka.version} from Maven Central unavailable: {e}")
    _create_job_acls(AdminClient({"bootstrap.servers": kafka.bootstrap_servers}))
    return Secured("apache-kafka", kafka.sasl_ssl_bootstrap_servers, kafka.bootstrap_servers), \
        lambda *exc: kafka.stop()


@pytest.fixture(scope="module", params=["embedded", "apache-kafka"])
def secured(request, pki):
    backend, stop = (_embedded if request.param == "embedded" else _apache)(pki)
    try:
        yield backend
    finally:
        stop(None, None, None)


def spark_options(bootstrap: str, pki, user: str = "etl", password: str | None = None, *,
                  mechanism: str = "SCRAM-SHA-512", truststore: str = "JKS", hostname_check: str = "https") -> dict:
    """The options of a Spark ``format("kafka")`` job over SASL_SSL/SCRAM, unchanged."""
    store = {"JKS": pki.ca_jks, "PKCS12": pki.ca_pkcs12}[truststore]
    return {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": f'{SCRAM} required username="{user}" password="{password or USERS[user]}";',
        "kafka.ssl.truststore.location": str(store),
        "kafka.ssl.truststore.password": TRUST_PASSWORD,
        "kafka.ssl.truststore.type": truststore,
        "kafka.ssl.endpoint.identification.algorithm": hostname_check,
    }


ROWS = [(f"k{i}", f"v{i}") for i in range(30)]


def _write(spark, opts: dict, topic: str, rows=ROWS) -> None:
    spark.createDataFrame(rows, "key string, value string").write.format("pykafka").options(
        **opts, topic=topic).mode("append").save()


def _read(spark, opts: dict, topic: str) -> list[tuple]:
    df = spark.read.format("pykafka").options(**opts, subscribe=topic).load()
    return sorted(tuple(r) for r in df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").collect())


def test_batch_write_and_read_with_jks_truststore_and_scram_sha_512(spark, secured, pki, read_path):
    topic = secured.topic()
    opts = spark_options(secured.bootstrap, pki)
    _write(spark, opts, topic)
    assert _read(spark, opts, topic) == sorted(ROWS)
    landed = consume_all(secured.admin, topic)  # an independent client on the admin listener
    assert sorted((m.key().decode(), m.value().decode()) for m in landed) == sorted(ROWS)


def test_available_now_stream_with_pkcs12_truststore_and_scram_sha_256(spark, secured, pki, tmp_path, read_path):
    topic = secured.topic()
    opts = spark_options(secured.bootstrap, pki, mechanism="SCRAM-SHA-256", truststore="PKCS12", hostname_check="")
    _write(spark, opts, topic)
    name = f"secured_{uuid.uuid4().hex[:8]}"
    stream = (spark.readStream.format("pykafka").options(**opts, subscribe=topic, startingOffsets="earliest",
                                                         maxOffsetsPerTrigger="12").load()
              .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))
    run_available_now(stream.writeStream.format("memory").queryName(name)
                      .option("checkpointLocation", str(tmp_path / "checkpoint")))
    assert sorted(tuple(r) for r in spark.sql(f"SELECT key, value FROM {name}").collect()) == sorted(ROWS)


def test_wrong_password_is_an_authentication_error_not_a_hang(spark, secured, pki):
    opts = spark_options(secured.bootstrap, pki, password="not-the-password")
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        spark.read.format("pykafka").options(**opts, subscribe="secured-any").load().collect()
    elapsed = time.monotonic() - started
    text = str(failure.value)
    assert "not-the-password" not in text
    assert "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512" \
        in text, text[-2000:]
    assert elapsed < HANG_BOUND_S, f"the failed authentication took {elapsed:.0f} s to surface"


def test_principal_without_read_or_write_acl_is_denied_naming_the_acl(spark, secured, pki):
    topic = secured.topic()
    _write(spark, spark_options(secured.bootstrap, pki), topic)
    intruder = spark_options(secured.bootstrap, pki, user="intruder")
    with pytest.raises(Exception) as failure:
        spark.read.format("pykafka").options(**intruder, subscribe=topic).load().collect()
    text = str(failure.value)
    assert USERS["intruder"] not in text
    assert f"lacks READ on topic '{topic}'" in text and "TOPIC_AUTHORIZATION_FAILED" in text, text[-2000:]
    with pytest.raises(Exception) as failure:
        _write(spark, intruder, topic, rows=[("x", "y")])
    text = str(failure.value)
    # the idempotent producer (Spark's default too) is denied its producer id first: no WRITE on any topic
    assert "CLUSTER_AUTHORIZATION_FAILED" in text and "needs WRITE on the topic" in text, text[-2000:]
    assert len(consume_all(secured.admin, topic)) == len(ROWS)  # nothing written by the intruder
    etl = spark_options(secured.bootstrap, pki)
    with pytest.raises(Exception) as failure:  # the group's committed offsets need READ on the group
        spark.read.format("pykafka").options(**etl, subscribe=topic, startingOffsets="group",
                                             **{"kafka.group.id": "etl-group"}).load().collect()
    text = str(failure.value)
    assert "GROUP_AUTHORIZATION_FAILED" in text and "lacks READ (and DESCRIBE) on group 'etl-group'" in text, \
        text[-2000:]


def test_spark_own_connector_with_the_same_options_reads_the_same_rows(secured, pki, tmp_path):
    """Spark's ``format("kafka")`` (the reference job, its own pyspark) and ``format("pykafka")`` with
    the same options against Apache Kafka's SASL_SSL listener: the same batch rows, the same
    AvailableNow micro-batches and checkpoint offsets, the same records written (each connector to
    its own topic, read back with confluent-kafka); the denied reads fail on both (the error
    texts are Kafka's Java exceptions and librdkafka's, recorded)."""
    if secured.name != "apache-kafka":
        pytest.skip("the reference connector runs against Apache Kafka's SASL_SSL listener only (time budget)")
    from integration_tests.helpers import produce
    from integration_tests.reference.test_reference_batch import reference_or_skip, run_job

    ref = reference_or_skip(type("Backend", (), {"name": "apache-kafka"})())
    topic = secured.topic(partitions=3)
    produce(secured.admin, topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 3,
                                    "headers": [("h", str(i).encode())] * (i % 2)} for i in range(24)])
    auth = ["TopicAuthorizationException", "TOPIC_AUTHORIZATION_FAILED", "SaslAuthenticationException",
            "Authentication failed during authentication due to invalid credentials"]

    def case(name, **opts):
        return {"name": name, "kind": "rows", "mentions": auth,
                "options": {**opts, "subscribe": topic, "includeHeaders": "true"}}

    cases = [case("jks_scram_sha_512", **spark_options(secured.bootstrap, pki)),
             case("pkcs12_scram_sha_256_no_host_check", **spark_options(
                 secured.bootstrap, pki, mechanism="SCRAM-SHA-256", truststore="PKCS12", hostname_check="")),
             case("no_read_acl", **spark_options(secured.bootstrap, pki, user="intruder")),
             case("wrong_password", **spark_options(secured.bootstrap, pki, password="not-the-password"))]
    jks = spark_options(secured.bootstrap, pki)
    cases.append({"name": "stream", "kind": "stream",
                  "options": {**jks, "subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10"}})
    targets = {fmt: secured.topic(partitions=2) for fmt in ("kafka", "pykafka")}
    written = [{"key": f"w{i}", "value": f"x{i}"} for i in range(12)]
    cases.append({"name": "write", "kind": "write", "options": jks, "topics": targets, "rows": written})
    result = run_job(ref, cases, tmp_path)["cases"]
    assert "ok" in result["stream"]["kafka"] and result["stream"]["pykafka"] == result["stream"]["kafka"], result["stream"]
    assert sum(len(records) for _, records in result["stream"]["kafka"]["ok"]["batches"]) == 24
    assert result["write"]["kafka"] == result["write"]["pykafka"] == {"ok": 12}, result["write"]
    landed = {fmt: sorted((m.key(), m.value()) for m in consume_all(secured.admin, t)) for fmt, t in targets.items()}
    assert landed["pykafka"] == landed["kafka"] == sorted((r["key"].encode(), r["value"].encode()) for r in written)
    for name in ("jks_scram_sha_512", "pkcs12_scram_sha_256_no_host_check"):
        kafka, pykafka = result[name]["kafka"], result[name]["pykafka"]
        assert "ok" in kafka and len(kafka["ok"]) == 24, (name, kafka)
        assert pykafka == kafka, name
    denied = {name: {fmt: result[name][fmt].get("error", {}).get("mentions") for fmt in ("kafka", "pykafka")}
              for name in ("no_read_acl", "wrong_password")}
    print(json.dumps(denied, indent=1))
    assert denied["no_read_acl"]["kafka"]["TopicAuthorizationException"], result["no_read_acl"]
    assert denied["no_read_acl"]["pykafka"]["TOPIC_AUTHORIZATION_FAILED"], result["no_read_acl"]
    for fmt in ("kafka", "pykafka"):
        assert denied["wrong_password"][fmt]["Authentication failed during authentication due to invalid credentials"], \
            result["wrong_password"]


@pytest.mark.parametrize("change,names", [
    ({"keystore_location": "/nonexistent/server.p12"}, "ssl.keystore.location"),
    ({"keystore_type": "JCEKS"}, "ssl.keystore.type"),
    ({"keystore_password": None}, "ssl.keystore.password"),
    ({"mechanisms": ("PLAIN",)}, "sasl.enabled.mechanisms"),
    ({"users": {"etl": "a,b"}}, "--add-scram"),
    ({"authorizer": True, "super_users": ("User:admin",)}, "super.users"),
    ({"iterations": 1000}, "minimum 4096"),
])
def test_sasl_ssl_settings_are_checked_before_any_jvm_starts(pki, change, names):
    from dataclasses import replace

    from pyspark_kafka.testing.apache_kafka import ApacheKafka, SaslSsl

    good = SaslSsl(str(pki.server_p12), STORE_PASSWORD, users={"etl": "pw"})
    good.check()
    with pytest.raises(ValueError, match=names.replace(".", r"\.").replace("-", r"\-")) as failure:
        ApacheKafka(sasl_ssl=replace(good, **change))
    assert "a,b" not in str(failure.value)


def test_apache_kafka_with_a_wrong_keystore_password_names_the_config(pki):
    from pyspark_kafka.testing.apache_kafka import ApacheKafka, KafkaStartError, SaslSsl
    from pyspark_kafka.testing.maven import MavenUnavailable

    kafka = ApacheKafka(sasl_ssl=SaslSsl(str(pki.server_p12), "wrong-keystore-pw", users={"etl": "pw-Tt5"}))
    try:
        with pytest.raises(KafkaStartError) as failure:
            kafka.start()
    except MavenUnavailable as e:
        pytest.skip(f"Apache Kafka unavailable: {e}")
    text = str(failure.value)
    assert "Failed to load SSL keystore" in text and "listener.name.sasl_ssl.ssl.keystore.password" in text, text[:3000]
    assert "wrong-keystore-pw" not in text and "pw-Tt5" not in text
    assert kafka.pids == {1: None} and kafka.folder is None  # stopped and cleaned up after the failure


def test_apache_kafka_with_a_pem_keystore_and_one_mechanism(pki):
    """SaslSsl's other key store form (PEM: chain + unencrypted PKCS8 key) and a single mechanism:
    librdkafka authenticates with SCRAM-SHA-256; SCRAM-SHA-512 is not enabled, so it is refused."""
    from confluent_kafka.admin import AdminClient

    from pyspark_kafka.testing.apache_kafka import ApacheKafka, SaslSsl
    from pyspark_kafka.testing.maven import MavenUnavailable

    kafka = ApacheKafka(sasl_ssl=SaslSsl(str(pki.server_pem), keystore_type="PEM", users={"etl": USERS["etl"]},
                                         mechanisms=("SCRAM-SHA-256",)))
    try:
        kafka.start()
    except MavenUnavailable as e:
        pytest.skip(f"Apache Kafka unavailable: {e}")
    try:
        def brokers(mechanism: str):
            admin = AdminClient({"bootstrap.servers": kafka.sasl_ssl_bootstrap_servers, "security.protocol": "SASL_SSL",
                                 "sasl.mechanism": mechanism, "sasl.username": "etl", "sasl.password": USERS["etl"],
                                 "ssl.ca.location": str(pki.ca_pem)})
            return admin.list_topics(timeout=5).brokers

        assert list(brokers("SCRAM-SHA-256")) == [1]
        with pytest.raises(Exception, match="Failed to get metadata|Broker transport failure|mechanism"):
            brokers("SCRAM-SHA-512")
    finally:
        kafka.stop()


def test_a_denied_idempotent_producer_always_names_the_cause(secured, pki):
    """Whichever way librdkafka surfaces the denied InitProducerId (KafkaException from flush, a
    ``_FATAL`` refusal in produce, confluent-kafka's SystemError whose cause is the fatal
    KafkaException, which raced about 1 run in 4 here, or a SystemError that lost it, about 1 flush
    in 20: then the message names the usual cause with the idempotent producer), the task fails
    with a DeliveryError naming CLUSTER_AUTHORIZATION_FAILED and the ACL. Without Spark:
    ``write_batches`` directly, 6 times (60 times by hand, both backends in CI)."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from pyspark_kafka.errors import DeliveryError
    from pyspark_kafka.write import WriteSpec, close_idle_producers, write_batches

    topic = secured.topic(partitions=1)
    spec = WriteSpec.from_options({**spark_options(secured.bootstrap, pki, user="intruder"), "topic": topic},
                                  StructType([StructField("value", StringType())]))
    for _ in range(6):
        with pytest.raises(DeliveryError, match="CLUSTER_AUTHORIZATION_FAILED.*needs WRITE on the topic"):
            write_batches(spec, [pa.RecordBatch.from_pydict({"value": ["a", "b", "c"]})])
        close_idle_producers()
    assert consume_all(secured.admin, topic) == []

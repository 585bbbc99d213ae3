"""Kafka's own ``kafka-acls`` tool (``org.apache.kafka.tools.AclCommand`` from the Maven Central jars)
against the embedded broker's ACL APIs over SASL_PLAINTEXT/SCRAM, as an operator would run it.

Adds literal and prefixed ACLs (with the tool's ``--producer`` / ``--consumer`` conveniences), lists them
in the tool's format, removes them, and fails with Kafka's ClusterAuthorizationException for a user
that may not ALTER the cluster. Skipped with the reason when Java or the jars are not there.
"""

from __future__ import annotations

import pytest

from pyspark_kafka.broker import EmbeddedBroker
from pyspark_kafka.broker.security.authorizer import STANDARD_AUTHORIZER
from support.kafka_tools import tool_server_for_module

pytestmark = pytest.mark.slow
ACLS = "org.apache.kafka.tools.AclCommand"
TOOL_TIMEOUT_S = 120
PASSWORDS = {"admin": "adm-tool-Pw53", "alice": "ali-tool-Pw19"}


@pytest.fixture(scope="module")
def tool_server():
    """Kafka's tools in one JVM for the module (support.kafka_tools.ToolServer); skips when the jars cannot be had."""
    yield from tool_server_for_module("AclCommand lives in kafka-tools from Kafka 4 on")


@pytest.fixture(scope="module")
def kafka_acls(tool_server, tmp_path_factory):
    """``kafka_acls(user, *args, ok=True) -> output`` against a broker with the StandardAuthorizer."""
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
    broker = EmbeddedBroker(config={"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                                    "sasl.enabled.mechanisms": "SCRAM-SHA-256", "sasl.jaas.config": jaas,
                                    "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}).start()
    configs = tmp_path_factory.mktemp("acl-tool")
    for user, password in PASSWORDS.items():
        (configs / f"{user}.properties").write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";\n')

    def run(user: str, *args: str, ok: bool = True) -> str:
        code, out = tool_server.run(ACLS, "--bootstrap-server", broker.bootstrap_servers, "--command-config",
                                    str(configs / f"{user}.properties"), *args, timeout_s=TOOL_TIMEOUT_S)
        assert (code == 0) is ok, f"kafka-acls {' '.join(args)} exited {code}:\n{out[-3000:]}"
        return out

    try:
        yield run
    finally:
        broker.stop()


def test_kafka_acls_add_list_remove(kafka_acls):
    kafka_acls("admin", "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders")
    kafka_acls("admin", "--add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "secret-",
               "--resource-pattern-type", "prefixed")
    listed = kafka_acls("admin", "--list", "--topic", "orders")
    assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in listed
    for op in ("WRITE", "DESCRIBE", "CREATE"):  # --producer: WRITE, DESCRIBE and CREATE on the topic
        assert f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" in listed, listed
    everything = kafka_acls("admin", "--list")
    assert "name=secret-, patternType=PREFIXED" in everything
    assert "(principal=User:alice, host=*, operation=READ, permissionType=DENY)" in everything
    denied = kafka_acls("alice", "--add", "--allow-principal", "User:alice", "--operation", "All", "--cluster",
                        ok=False)
    assert "ClusterAuthorizationException" in denied or "Cluster authorization failed" in denied, denied
    kafka_acls("admin", "--remove", "--force", "--topic", "orders")
    assert "name=orders" not in kafka_acls("admin", "--list")

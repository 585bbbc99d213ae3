"""The StandardAuthorizer's rules, table by table (Kafka's ``StandardAuthorizerData`` and
``Authorizer.authorizeByResourceType``), ACL filters (``AclBindingFilter.matches``, KIP-290 MATCH),
CreateAcls validation, the durable store and the broker configs that switch it on."""

from __future__ import annotations

import pytest

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.errors import ConfigError, InvalidRequestError, KafkaStorageError
from pyspark_kafka.broker.security.acls import (AclBinding, AclFilter, AclOperation, AclStore, PatternType,
                                                Permission, ResourceType, validate_binding, validate_filter)
from pyspark_kafka.broker.security.authorizer import (STANDARD_AUTHORIZER, StandardAuthorizer,
                                                      authorizer_from_config)

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = AclOperation
ALICE, HOST = "User:alice", "10.0.0.1"


def acl(rtype, name, op, perm=ALLOW, pattern=LIT, principal=ALICE, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(tmp_path, *acls, supers=(), allow_everyone=False) -> StandardAuthorizer:
    a = StandardAuthorizer(AclStore(tmp_path), frozenset(supers), allow_everyone)
    a.create(list(acls))
    return a


@pytest.mark.parametrize("granted, asked, allowed", [
    (Op.READ, Op.READ, True),
    (Op.READ, Op.WRITE, False),
    (Op.ALL, Op.DELETE, True),
    # READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS
    (Op.READ, Op.DESCRIBE, True), (Op.WRITE, Op.DESCRIBE, True), (Op.DELETE, Op.DESCRIBE, True),
    (Op.ALTER, Op.DESCRIBE, True), (Op.CREATE, Op.DESCRIBE, False), (Op.DESCRIBE_CONFIGS, Op.DESCRIBE, False),
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True), (Op.ALTER_CONFIGS, Op.ALTER, False),
    (Op.DESCRIBE, Op.READ, False),
])
def test_allow_and_implied_operations(tmp_path, granted, asked, allowed):
    a = authorizer(tmp_path, acl(T, "orders", granted))
    assert a.authorize(ALICE, HOST, asked, T, "orders") is allowed


@pytest.mark.parametrize("deny, asked, allowed", [
    (Op.READ, Op.READ, False),
    (Op.ALL, Op.READ, False),
    (Op.WRITE, Op.READ, True),
    (Op.READ, Op.DESCRIBE, True),  # implications never widen a DENY: DESCRIBE still allowed by the ALLOW ALL
])
def test_deny_beats_allow(tmp_path, deny, asked, allowed):
    a = authorizer(tmp_path, acl(T, "orders", Op.ALL), acl(T, "ord", deny, DENY, PRE))
    assert a.authorize(ALICE, HOST, asked, T, "orders") is allowed


def test_patterns_wildcards_principals_and_hosts(tmp_path):
    a = authorizer(tmp_path,
                   acl(T, "sales-", Op.READ, pattern=PRE),
                   acl(T, "*", Op.DESCRIBE, principal="User:*"),
                   acl(G, "etl", Op.READ, host="10.0.0.1"),
                   acl(X, "tx-", Op.WRITE, pattern=PRE, principal="User:bob"))
    assert a.authorize(ALICE, HOST, Op.READ, T, "sales-eu")
    assert not a.authorize(ALICE, HOST, Op.READ, T, "sale")          # shorter than the prefix
    assert not a.authorize(ALICE, HOST, Op.READ, T, "x-sales-eu")    # prefix, not substring
    assert a.authorize("User:zed", HOST, Op.DESCRIBE, T, "anything")  # LITERAL * and User:*
    assert not a.authorize("User:zed", HOST, Op.READ, T, "sales-eu")
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, G, "etl")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, G, "etl")     # host must match
    assert a.authorize("User:bob", HOST, Op.WRITE, X, "tx-1")
    assert not a.authorize(ALICE, HOST, Op.WRITE, X, "tx-1")
    assert not a.authorize(ALICE, HOST, Op.READ, T, "Sales-eu")      # names are case-sensitive


def test_no_acl_found_super_users_and_allow_everyone(tmp_path):
    (tmp_path / "a").mkdir()
    strict = authorizer(tmp_path / "a", acl(T, "guarded", Op.READ, principal="User:bob"), supers={"User:root"})
    assert not strict.authorize(ALICE, HOST, Op.READ, T, "free")      # no ACL at all: denied by default
    assert strict.authorize("User:root", HOST, Op.ALTER, C, "kafka-cluster")
    assert not strict.authorize(ALICE, HOST, Op.READ, T, "guarded")
    (tmp_path / "b").mkdir()
    lax = authorizer(tmp_path / "b", acl(T, "guarded", Op.READ, principal="User:bob"),
                     acl(T, "root-", Op.ALL, DENY, PRE, principal="User:root"), supers={"User:root"},
                     allow_everyone=True)
    assert lax.authorize(ALICE, HOST, Op.READ, T, "free")             # no ACL on it: allowed
    assert not lax.authorize(ALICE, HOST, Op.READ, T, "guarded")      # ACLs exist, none for alice
    assert lax.authorize("User:root", HOST, Op.READ, T, "root-x")     # super users ignore DENY


@pytest.mark.parametrize("acls, allowed", [
    ([], False),
    ([acl(T, "a", Op.WRITE)], True),
    ([acl(T, "a", Op.ALL)], True),
    ([acl(T, "a", Op.READ)], False),                                  # implications do not count here
    ([acl(T, "a", Op.WRITE), acl(T, "a", Op.WRITE, DENY)], False),
    ([acl(T, "ab", Op.WRITE, pattern=PRE), acl(T, "a", Op.WRITE, DENY, PRE)], False),
    ([acl(T, "ab", Op.WRITE, pattern=PRE), acl(T, "abc", Op.WRITE, DENY, PRE)], True),
    ([acl(T, "*", Op.WRITE)], True),
    ([acl(T, "a", Op.WRITE), acl(T, "*", Op.WRITE, DENY)], False),
    ([acl(T, "a", Op.WRITE, principal="User:bob")], False),
])
def test_authorize_by_resource_type(tmp_path, acls, allowed):
    """KIP-679: an idempotent producer needs WRITE on some topic (or IDEMPOTENT_WRITE on the cluster)."""
    a = authorizer(tmp_path, *acls)
    assert a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T) is allowed


def _filter(rtype=ResourceType.ANY, name=None, pattern=PatternType.ANY, principal=None, host=None,
            op=Op.ANY, perm=Permission.ANY) -> AclFilter:
    return AclFilter(rtype, name, pattern, principal, host, op, perm)


def test_filters_any_match_and_entry_fields():
    lit, star, pre = acl(T, "sales-eu", Op.READ), acl(T, "*", Op.READ), acl(T, "sales-", Op.WRITE, DENY, PRE)
    other = acl(G, "sales-eu", Op.READ, principal="User:bob", host="10.0.0.9")
    every = [lit, star, pre, other]
    assert [b for b in every if _filter().matches(b)] == every
    assert [b for b in every if _filter(T, "sales-eu").matches(b)] == [lit]              # ANY: exact name
    assert [b for b in every if _filter(T, "sales-eu", PatternType.MATCH).matches(b)] == [lit, star, pre]
    assert [b for b in every if _filter(T, "sales-", PRE).matches(b)] == [pre]
    assert [b for b in every if _filter(perm=DENY).matches(b)] == [pre]
    assert [b for b in every if _filter(principal="User:bob", host="10.0.0.9").matches(b)] == [other]
    assert [b for b in every if _filter(op=Op.WRITE).matches(b)] == [pre]


@pytest.mark.parametrize("binding, message", [
    (acl(ResourceType.ANY, "x", Op.READ), "Invalid resourceType"),
    (acl(T, "x", Op.READ, pattern=PatternType.MATCH), "Invalid patternType"),
    (acl(T, "x", Op.ANY), "Invalid operation"),
    (acl(T, "x", Op.READ, Permission.ANY), "Invalid permissionType"),
    (acl(C, "my-cluster", Op.ALTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(T, "", Op.READ), "Invalid empty resource name"),
    (acl(T, "x", Op.READ, principal="alice"), "Could not parse principal"),
    (AclBinding.from_wire(2, "x", 3, "User:a", "*", 99, 3), "Invalid operation UNKNOWN"),
])
def test_creations_kafka_refuses(binding, message):
    with pytest.raises(InvalidRequestError, match=message):
        validate_binding(binding)


def test_filter_with_unknown_codes_is_refused():
    validate_filter(_filter())
    with pytest.raises(InvalidRequestError, match="UNKNOWN"):
        validate_filter(_filter(rtype=ResourceType.UNKNOWN))


def test_store_is_durable_and_a_damaged_file_is_named(tmp_path):
    a = authorizer(tmp_path, acl(T, "orders", Op.READ), acl(G, "g-", Op.READ, pattern=PRE))
    a.delete({acl(T, "orders", Op.READ)})
    again = StandardAuthorizer(AclStore(tmp_path), frozenset(), False)
    assert again.store.bindings == {acl(G, "g-", Op.READ, pattern=PRE)}
    assert again.authorize(ALICE, HOST, Op.READ, G, "g-1") and not again.authorize(ALICE, HOST, Op.READ, T, "orders")
    (tmp_path / "acls.json").write_text("{not json")
    with pytest.raises(KafkaStorageError, match="acls.json"):
        AclStore(tmp_path)


def test_configs(tmp_path):
    assert authorizer_from_config(BrokerConfig(), tmp_path) is None
    on = authorizer_from_config(BrokerConfig({"authorizer.class.name": STANDARD_AUTHORIZER,
                                              "super.users": "User:admin; User:CN=ops,O=acme",
                                              "allow.everyone.if.no.acl.found": "true"}), tmp_path)
    assert on.super_users == {"User:admin", "User:CN=ops,O=acme"} and on.allow_everyone
    with pytest.raises(ConfigError, match="authorizer.class.name=.*AclAuthorizer.*StandardAuthorizer"):
        authorizer_from_config(BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}),
                               tmp_path)
    with pytest.raises(ConfigError, match="super.users"):
        authorizer_from_config(BrokerConfig({"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "admin"}),
                               tmp_path)
    with pytest.raises(ConfigError, match="allow.everyone.if.no.acl.found"):
        BrokerConfig({"allow.everyone.if.no.acl.found": "maybe"})

"""The embedded broker's authorizer: the rules of Kafka's ``StandardAuthorizer`` (KRaft).

Configs (Kafka's names): ``authorizer.class.name`` (empty: no authorization, every request is
allowed; ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``: ACLs are checked; any other
class stops the start with a ConfigError), ``super.users`` (``User:a;User:b``: allowed everything,
DENY ACLs included), ``allow.everyone.if.no.acl.found`` (false: a resource with no ACL at all is
denied to everyone but super users).

One decision (:meth:`StandardAuthorizer.authorize`, Kafka's ``StandardAuthorizerData.authorize``):

1. a super user is allowed;
2. the ACLs that apply to the resource are its LITERAL name, the LITERAL ``*`` and every PREFIXED
   pattern the name starts with (KIP-290); none at all → ``allow.everyone.if.no.acl.found``;
3. of those, the ones for this principal (or ``User:*``) and host (or ``*``): a DENY for the
   operation (or ALL) denies, whatever allows it (DENY beats ALLOW);
4. an ALLOW for the operation, ALL, or an operation implying it allows: READ, WRITE, DELETE and
   ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's ``IMPLIES_DESCRIBE``,
   ``IMPLIES_DESCRIBE_CONFIGS``; implications never apply to DENY);
5. otherwise denied.

:meth:`StandardAuthorizer.authorize_by_resource_type` is Kafka's ``Authorizer.authorizeByResourceType``
(KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic).
Denials are logged at DEBUG on ``pyspark_kafka.broker.authorizer`` (principal, operation, host,
resource; never a credential), as Kafka's ``kafka.authorizer.logger``.
"""

from __future__ import annotations

from collections import defaultdict

from pyspark_kafka.broker.errors import ConfigError
from pyspark_kafka.broker.log_escape import get_logger
from pyspark_kafka.broker.security.acls import (WILDCARD, WILDCARD_PRINCIPAL, AclBinding, AclOperation, AclStore,
                                                MetadataAcls, PatternType, Permission, ResourceType)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

Op = AclOperation
IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})

#: Operations each resource type supports (Kafka's ``AclEntry.supportedOperations``), for authorized-operation bitfields.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}

log = get_logger("pyspark_kafka.broker.authorizer")


def authorizer_from_config(config, data_dir) -> "StandardAuthorizer | None":
    """The broker's authorizer from ``authorizer.class.name`` (None: authorization is off).

    Raises ConfigError for another class name or a malformed ``super.users`` entry.
    """
    name = (config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name != STANDARD_AUTHORIZER:
        raise ConfigError(f"broker config authorizer.class.name={name!r} is not supported: the embedded broker has "
                          f"one authorizer, {STANDARD_AUTHORIZER} (leave the config empty for none)")
    supers = set()
    for entry in (config.get("super.users") or "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        if ":" not in entry or entry.startswith(":"):
            raise ConfigError(f"broker config super.users: {entry!r} is not a principal: write "
                              "User:<name>[;User:<name>...]")
        supers.add(entry)
    return StandardAuthorizer(AclStore(data_dir), frozenset(supers), config.get_bool("allow.everyone.if.no.acl.found"))


class StandardAuthorizer:
    """``StandardAuthorizer(store: AclStore | MetadataAcls, super_users: frozenset[str], allow_everyone: bool)``.

    Decisions take a principal string (``User:alice``), the client's IP (``127.0.0.1``), an
    :class:`AclOperation`, a :class:`ResourceType` and a resource name. On the single node ACLs change
    through :meth:`create` / :meth:`delete` (durable in ``acls.json`` before they take effect); on a
    cluster broker (:meth:`use_metadata`) they are the metadata image's, and :meth:`acls_changed` is
    called as each ``acl`` / ``remove_acl`` record is applied: the next decision uses them (Kafka's
    ``StandardAuthorizer.addAcl`` / ``removeAcl`` called by the broker's ``AclPublisher``).
    """

    def __init__(self, store: AclStore | MetadataAcls, super_users: frozenset[str], allow_everyone: bool):
        self.store = store
        self.super_users = super_users
        self.allow_everyone = allow_everyone
        self._index()

    @property
    def bindings(self) -> frozenset[AclBinding]:
        """Every ACL binding in use (DescribeAcls, DeleteAcls on the single node)."""
        return self.store.bindings

    def use_metadata(self, acls: dict[str, AclBinding]) -> None:
        """Take the ACLs from a cluster broker's metadata image (``acls``: its live ``{id: binding}``
        mapping) instead of ``acls.json``, which is then not read again."""
        self.store = MetadataAcls(acls)
        self._index()

    def acls_changed(self) -> None:
        """The ACL source changed (a metadata record was applied): re-index before the next decision
        (a replay of many records re-indexes once)."""
        self._stale = True

    def _index(self) -> None:
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for b in self.store.bindings:
            if b.pattern_type == PatternType.LITERAL:
                literal[(b.resource_type, b.resource_name)].append(b)
            else:
                prefixed[b.resource_type].append(b)
        self._literal, self._prefixed = dict(literal), dict(prefixed)
        self._stale = False

    # --- decisions ------------------------------------------------------------------------

    def _applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        if self._stale:
            self._index()
        acls = self._literal.get((resource_type, name), []) + self._literal.get((resource_type, WILDCARD), [])
        return acls + [b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.resource_name)]

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """True when ``principal`` from ``host`` may do ``operation`` on the resource (rules in the module doc)."""
        if principal in self.super_users:
            return True
        acls = self._applicable(resource_type, name)
        if not acls:
            allowed = self.allow_everyone
        else:
            allowed = False
            for b in acls:
                if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                    continue
                if b.host != WILDCARD and b.host != host:
                    continue
                if b.permission == Permission.DENY:
                    if b.operation == Op.ALL or b.operation == operation:
                        allowed = False
                        break
                elif (b.operation == Op.ALL or b.operation == operation
                      or (operation == Op.DESCRIBE and b.operation in IMPLIES_DESCRIBE)
                      or (operation == Op.DESCRIBE_CONFIGS and b.operation in IMPLIES_DESCRIBE_CONFIGS)):
                    allowed = True
        if not allowed:
            log.debug("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s",
                      principal, operation.name, host, resource_type.name, name)
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """True when ``principal`` may do ``operation`` on at least one resource of ``resource_type``
        (Kafka's ``Authorizer.authorizeByResourceType``): allowed on a hard-coded name (super users,
        no ACLs and ``allow.everyone.if.no.acl.found``), or some LITERAL/PREFIXED ALLOW for exactly this
        operation (or ALL) that no DENY covers (a LITERAL ``*`` DENY covers all, a LITERAL DENY the same
        name, a PREFIXED DENY every name it prefixes). Implied operations do not count here."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal, deny_prefix, allow = set(), set(), []
        for b in self.bindings:
            if b.resource_type != resource_type or (b.host != WILDCARD and b.host != host):
                continue
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.operation != operation and b.operation != Op.ALL:
                continue
            if b.permission == Permission.DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.resource_name == WILDCARD:
                        return False
                    deny_literal.add(b.resource_name)
                else:
                    deny_prefix.add(b.resource_name)
            elif b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
                return True
            else:
                allow.append(b)
        for b in allow:
            if b.pattern_type == PatternType.LITERAL and b.resource_name in deny_literal:
                continue
            if not any(b.resource_name[:i] in deny_prefix for i in range(1, len(b.resource_name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bitfield (1 << operation code) of the supported operations allowed on the resource
        (Kafka's ``AuthHelper.authorizedOperations``, e.g. Metadata's ``topic_authorized_operations``)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << int(op)
        return bits

    # --- changes --------------------------------------------------------------------------

    def create(self, bindings: list[AclBinding]) -> None:
        """Add ``bindings`` (already validated; existing ones are kept once) durably, then use them
        (the single node; a cluster broker's store raises InvalidRequestError)."""
        self.store.apply(set(bindings), set())
        self._index()

    def delete(self, bindings: set[AclBinding]) -> None:
        """Remove ``bindings`` durably, then stop using them."""
        self.store.apply(set(), set(bindings))
        self._index()


def all_operations(resource_type: ResourceType) -> int:
    """The bitfield of every supported operation of ``resource_type`` (what Kafka answers without an authorizer)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << int(op)
    return bits

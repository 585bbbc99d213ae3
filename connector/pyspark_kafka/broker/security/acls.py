"""ACL bindings, filters and their durable store: Kafka's ``org.apache.kafka.common.acl`` model.

- Wire codes (int8, as CreateAcls/DescribeAcls/DeleteAcls carry them): :class:`ResourceType`,
  :class:`PatternType`, :class:`AclOperation`, :class:`Permission` (Kafka's ``ResourceType``,
  ``PatternType``, ``AclOperation``, ``AclPermissionType`` codes).
- :class:`AclBinding`: a resource pattern (type, name, LITERAL or PREFIXED; LITERAL ``*`` is the
  wildcard) plus an entry (principal ``User:<name>`` or ``User:*``, host ``*`` or an IP, operation,
  ALLOW or DENY).
- :class:`AclFilter`: DescribeAcls/DeleteAcls filters with Kafka's ``ResourcePatternFilter`` and
  ``AccessControlEntryFilter`` matching (ANY matches every pattern type exactly by name; MATCH
  matches the patterns that would apply to the named resource: the literal name, the LITERAL ``*``
  and every PREFIXED pattern the name starts with; KIP-290).
- :func:`validate_binding` / :func:`validate_filter`: what Kafka refuses with INVALID_REQUEST
  (``AclControlManager.validateNewAcl``, ``AclApis``).
- :class:`AclStore`: the single node's bindings in ``<data dir>/acls.json``, every change rewritten
  atomically (temporary file, fsync, rename, fsync of the directory), so a SIGKILL leaves the old or the new set.
- :class:`MetadataAcls`: a cluster broker's bindings, those of its metadata image (``acl`` records written by
  the controller, :mod:`~pyspark_kafka.broker.controller.acl_control`; Kafka's ``StandardAuthorizer`` loading
  ``AccessControlEntryRecord``s, KIP-500/KIP-631). They change only through the metadata log.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from pyspark_kafka.broker.errors import InvalidRequestError, KafkaError, KafkaStorageError
from pyspark_kafka.kafka.fsutil import atomic_write

FILE_NAME = "acls.json"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    """Kafka's ``ResourceType`` codes (DELEGATION_TOKEN and USER are accepted but never checked here)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's ``PatternType`` codes: ANY and MATCH only in filters (KIP-290)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` codes; ANY only in filters, ALL matches every operation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    """Kafka's ``AclPermissionType`` codes; ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _code(enum, value: int):
    """``enum(value)``, or the enum's UNKNOWN for a code Kafka does not define (as Kafka's ``fromCode``)."""
    try:
        return enum(value)
    except ValueError:
        return enum.UNKNOWN


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``(resource_type, resource_name, pattern_type)`` and ``(principal, host, operation,
    permission)``; the enum fields hold the wire codes."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: Permission

    @classmethod
    def from_wire(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
                  operation: int, permission: int) -> "AclBinding":
        """A binding from a CreateAcls ``AclCreation``'s fields (unknown codes become UNKNOWN)."""
        return cls(_code(ResourceType, resource_type), resource_name, _code(PatternType, pattern_type), principal,
                   host, _code(AclOperation, operation), _code(Permission, permission))

    def to_json(self) -> list:
        """The 7 fields as a JSON list (codes as ints); ``AclBinding.from_wire(*lst)`` reads it back."""
        return [int(self.resource_type), self.resource_name, int(self.pattern_type), self.principal, self.host,
                int(self.operation), int(self.permission)]


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter; None in a string field matches anything (Kafka's null)."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: Permission

    @classmethod
    def from_wire(cls, f) -> "AclFilter":
        """A filter from a DescribeAclsRequest or a DeleteAclsFilter entity."""
        return cls(_code(ResourceType, f.resource_type_filter), f.resource_name_filter,
                   _code(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
                   _code(AclOperation, f.operation), _code(Permission, f.permission_type))

    @classmethod
    def from_json(cls, fields: list) -> "AclFilter":
        """A filter from :meth:`to_json`'s list (as the controller channel carries it)."""
        rt, name, pt, principal, host, op, perm = fields
        return cls(_code(ResourceType, rt), name, _code(PatternType, pt), principal, host, _code(AclOperation, op),
                   _code(Permission, perm))

    def to_json(self) -> list:
        """The 7 fields as a JSON list (codes as ints, None for a null string filter)."""
        return [int(self.resource_type), self.resource_name, int(self.pattern_type), self.principal, self.host,
                int(self.operation), int(self.permission)]

    def matches(self, b: AclBinding) -> bool:
        """Kafka's ``AclBindingFilter.matches``: the pattern filter and the entry filter both match."""
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, b.pattern_type):
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type == PatternType.LITERAL:  # MATCH
                if b.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(b.resource_name):  # MATCH against a PREFIXED pattern
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission == Permission.ANY or self.permission == b.permission


def validate_binding(b: AclBinding) -> None:
    """Raise InvalidRequestError (INVALID_REQUEST) for a binding Kafka refuses to create
    (``AclControlManager.validateNewAcl`` and ``AclApis.handleCreateAcls``)."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"Invalid resourceType {b.resource_type.name}: use TOPIC, GROUP, CLUSTER or "
                                  "TRANSACTIONAL_ID")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"Invalid patternType {b.pattern_type.name}: use LITERAL or PREFIXED")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"Invalid operation {b.operation.name}")
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidRequestError(f"Invalid permissionType {b.permission.name}: use ALLOW or DENY")
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not b.resource_name:
        raise InvalidRequestError("Invalid empty resource name")
    if ":" not in b.principal:
        raise InvalidRequestError(f"Could not parse principal from `{b.principal}` (no colon is present separating "
                                  "the principal type from the principal name)")
    if not b.host:
        raise InvalidRequestError("Invalid empty host: use * or an IP address")


def validate_filter(f: AclFilter) -> None:
    """Raise InvalidRequestError for a filter with an UNKNOWN element (Kafka: "Filter contain UNKNOWN elements")."""
    if ResourceType.UNKNOWN == f.resource_type or PatternType.UNKNOWN == f.pattern_type or \
            AclOperation.UNKNOWN == f.operation or Permission.UNKNOWN == f.permission:
        raise InvalidRequestError("Filter contain UNKNOWN elements: resource type, pattern type, operation and "
                                  "permission type must be known codes (ANY to match everything)")


def creation_results(bindings: list[AclBinding]) -> list[dict]:
    """Per binding of a CreateAcls request, in order: ``{"error_code", "error_message"}``, INVALID_REQUEST
    with :func:`validate_binding`'s message, or NONE (0) for one to create. Used by the single node and by
    the cluster's controller alike, so both answer the same."""
    results = []
    for b in bindings:
        try:
            validate_binding(b)
        except KafkaError as exc:
            results.append({"error_code": int(exc.error_code), "error_message": str(exc)})
            continue
        results.append({"error_code": 0, "error_message": None})
    return results


def deletion_results(filters: list[AclFilter], acls: dict) -> tuple[list[dict], dict]:
    """``(results, matched)`` of a DeleteAcls request over ``acls`` (``{key: AclBinding}``, the key an ACL id
    or the binding itself): per filter in order ``{"error_code", "error_message", "matching": [AclBinding,
    sorted, each once]}`` (INVALID_REQUEST for a filter :func:`validate_filter` refuses), and the keys of every
    matched ACL (an insertion-ordered dict used as a set: one removal however many filters match it)."""
    results, matched = [], {}
    for f in filters:
        try:
            validate_filter(f)
        except KafkaError as exc:
            results.append({"error_code": int(exc.error_code), "error_message": str(exc), "matching": []})
            continue
        hits = sorted(((b, str(key)), key) for key, b in acls.items() if f.matches(b))
        matched.update((key, None) for _, key in hits)
        results.append({"error_code": 0, "error_message": None,
                        "matching": list(dict.fromkeys(b for (b, _), _ in hits))})
    return results, matched


class AclStore:
    """``AclStore(data_dir)``: the set of :class:`AclBinding` in ``acls.json`` (a JSON list of
    7-element lists: type, name, pattern type, principal, host, operation, permission codes).

    Raises KafkaStorageError when the file cannot be read or written (naming the file and the fix).
    """

    def __init__(self, data_dir: str | Path):
        self.path = Path(data_dir) / FILE_NAME
        self._lock = threading.Lock()
        self.bindings: frozenset[AclBinding] = frozenset()
        if self.path.exists():
            try:
                raw = json.loads(self.path.read_text())
                self.bindings = frozenset(AclBinding.from_wire(*entry) for entry in raw)
            except (OSError, ValueError, TypeError) as e:
                raise KafkaStorageError(f"cannot read the ACL store {self.path} ({type(e).__name__}); restore it "
                                        "from a backup, or remove it and re-create the ACLs") from None

    def apply(self, add: set[AclBinding], remove: set[AclBinding]) -> None:
        """Add and remove bindings in one durable write (no write when nothing changes)."""
        with self._lock:
            new = (self.bindings - remove) | add
            if new == self.bindings:
                return
            data = json.dumps(sorted(b.to_json() for b in new)).encode()
            try:
                atomic_write(self.path, data)
            except OSError as e:
                raise KafkaStorageError(f"cannot write the ACL store {self.path}: {e.strerror or e}") from None
            self.bindings = frozenset(new)


class MetadataAcls:
    """``MetadataAcls(acls)``: the ACLs of a cluster broker's metadata image, ``acls`` the image's live
    ``{acl id: AclBinding}`` mapping (applied from ``acl`` / ``remove_acl`` records in offset order).

    Read-only here: :meth:`apply` raises InvalidRequestError, since a cluster's ACLs change only through the
    controller (CreateAcls / DeleteAcls are forwarded to it).
    """

    def __init__(self, acls: dict[str, AclBinding]):
        self.acls = acls

    @property
    def bindings(self) -> frozenset[AclBinding]:
        """Every binding of the image (one binding under two ids counts once)."""
        return frozenset(self.acls.values())

    def apply(self, add: set[AclBinding], remove: set[AclBinding]) -> None:
        raise InvalidRequestError("a cluster broker's ACLs change only through the controller's metadata log: "
                                  "send CreateAcls / DeleteAcls to any broker, it forwards them")

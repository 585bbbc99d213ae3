"""The controller's ACL rules (Kafka's ``AclControlManager``, ``metadata`` module): CreateAcls and DeleteAcls of a
replicated cluster become metadata records every broker applies.

Kafka's KRaft brokers forward CreateAcls / DeleteAcls to the active controller (KIP-590), which validates them and
writes ``AccessControlEntryRecord`` / ``RemoveAccessControlEntryRecord`` (KIP-500, KIP-631) to the metadata log;
each broker's ``StandardAuthorizer`` applies the records as its metadata image reaches them. Ours, as pure
functions of the :class:`~pyspark_kafka.broker.controller.image.ClusterImage` (records in its module doc):

- :func:`create_acls`: each creation is validated with the single node's rules
  (:func:`~pyspark_kafka.broker.security.acls.validate_binding`: the same INVALID_REQUEST codes and messages);
  a valid one not yet in the image (nor earlier in the same request) gets a fresh random id (a UUID, as Kafka's
  ``newAclId``) and one ``acl`` record; one already there succeeds and writes nothing (Kafka's ``existingAcls``).
- :func:`delete_acls`: each filter is validated
  (:func:`~pyspark_kafka.broker.security.acls.validate_filter`); a valid one answers every ACL of the image it
  matches (sorted), and each matched id gets one ``remove_acl`` record however many filters match it (Kafka keeps
  the removal records in a set).

Both are atomic as Kafka's (``ControllerResult.atomicOf``): the caller appends all records of one request in one
append, so no broker ever sees half of a request.
"""

from __future__ import annotations

import uuid

from pyspark_kafka.broker.controller.image import ClusterImage, acl_record
from pyspark_kafka.broker.security.acls import AclBinding, AclFilter, creation_results, deletion_results


def _new_id(taken) -> str:
    while True:
        acl_id = str(uuid.uuid4())
        if acl_id not in taken:
            return acl_id


def create_acls(image: ClusterImage, creations: list[list]) -> tuple[list[dict], list[dict]]:
    """``(results, records)`` for CreateAcls' ``creations`` (each a 7-field list,
    :meth:`~pyspark_kafka.broker.security.acls.AclBinding.to_json`): per creation ``{"error_code",
    "error_message"}`` in request order, and the ``acl`` records of the new bindings."""
    bindings = [AclBinding.from_wire(*fields) for fields in creations]
    results = creation_results(bindings)
    records = []
    existing, taken = set(image.acls.values()), set(image.acls)
    for binding, result in zip(bindings, results):
        if result["error_code"] == 0 and binding not in existing:
            existing.add(binding)
            acl_id = _new_id(taken)
            taken.add(acl_id)
            records.append(acl_record(acl_id, binding))
    return results, records


def delete_acls(image: ClusterImage, filters: list[list]) -> tuple[list[dict], list[dict]]:
    """``(results, records)`` for DeleteAcls' ``filters`` (each a 7-field list,
    :meth:`~pyspark_kafka.broker.security.acls.AclFilter.to_json`): per filter ``{"error_code", "error_message",
    "matching_acls": [7-field binding lists]}``, and one ``remove_acl`` record per matched id."""
    results, matched = deletion_results([AclFilter.from_json(f) for f in filters], image.acls)
    for r in results:
        r["matching_acls"] = [b.to_json() for b in r.pop("matching")]
    return results, [{"type": "remove_acl", "id": acl_id} for acl_id in matched]

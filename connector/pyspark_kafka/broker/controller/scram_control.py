"""The controller's SCRAM rules (Kafka's ``ScramControlManager``, ``metadata`` module): AlterUserScramCredentials
becomes metadata records every broker applies (KIP-554 on KRaft).

Kafka's KRaft brokers forward AlterUserScramCredentials to the active controller, which validates it once and
writes ``UserScramCredentialRecord`` / ``RemoveUserScramCredentialRecord`` to the metadata log; each broker's
``ScramImage`` holds the credentials, and SASL/SCRAM authentication and DescribeUserScramCredentials read it. Ours,
as a pure function of the credentials the image holds (records in
:mod:`~pyspark_kafka.broker.controller.image`'s module doc):

- :func:`alter_credentials`: the rules of Kafka 4.4's ``ScramControlManager.alterCredentials`` (read from its
  bytecode): a user named twice in one request, in deletions or upsertions and whatever the mechanisms, is refused
  DUPLICATE_RESOURCE ("A user credential cannot be altered twice in the same request") and none of its changes is
  made; otherwise the first refusal of a user wins: UNACCEPTABLE_CREDENTIAL for an empty name ("Username must not be
  empty"), UNSUPPORTED_SASL_MECHANISM for a mechanism other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) ("Unknown
  SCRAM mechanism"), RESOURCE_NOT_FOUND for the deletion of a credential the image does not hold ("Attempt to
  delete a user credential that does not exist"), UNACCEPTABLE_CREDENTIAL for iterations below 4096 ("Too few
  iterations") or above 16384 ("Too many iterations"). An empty salt or salted password is refused
  UNACCEPTABLE_CREDENTIAL (our rule, kept from the single node: Kafka's ``ScramFormatter`` fails on an empty key).
- The records carry what authentication needs and no more: salt, StoredKey, ServerKey and iterations (never the
  salted password), as Kafka's ``UserScramCredentialRecord``.

Atomic as Kafka's (``ControllerResult.atomicOf``): the caller appends all records of one request in one append.
"""

from __future__ import annotations

import base64

from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_ID,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted_password,
)

DUPLICATE = "A user credential cannot be altered twice in the same request"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def credential_record(user: str, mechanism: str, c: ScramCredential) -> dict:
    """The ``scram_credential`` record of ``user``'s credential for ``mechanism`` (a name such as
    ``SCRAM-SHA-256``): Kafka's ``UserScramCredentialRecord`` (mechanism as its wire id, bytes in base64)."""
    return {"type": "scram_credential", "name": user, "mechanism": MECHANISMS[mechanism][1], "salt": _b64(c.salt),
            "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key), "iterations": c.iterations}


def credential_of(record: dict) -> tuple[str, str, ScramCredential] | None:
    """``(user, mechanism name, credential)`` of a ``scram_credential`` record; None for an unknown mechanism id
    (ignored, as Kafka's image ignores what it cannot use)."""
    mech = MECHANISM_BY_ID.get(record["mechanism"])
    if mech is None:
        return None
    return record["name"], mech, ScramCredential(base64.b64decode(record["salt"]), base64.b64decode(record["stored_key"]),
                                                 base64.b64decode(record["server_key"]), int(record["iterations"]))


def _name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    """Kafka's ``validateScramUsernameAndMechanism``: the refusal ``(code, message)``, or None."""
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISM_BY_ID:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def alter_credentials(held, deletions: list[dict], upsertions: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(results, records)`` for one AlterUserScramCredentials request.

    ``held(user, mechanism name) -> bool``: whether the image holds that credential. ``deletions``: ``[{"name",
    "mechanism"}]`` (mechanism as its wire id); ``upsertions``: ``[{"name", "mechanism", "iterations", "salt",
    "salted_password"}]`` (bytes in base64), in request order. ``results``: one ``{"user", "error_code",
    "error_message"}`` per user named, in the order first named (``error_message`` None on success, as Kafka);
    ``records``: the ``remove_scram_credential`` and ``scram_credential`` records of the accepted changes. Raises
    nothing (a request is answered per user)."""
    errors: dict[str, tuple[int, str]] = {}
    to_delete: dict[str, dict] = {}
    to_upsert: dict[str, dict] = {}
    order = list(dict.fromkeys([d["name"] for d in deletions] + [u["name"] for u in upsertions]))
    for d in deletions:
        name = d["name"]
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None:
            errors[name] = (ErrorCode.duplicate_resource, DUPLICATE)
            continue
        refused = _name_and_mechanism(name, d["mechanism"])
        if refused is None and not held(name, MECHANISM_BY_ID[d["mechanism"]]):
            refused = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
        if refused is not None:
            errors[name] = refused
        else:
            to_delete[name] = d
    for u in upsertions:
        name = u["name"]
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            errors[name] = (ErrorCode.duplicate_resource, DUPLICATE)
            continue
        refused = _name_and_mechanism(name, u["mechanism"])
        if refused is None:
            if u["iterations"] < MIN_ITERATIONS:
                refused = (ErrorCode.unacceptable_credential, "Too few iterations")
            elif u["iterations"] > MAX_ITERATIONS:
                refused = (ErrorCode.unacceptable_credential, "Too many iterations")
            elif not u["salt"] or not u["salted_password"]:
                refused = (ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
        if refused is not None:
            errors[name] = refused
        else:
            to_upsert[name] = u
    records: list[dict] = []
    for name, d in to_delete.items():
        records.append({"type": "remove_scram_credential", "name": name, "mechanism": d["mechanism"]})
    for name, u in to_upsert.items():
        mech = MECHANISM_BY_ID[u["mechanism"]]
        credential = credential_from_salted_password(mech, base64.b64decode(u["salt"]),
                                                     base64.b64decode(u["salted_password"]), u["iterations"])
        records.append(credential_record(name, mech, credential))
    results = []
    for name in order:
        code, message = errors.get(name, (ErrorCode.none, None))
        results.append({"user": name, "error_code": int(code), "error_message": message})
    return results, records


def request_entries(request) -> tuple[list[dict], list[dict]]:
    """``(deletions, upsertions)`` of a decoded AlterUserScramCredentials request as the controller channel's JSON
    (bytes in base64), for :func:`alter_credentials`."""
    deletions = [{"name": d.name, "mechanism": int(d.mechanism)} for d in request.deletions]
    upsertions = [{"name": u.name, "mechanism": int(u.mechanism), "iterations": int(u.iterations),
                   "salt": _b64(bytes(u.salt)), "salted_password": _b64(bytes(u.salted_password))}
                  for u in request.upsertions]
    return deletions, upsertions

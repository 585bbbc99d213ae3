"""Where a broker finds SCRAM credentials.

- :class:`MetadataCredentials`: a broker of a cluster and the combined node (the default node) read the
  credentials of their metadata image (``scram_credential`` records the controller writes for
  AlterUserScramCredentials; Kafka's ``ScramImage``), the same on every broker.
- :class:`CredentialStore`: the transitional single node (``process.roles=broker`` without voters) keeps them in
  ``<data dir>/scram-credentials.json``; a combined node's first start migrates that file into records
  (:func:`~pyspark_kafka.broker.cluster.combined.migration_records`).

Both hold per user and mechanism only salt, StoredKey, ServerKey and iterations (never a password
or salted password), as Kafka's ``UserScramCredentialRecord``. The file store rewrites the file
atomically on every change (temporary file, fsync, rename, fsync of the directory), mode 0600, so a
SIGKILL leaves either the old or the new credentials.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

from pyspark_kafka.broker.errors import KafkaStorageError
from pyspark_kafka.broker.security.scram import MECHANISMS, ScramCredential

FILE_NAME = "scram-credentials.json"


class MetadataCredentials:
    """``MetadataCredentials(scram)``: the credentials of a metadata image, ``scram`` being the image's
    ``{(user, mechanism): ScramCredential}`` dict (read at each lookup: a record applied is used by the next
    authentication, as Kafka's ``ScramPublisher`` updates the credential cache). Read-only; raises nothing."""

    def __init__(self, scram: dict) -> None:
        self._scram = scram

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of ``user`` for ``mechanism`` (``SCRAM-SHA-256`` / ``SCRAM-SHA-512``), or None."""
        return self._scram.get((user, mechanism))

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """``{user: {mechanism: credential}}`` sorted by user."""
        out: dict[str, dict[str, ScramCredential]] = {}
        for (user, mech), cred in sorted(self._scram.items()):
            out.setdefault(user, {})[mech] = cred
        return out


class CredentialStore:
    """``CredentialStore(data_dir)``: ``{(user, mechanism): ScramCredential}`` kept in the data dir.

    Raises KafkaStorageError when the file cannot be read or written (the message names the
    file, never its content).
    """

    def __init__(self, data_dir: str | Path):
        self.path = Path(data_dir) / FILE_NAME
        self._lock = threading.Lock()
        self._creds: dict[tuple[str, str], ScramCredential] = {}
        if self.path.exists():
            try:
                raw = json.loads(self.path.read_text())
                for user, mechs in raw.items():
                    for mech, c in mechs.items():
                        if mech in MECHANISMS:
                            self._creds[(user, mech)] = ScramCredential(
                                base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                                base64.b64decode(c["server_key"]), int(c["iterations"]))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise KafkaStorageError(f"cannot read the SCRAM credential store {self.path} "
                                        f"({type(e).__name__}); restore it or remove it and re-create the users") from None

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of ``user`` for ``mechanism``, or None."""
        return self._creds.get((user, mechanism))

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """``{user: {mechanism: credential}}`` sorted by user."""
        out: dict[str, dict[str, ScramCredential]] = {}
        for (user, mech), cred in sorted(self._creds.items()):
            out.setdefault(user, {})[mech] = cred
        return out

    def apply(self, upserts: dict[tuple[str, str], ScramCredential], deletes: set[tuple[str, str]]) -> None:
        """Set and remove credentials in one durable write."""
        with self._lock:
            creds = dict(self._creds)
            for key in deletes:
                creds.pop(key, None)
            creds.update(upserts)
            self._write(creds)
            self._creds = creds

    def _write(self, creds: dict[tuple[str, str], ScramCredential]) -> None:
        data: dict[str, dict] = {}
        for (user, mech), c in sorted(creds.items()):
            data.setdefault(user, {})[mech] = {
                "salt": base64.b64encode(c.salt).decode(), "stored_key": base64.b64encode(c.stored_key).decode(),
                "server_key": base64.b64encode(c.server_key).decode(), "iterations": c.iterations}
        tmp = self.path.with_suffix(".json.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as e:
            raise KafkaStorageError(f"cannot write the SCRAM credential store {self.path}: {e.strerror or e}") from None

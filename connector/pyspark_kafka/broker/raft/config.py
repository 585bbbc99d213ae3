"""The controller quorum's settings, with Kafka's names and defaults (``QuorumConfig``, KIP-595).

=========================================== ========= ==================================================
name                                        default   meaning
=========================================== ========= ==================================================
``node.id``                                 (needed)  this replica's id
``controller.quorum.voters``                (needed)  ``id@host:port,...``: the voters and their controller
                                                      listeners (a node not listed is an observer)
``controller.quorum.election.timeout.ms``   1000      a voter without a leader starts an election after a
                                                      random time in [timeout, 2 x timeout)
``controller.quorum.fetch.timeout.ms``      2000      a follower that could not fetch for this long starts an
                                                      election; a leader that no majority fetched from for
                                                      1.5 x this resigns (Kafka's check-quorum)
``controller.quorum.election.backoff.max.ms`` 1000    max random back-off before a failed candidate retries
``controller.quorum.request.timeout.ms``    2000      one Raft request's time limit
=========================================== ========= ==================================================
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULTS = {
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.election.backoff.max.ms": 1000,
    "controller.quorum.request.timeout.ms": 2000,
}


class QuorumConfigError(ValueError):
    """A malformed controller quorum setting (names the setting and the expected form)."""


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``"0@127.0.0.1:9093,1@127.0.0.1:9094"`` → ``{0: ("127.0.0.1", 9093), 1: (...)}``.

    Raises QuorumConfigError for an entry not of the form ``id@host:port`` or a repeated id.
    """
    voters: dict[int, tuple[str, int]] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            node, address = entry.split("@", 1)
            host, port = address.rsplit(":", 1)
            node_id, port_no = int(node), int(port)
        except ValueError:
            raise QuorumConfigError(f"controller.quorum.voters entry {entry!r} is not of the form id@host:port "
                                    "(e.g. 0@127.0.0.1:9093)") from None
        if node_id in voters:
            raise QuorumConfigError(f"controller.quorum.voters lists node {node_id} twice")
        voters[node_id] = (host.strip("[]"), port_no)
    if not voters:
        raise QuorumConfigError("controller.quorum.voters is empty: list the voters as id@host:port,...")
    return voters


@dataclass(frozen=True)
class QuorumConfig:
    """Parsed settings; durations in ms. Build with :meth:`from_config`."""

    node_id: int
    voters: dict[int, tuple[str, int]]
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000

    @classmethod
    def from_config(cls, config: dict[str, str]) -> "QuorumConfig":
        """From Kafka-named string settings (see the module table). Raises QuorumConfigError."""
        try:
            node_id = int(config["node.id"])
        except (KeyError, ValueError):
            raise QuorumConfigError("node.id must be set to an integer for a controller quorum member") from None
        values = {}
        for name, default in DEFAULTS.items():
            raw = config.get(name, default)
            try:
                values[name] = int(raw)
            except ValueError:
                raise QuorumConfigError(f"{name}={raw!r} is not an integer number of ms") from None
            if values[name] <= 0:
                raise QuorumConfigError(f"{name}={raw!r} must be positive")
        return cls(node_id, parse_voters(config.get("controller.quorum.voters", "")),
                   values["controller.quorum.election.timeout.ms"], values["controller.quorum.fetch.timeout.ms"],
                   values["controller.quorum.election.backoff.max.ms"], values["controller.quorum.request.timeout.ms"])

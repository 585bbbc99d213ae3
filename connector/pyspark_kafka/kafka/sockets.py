"""Reading exactly n bytes from a blocking socket: the one helper the broker's process cluster and the
test clusters' raw Kafka requests share. Imports nothing from the package (a module both sides use,
like :mod:`pyspark_kafka.kafka.fsutil`)."""

from __future__ import annotations

import socket


def recv_exactly(sock: socket.socket, n: int, during: str = "") -> bytes:
    """The next ``n`` bytes of ``sock`` (blocking, honouring its timeout). Raises OSError when the peer
    closes the connection first (``during`` names what was being read, e.g. "during ApiVersions"), or
    ``socket.timeout`` from the socket."""
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise OSError("the broker closed the connection" + (f" {during}" if during else ""))
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)

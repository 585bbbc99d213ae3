"""An asyncio Kafka-protocol client for broker-to-broker requests (the follower's Fetch and
OffsetForLeaderEpoch), on kio's generated request/response classes.

One connection to one broker, reopened after a failure; one request at a time. Flexible versions use request
header v2 and response header v1, older ones v1 and v0 (Kafka's ``NetworkClient`` rules).
"""

from __future__ import annotations

import asyncio
import struct

from pyspark_kafka.kafka import wire_header


class PeerClient:
    """``PeerClient(host, port, client_id)``; :meth:`send` returns the decoded response or raises ConnectionError."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.address = (host, port)
        self.client_id = client_id
        self._conn = None
        self._correlation = 0

    async def send(self, request, response_type, timeout_s: float):
        """Send kio ``request``; decode the answer as ``response_type``; ConnectionError on any failure or timeout."""
        self._correlation += 1
        frame_out = wire_header.encode_request(request, self._correlation, self.client_id)
        try:
            if self._conn is None:
                self._conn = await asyncio.wait_for(asyncio.open_connection(*self.address), timeout_s)
            reader, writer = self._conn
            writer.write(frame_out)
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
            frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.close()
            raise ConnectionError(f"broker {self.address[0]}:{self.address[1]} failed: {exc!r}") from None
        _, response = wire_header.decode_response(frame, request.__api_key__, response_type)
        return response

    def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

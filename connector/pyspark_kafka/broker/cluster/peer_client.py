"""An asyncio Kafka-protocol client for broker-to-broker requests (the follower's Fetch and
OffsetForLeaderEpoch), on kio's generated request/response classes.

One connection to one broker, reopened after a failure; one request at a time. Flexible versions use request
header v2 and response header v1, older ones v1 and v0 (Kafka's ``NetworkClient`` rules).
"""

from __future__ import annotations

import asyncio
import io
import struct

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer


class PeerClient:
    """``PeerClient(host, port, client_id)``; :meth:`send` returns the decoded response or raises ConnectionError."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.address = (host, port)
        self.client_id = client_id
        self._conn = None
        self._correlation = 0

    async def send(self, request, response_type, timeout_s: float):
        """Send kio ``request``; decode the answer as ``response_type``; ConnectionError on any failure or timeout."""
        flexible = request.__flexible__
        header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
        response_header = ResponseHeaderV1 if flexible else ResponseHeaderV0
        self._correlation += 1
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header_cls(request_api_key=request.__api_key__,
                                                  request_api_version=request.__version__,
                                                  correlation_id=self._correlation, client_id=self.client_id))
        entity_writer(type(request))(buf, request)
        body = buf.getvalue()
        try:
            if self._conn is None:
                self._conn = await asyncio.wait_for(asyncio.open_connection(*self.address), timeout_s)
            reader, writer = self._conn
            writer.write(struct.pack(">i", len(body)) + body)
            await writer.drain()
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
            frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.close()
            raise ConnectionError(f"broker {self.address[0]}:{self.address[1]} failed: {exc!r}") from None
        _, used = entity_reader(response_header)(frame, 0)
        response, _ = entity_reader(response_type)(frame, used)
        return response

    def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

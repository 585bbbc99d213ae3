"""The controller listener: Raft requests over Kafka's wire format, server and client side.

Kafka runs the Raft APIs on the controller listener (``controller.listener.names``, e.g.
``CONTROLLER://127.0.0.1:9093``), apart from the broker's client listener even on a combined
broker+controller node; the embedded quorum does the same: each voter serves
:data:`RAFT_APIS` on its own port, the address given for it in ``controller.quorum.voters``.
Frames are Kafka's (4-byte size, request header v1/v2, kio bodies) and go through the broker's
:mod:`~pyspark_kafka.broker.protocol` (the request bounds walk before kio's decoder), so a
malformed frame closes its connection and never reaches the quorum state.

Served: ApiVersions (18, v0-v3), Fetch (1, v12: replica id, last fetched epoch, diverging
epoch), Vote (52, v0), BeginQuorumEpoch (53, v0), EndQuorumEpoch (54, v0), DescribeQuorum (55,
v0-v2) and DescribeCluster (60, v1, controller endpoints: KIP-919's ``--bootstrap-controller``),
enough for Kafka's ``kafka-metadata-quorum --bootstrap-controller ... describe``.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any, Awaitable, Callable

from pyspark_kafka.kafka import wire_header

from pyspark_kafka.broker import protocol
from pyspark_kafka.broker.errors import ErrorCode
from pyspark_kafka.broker.log_escape import get_logger

log = get_logger(__name__)

FETCH, API_VERSIONS, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM = 1, 18, 52, 53, 54, 55
DESCRIBE_CLUSTER = 60
#: api key -> (min version, max version) served on the controller listener.
RAFT_APIS = {FETCH: (12, 12), API_VERSIONS: (0, 3), VOTE: (0, 0), BEGIN_QUORUM_EPOCH: (0, 0),
             END_QUORUM_EPOCH: (0, 0), DESCRIBE_QUORUM: (0, 2), DESCRIBE_CLUSTER: (1, 1)}
MAX_FRAME_BYTES = 104857600  # socket.request.max.bytes's default
IDLE_S = 600.0  # connections.max.idle.ms's default

#: ``handler(api_key, version, request) -> response dict`` (see protocol.build).
Dispatch = Callable[[int, int, Any], Awaitable[dict]]


class RaftServer:
    """The controller listener of one node: ``RaftServer(dispatch, host, port)``; ``port`` 0 picks one.

    ``await start()`` binds (OSError when taken), ``port`` is then the bound port; ``await stop()``
    closes the listener and every connection.
    """

    def __init__(self, dispatch: Dispatch, host: str = "127.0.0.1", port: int = 0) -> None:
        self.dispatch = dispatch
        self.host, self.port = host, port
        self._server: asyncio.AbstractServer | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        # Abort the sockets as well as cancelling: Python 3.11's wait_for can swallow a cancellation that
        # races with its result, and the connection would then wait for its next frame.
        for task, writer in list(self._connections.items()):
            writer.transport.abort()
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections[task] = writer
        peer = writer.get_extra_info("peername")
        try:
            while True:
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), IDLE_S))[0]
                if not 8 <= size <= MAX_FRAME_BYTES:
                    log.warning("controller listener: closing %s, request size %d outside 8..%d", peer, size,
                                MAX_FRAME_BYTES)
                    return
                frame = await asyncio.wait_for(reader.readexactly(size), IDLE_S)
                chunks = await self._answer(frame)
                for chunk in chunks:
                    writer.write(chunk)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass
        except protocol.ProtocolError as exc:
            log.warning("controller listener: closing %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("controller listener: closing %s after an unexpected error", peer)
        finally:
            self._connections.pop(task, None)
            writer.close()

    async def _answer(self, frame: bytes) -> list:
        api_key, version, correlation_id = protocol.peek_header(frame)
        supported = RAFT_APIS.get(api_key)
        if supported is None:
            raise protocol.ProtocolError(f"api key {api_key} is not served on the controller listener")
        if not supported[0] <= version <= supported[1]:
            if api_key == API_VERSIONS:
                return protocol.encode_response(api_key, 0, correlation_id, api_versions(ErrorCode.unsupported_version))
            chunks = protocol.encode_error_response(api_key, version, correlation_id, ErrorCode.unsupported_version)
            if chunks is None:
                raise protocol.ProtocolError(f"api key {api_key} version {version} is not supported "
                                             f"({supported[0]}..{supported[1]})")
            return chunks
        _, request = protocol.decode_request(frame, api_key, version)
        if api_key == API_VERSIONS:
            body = api_versions(ErrorCode.none)
        else:
            body = await self.dispatch(api_key, version, request)
        return protocol.encode_response(api_key, version, correlation_id, body)


def api_versions(error_code: int) -> dict:
    """The ApiVersions response body listing :data:`RAFT_APIS`."""
    return {"error_code": error_code, "throttle_time": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(RAFT_APIS.items())]}


def encode_request(request: Any, correlation_id: int, client_id: str) -> bytes:
    """A whole request frame (size prefix included) for kio request entity ``request``
    (:func:`pyspark_kafka.kafka.wire_header.encode_request`)."""
    return wire_header.encode_request(request, correlation_id, client_id)


class RaftChannel:
    """One client connection to a peer's controller listener, one request at a time.

    ``await request(entity, timeout_s)`` returns the kio response entity; any failure (refused,
    timed out, closed, undecodable) raises ConnectionError and closes the connection (the next
    request reconnects); a cancelled request closes it too.
    """

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)
        self._lock = asyncio.Lock()

    async def request(self, entity: Any, timeout_s: float) -> Any:
        async with self._lock:
            try:
                return await asyncio.wait_for(self._exchange(entity), timeout_s)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, struct.error) as exc:
                self.close()
                raise ConnectionError(f"{type(entity).__name__} to {self.host}:{self.port} failed: "
                                      f"{type(exc).__name__} {exc}") from None
            except asyncio.CancelledError:
                self.close()  # an answer still owed on this connection must never be read as the next request's
                raise

    async def _exchange(self, entity: Any) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        correlation_id = next(self._correlation)
        self._writer.write(encode_request(entity, correlation_id, self.client_id))
        await self._writer.drain()
        size = struct.unpack(">i", await self._reader.readexactly(4))[0]
        frame = await self._reader.readexactly(size)
        schema = protocol.response_schema(entity.__api_key__, entity.__version__)
        answered, response = wire_header.decode_response(frame, entity.__api_key__, schema)
        if answered != correlation_id:
            raise ValueError(f"correlation id {answered} answers request {correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

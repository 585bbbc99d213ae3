"""The controller channel: a small internal request/response protocol between brokers and the controller.

Kafka brokers talk to the controller with BrokerRegistration (62), BrokerHeartbeat (63), AlterPartition (56),
forwarded admin requests (Envelope, 58) and fetch the metadata log with Raft's Fetch (1). Here one documented
internal protocol carries the same requests: each frame is a 4-byte big-endian length and a UTF-8 JSON object;
a request has an ``op`` (``register``, ``heartbeat``, ``fetch_metadata``, ``create_topics``, ``alter_partition``,
``shutdown``, ``allocate_producer_ids``; forwarded admin requests ``elect_leaders``, ``alter_reassignments``,
``create_partitions``, ``delete_topics``, ``alter_topic_configs``, ``alter_dynamic_configs``, ``create_acls``,
``delete_acls``, ``alter_user_scram_credentials``), the answer is one JSON object with an ``error_code`` (Kafka's
codes) and the op's fields.
It listens on the controller's own port (``controller.quorum.voters``), never on a client listener.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Awaitable, Callable

from pyspark_kafka.broker.log_escape import get_logger

log = get_logger("pyspark_kafka.controller")

MAX_FRAME = 64 * 1024 * 1024
Handler = Callable[[dict], Awaitable[dict]]


async def _read_frame(reader: asyncio.StreamReader) -> dict:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    if not 0 < size <= MAX_FRAME:
        raise ConnectionError(f"controller channel frame of {size} bytes is outside 1..{MAX_FRAME}")
    return json.loads(await reader.readexactly(size))


def _frame(obj: dict) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">i", len(body)) + body


async def start_channel_server(host: str, port: int, handler: Handler) -> asyncio.base_events.Server:
    """Listen on ``host:port`` and answer each request frame with ``await handler(request)``.

    A handler exception is answered with UNKNOWN_SERVER_ERROR (-1) and logged; a malformed frame closes the
    connection. Returns the asyncio server (close it to stop).
    """

    async def on_connect(reader, writer):
        try:
            while True:
                request = await _read_frame(reader)
                try:
                    answer = await handler(request)
                except Exception as exc:
                    log.exception("controller request %s failed", request.get("op"))
                    answer = {"error_code": -1, "error_message": str(exc)}
                writer.write(_frame(answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_connect, host, port)


class ChannelClient:
    """One connection to the controller at ``host:port``, reopened after a failure.

    :meth:`call` sends a request dict and returns the answer dict; raises ConnectionError (or OSError)
    when the controller cannot be reached or does not answer within ``timeout_s`` seconds. One call at a
    time (a lock orders concurrent callers).
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    async def call(self, request: dict, timeout_s: float = 10.0) -> dict:
        async with self._lock:
            try:
                if self._conn is None:
                    self._conn = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout_s)
                reader, writer = self._conn
                writer.write(_frame(request))
                await writer.drain()
                return await asyncio.wait_for(_read_frame(reader), timeout_s)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                raise ConnectionError(f"controller {self.host}:{self.port} did not answer {request.get('op')}: "
                                      f"{exc!r}") from None
            except asyncio.CancelledError:
                self.close()  # an answer still owed on this connection must never be read as the next call's
                raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None


NOT_CONTROLLER = 41  # Kafka's Errors.NOT_CONTROLLER


class _LeaderMoved(ConnectionError):
    """A controller call abandoned because the observed quorum leader moved to another controller."""


class ControllerRouter:
    """Calls to the active controller among several (Kafka's ``NodeToControllerChannelManager``).

    ``ControllerRouter(channels={id: (host, port)}, leader=fn)``: ``leader()`` returns the node's view of the
    quorum leader (``(id or None, epoch)``, e.g. the broker's Raft observer). :meth:`call` tries the observed
    leader first, then the last controller that answered, then the others, until one answers something other than
    NOT_CONTROLLER (41) or a connection failure; it pauses 100 ms after each full round and raises
    ConnectionError when none answered within ``timeout_s`` seconds.

    A call waiting on the controller ``leader()`` named when it began (or on any controller while ``leader()``
    named none) is abandoned, its connection closed, as soon as ``leader()`` names another controller in the same
    or a later epoch; a new round then starts at once with that leader first. Waiting out the silent one instead
    (up to 5 s) let the new controller, which gives every broker a fresh ``broker.session.timeout.ms`` when it
    activates, fence brokers whose heartbeat was still stuck on the paused old controller (issue 25: the paused
    controller test failed in CI with the partition's leader moved). An answer the old controller had already
    sent is then dropped and the request sent again: a forwarded admin request that the old controller had
    committed can answer as a retry does (e.g. TOPIC_ALREADY_EXISTS), as with any timed-out controller call.
    """

    #: How often (s) a waiting call checks the observed quorum leader.
    LEADER_CHECK_S = 0.05

    def __init__(self, channels: dict[int, tuple[str, int]], leader: Callable[[], tuple[int | None, int]]) -> None:
        self.clients = {node: ChannelClient(*address) for node, address in sorted(channels.items())}
        self.leader = leader
        self.active: int | None = None

    async def call(self, request: dict, timeout_s: float = 10.0, attempt_timeout_s: float = 5.0) -> dict:
        """Send ``request`` to the active controller and return its answer (see the class docstring).

        ``timeout_s``: the whole call's limit (s); ``attempt_timeout_s``: the longest wait (s) for one controller's
        answer before the next is tried (Kafka 4.4's heartbeat channel times a request out after
        ``broker.heartbeat.interval.ms``, then asks the quorum leader again: ``BrokerServer`` builds it with that
        retry timeout as the request timeout). Raises ConnectionError when no controller answered in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last = "no controller tried"
        while True:
            observed, _ = self.leader()
            order = [n for n in (observed, self.active) if n in self.clients]  # the observed leader is newest
            order += [n for n in self.clients if n not in order]
            moved = False
            for node in dict.fromkeys(order):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise ConnectionError(f"no active controller answered {request.get('op')} within "
                                          f"{timeout_s:g} s (last: {last})")
                try:
                    answer = await self._call_until_leader_moves(node, request, min(remaining, attempt_timeout_s))
                except _LeaderMoved as exc:
                    last, moved = str(exc), True
                    break  # a new round, the new leader first
                except ConnectionError as exc:
                    last = str(exc)
                    continue
                if answer.get("error_code") == NOT_CONTROLLER:
                    last = answer.get("error_message", "NOT_CONTROLLER")
                    hint = answer.get("leader_id", -1)
                    if hint in self.clients and hint != node:
                        self.active = hint
                    continue
                self.active = node
                return answer
            if not moved:
                await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))

    async def _call_until_leader_moves(self, node: int, request: dict, timeout_s: float) -> dict:
        """``clients[node].call``; raises :class:`_LeaderMoved` (a ConnectionError) when, while it waits,
        ``leader()`` moves from ``node`` (or from no leader) to another controller in the same or a later epoch."""
        start = self.leader()
        call = asyncio.ensure_future(self.clients[node].call(request, timeout_s))
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=self.LEADER_CHECK_S)
                if done:
                    return call.result()
                leader, epoch = self.leader()
                if start[0] in (node, None) and leader is not None and leader != node and \
                        leader in self.clients and (leader, epoch) != start and epoch >= start[1]:
                    raise _LeaderMoved(f"controller {node} did not answer {request.get('op')} before the quorum "
                                       f"leader moved to {leader} (epoch {epoch})")
        finally:
            if not call.done():
                self.clients[node].close()  # the pending read fails now, even if a cancellation were swallowed
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

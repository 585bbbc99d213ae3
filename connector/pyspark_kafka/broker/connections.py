"""Bounded resources per connection and in total (Kafka's ``SocketServer`` / ``ConnectionQuotas``).

- :class:`ConnectionQuotas`: ``max.connections`` (all clients) and ``max.connections.per.ip``
  with ``max.connections.per.ip.overrides`` (``"127.0.0.1:200,10.0.0.7:5"``). A connection over a
  limit is closed as soon as it is accepted, with one log line (Kafka closes per-IP excess the
  same way; for ``max.connections`` Kafka stops accepting until a slot frees instead). The
  effective total is also capped so that the open-file limit keeps room for the partitions'
  files (:func:`~pyspark_kafka.broker.log.manager.partition_capacity` reserves 512 files).
- :class:`RequestMemory`: ``queued.max.request.bytes``, the bytes of requests being read or
  handled at once. A frame's body is read in chunks of at most :data:`CHUNK_BYTES` and counted as
  they arrive; a *new* frame waits while the count is at the limit (Kafka's non-strict memory
  pool: a request may start whenever some memory is free), a frame already being read goes on,
  so one large request never waits for itself and a slow client holds only what it has really
  sent. The count drops once the response is written. A frame of at most :data:`SMALL_REQUEST_BYTES`
  (64 KiB) never waits, so big requests held half-sent cannot starve other clients' small ones
  (ApiVersions, Metadata, heartbeats, commits). Kafka's default is -1 (unbounded); ours is 256 MiB.
- ``queued.max.requests`` (requests handled at once, backpressure) and ``connections.max.idle.ms``
  (a connection with no complete request for that long is closed) are applied by the server.
"""

from __future__ import annotations

import asyncio
import resource

from pyspark_kafka.broker.config import BrokerConfig
from pyspark_kafka.broker.errors import ConfigError

CHUNK_BYTES = 1 << 20  # most produce requests are one chunk; a slow client holds at most this much
#: frames up to this size are read even when ``queued.max.request.bytes`` is exhausted (still counted)
SMALL_REQUEST_BYTES = 64 << 10
RESERVED_FOR_PARTITIONS = 512  # keep in step with log.manager.RESERVED_FILES


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``"host:count,host:count"`` → ``{host: count}``.

    Raises ConfigError naming the bad entry.
    """
    out: dict[str, int] = {}
    for item in (i.strip() for i in (text or "").split(",") if i.strip()):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} is not 'host:count'")
        out[host] = int(count)
    return out


class ConnectionQuotas:
    """Counts open connections in total and per client address; :meth:`admit` / :meth:`release`."""

    def __init__(self, config: BrokerConfig):
        self.max_connections = config.get_int("max.connections")
        self.per_ip = config.get_int("max.connections.per.ip")
        self.overrides = parse_overrides(config.get("max.connections.per.ip.overrides"))
        self.total = 0
        self.by_ip: dict[str, int] = {}

    def file_headroom(self, open_partitions: int) -> int:
        """How many connections the open-file limit leaves room for, next to ``open_partitions``."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 1 << 30
        return max(0, soft - 64 - 3 * open_partitions)

    def admit(self, ip: str, open_partitions: int = 0) -> str | None:
        """Count a new connection from ``ip``; return None, or why it must be closed (not counted)."""
        limit_ip = self.overrides.get(ip, self.per_ip)
        if self.by_ip.get(ip, 0) >= limit_ip:
            return f"too many connections from {ip} (max.connections.per.ip={limit_ip})"
        if self.total >= self.max_connections:
            return f"too many connections (max.connections={self.max_connections})"
        if self.total >= self.file_headroom(open_partitions):
            return (f"too many connections for the open-file limit ({resource.getrlimit(resource.RLIMIT_NOFILE)[0]} "
                    f"files, {open_partitions} partitions open): raise ulimit -n")
        self.total += 1
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        return None

    def release(self, ip: str) -> None:
        """Forget one connection of ``ip`` (call once per admitted connection)."""
        self.total -= 1
        left = self.by_ip.get(ip, 1) - 1
        if left:
            self.by_ip[ip] = left
        else:
            self.by_ip.pop(ip, None)


class RequestMemory:
    """``queued.max.request.bytes``: bytes reserved by requests being read or handled (-1 = unbounded)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Condition()

    async def wait_for_room(self, size: int = SMALL_REQUEST_BYTES + 1) -> None:
        """Wait while the reserved bytes are at or over the limit (before a new frame of ``size`` bytes is read).

        A frame of at most :data:`SMALL_REQUEST_BYTES` never waits: a few big requests held half-sent must not
        starve other clients' ApiVersions, Metadata, heartbeats or commits (Kafka mutes only the channel that
        cannot allocate; the others keep going)."""
        if size <= SMALL_REQUEST_BYTES:
            return
        if 0 <= self.limit <= self.used:
            async with self._freed:
                await self._freed.wait_for(lambda: self.used < self.limit)

    def add(self, n: int) -> None:
        """Count ``n`` more bytes (a chunk of a frame already started); never waits."""
        self.used += n

    async def release(self, n: int) -> None:
        """Return ``n`` reserved bytes and wake the readers waiting for room."""
        self.used -= n
        if self.limit >= 0:
            async with self._freed:
                self._freed.notify_all()


async def within(seconds: float, awaitable):
    """``await awaitable`` or raise asyncio.TimeoutError after ``seconds`` (``asyncio.timeout`` where
    Python has it: no extra task per call, unlike ``asyncio.wait_for``)."""
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:  # Python 3.10
        return await asyncio.wait_for(awaitable, seconds)
    async with timeout(seconds):
        return await awaitable


async def read_frame_body(reader: asyncio.StreamReader, size: int, memory: RequestMemory,
                          idle_s: float) -> tuple[bytes, int]:
    """Read a ``size``-byte frame body in chunks, counting each in ``memory`` as it arrives.

    Waits for room in ``memory`` before the first chunk only (see :class:`RequestMemory`).
    Returns ``(body, bytes counted)``; the caller releases them after responding. Raises
    asyncio.TimeoutError when a chunk does not arrive within ``idle_s`` seconds
    (``connections.max.idle.ms``: a stalled half-sent request), IncompleteReadError on EOF; the
    count is released on any error.
    """
    parts = []
    reserved = 0
    try:
        await memory.wait_for_room(size)
        left = size
        while left:
            n = min(CHUNK_BYTES, left)
            memory.add(n)
            reserved += n
            parts.append(await within(idle_s, reader.readexactly(n)))
            left -= n
    except BaseException:
        await memory.release(reserved)
        raise
    return (parts[0] if len(parts) == 1 else b"".join(parts)), reserved

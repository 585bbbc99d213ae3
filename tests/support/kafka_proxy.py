"""A Kafka-protocol TCP proxy for tests: forwards frames both ways and can send a Produce request twice.

Clients bootstrap through the proxy; Metadata and FindCoordinator responses are rewritten to
advertise the proxy's port, so every connection of the client goes through it. With
``duplicate_produce=n`` the first ``n`` Produce requests are sent to the broker twice in a row
(what a network retry does); the client gets only the first answer and ``duplicate_answers``
keeps both decoded responses so the test can compare the offsets the broker gave them.
With ``on_request`` every request frame a client sends (without its size prefix) is also handed
to that callable (the fuzzer's corpus capture). With ``on_fetch_response`` every decoded Fetch
response is handed to that callable, which may return a changed response for the client (a fault
in transit: damaged or missing records) or None to pass it on unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import threading

from pyspark_kafka.broker.protocol import encode_response

from support.wire import decode_response

PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10
DEADLINE_S = 30.0


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


class KafkaProxy:
    """``with KafkaProxy("127.0.0.1:PORT", duplicate_produce=1) as proxy: proxy.bootstrap ...``"""

    def __init__(self, upstream: str, duplicate_produce: int = 0, on_request=None, on_fetch_response=None):
        host, port = upstream.rsplit(":", 1)
        self.on_request = on_request
        self.on_fetch_response = on_fetch_response
        self.upstream = (host, int(port))
        self.duplicates_left = duplicate_produce
        self.duplicate_answers: list[tuple] = []  # (first response, second response), decoded
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "KafkaProxy":
        self._thread.start()
        assert self._ready.wait(DEADLINE_S), "proxy did not start"
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(DEADLINE_S)
        self._thread.join(DEADLINE_S)

    async def _shutdown(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._loop.call_soon(self._loop.stop)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        broker_r, broker_w = await asyncio.open_connection(*self.upstream)
        pending: dict[int, list] = {}  # correlation id -> [api key, version, copies sent, answers seen]
        try:
            await asyncio.gather(self._upstream(client_r, broker_w, pending),
                                 self._downstream(broker_r, client_w, pending))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            client_w.close()
            broker_w.close()
            self._tasks.discard(task)

    async def _upstream(self, client_r, broker_w, pending) -> None:
        while True:
            frame = await _read_frame(client_r)
            api_key, version, cid = struct.unpack_from(">hhi", frame)
            if self.on_request is not None:
                self.on_request(frame)
            copies = 1
            if api_key == PRODUCE and self.duplicates_left > 0:
                self.duplicates_left -= 1
                copies = 2
            pending[cid] = [api_key, version, copies, []]
            for _ in range(copies):
                broker_w.write(struct.pack(">i", len(frame)) + frame)
            await broker_w.drain()

    async def _downstream(self, broker_r, client_w, pending) -> None:
        while True:
            frame = await _read_frame(broker_r)
            cid = struct.unpack_from(">i", frame)[0]
            api_key, version, copies, answers = pending[cid]
            if copies == 2:
                answers.append(decode_response(frame, api_key, version)[1])
                if len(answers) == 2:
                    self.duplicate_answers.append(tuple(answers))
                    del pending[cid]
                    continue  # the client already has its answer
            else:
                del pending[cid]
            if api_key in (METADATA, FIND_COORDINATOR):
                frame = self._rewrite_ports(frame, api_key, version, cid)
            elif api_key == FETCH and self.on_fetch_response is not None:
                changed = self.on_fetch_response(decode_response(frame, api_key, version)[1])
                if changed is not None:
                    frame = b"".join(encode_response(api_key, version, cid, changed))[4:]
            client_w.write(struct.pack(">i", len(frame)) + frame)
            await client_w.drain()

    def _rewrite_ports(self, frame: bytes, api_key: int, version: int, cid: int) -> bytes:
        _, body = decode_response(frame, api_key, version)
        if api_key == METADATA:
            body = _replace(body, brokers=tuple(_replace(b, port=self.port) for b in body.brokers))
        elif hasattr(body, "coordinators"):
            body = _replace(body, coordinators=tuple(_replace(c, port=self.port) for c in body.coordinators))
        else:
            body = _replace(body, port=self.port)
        return b"".join(encode_response(api_key, version, cid, body))[4:]


def _replace(entity, **changes):
    return dataclasses.replace(entity, **changes)

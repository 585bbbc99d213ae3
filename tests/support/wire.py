"""A tiny raw Kafka wire client for broker tests: kio requests over a plain socket.

Used where the tests need exact control (versions, fields, broken bytes) that real clients
do not give. Real clients (confluent-kafka, kafka-python, kcat) are used everywhere else.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct

from kio.index import load_response_schema
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_new_batch
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

TIMEOUT_S = 20.0


def encode_request(request, correlation_id: int, client_id: str = "wire-test") -> bytes:
    """A whole request frame (size prefix included) for kio request entity ``request``."""
    buf = io.BytesIO()
    header_cls = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
    entity_writer(header_cls)(buf, header_cls(
        request_api_key=request.__api_key__, request_api_version=request.__version__,
        correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(request))(buf, request)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def decode_response(frame: bytes, api_key: int, version: int):
    """``(correlation_id, kio response entity)`` of a response frame (without size prefix)."""
    schema = load_response_schema(api_key, version)
    header_cls = ResponseHeaderV1 if schema.__flexible__ and api_key != 18 else ResponseHeaderV0
    header, used = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(schema)(frame, used)
    return header.correlation_id, body


def record_batch(values: list[bytes], key: bytes | None = None, timestamp_ms: int | None = None) -> bytes:
    """One uncompressed RecordBatch v2 with ``values`` (offsets from 0), written by kio."""
    ts = datetime.datetime.now(datetime.timezone.utc) if timestamp_ms is None else \
        datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.timezone.utc)
    records = tuple(
        Record(attributes=0, timestamp=ts, offset=i, key=key, value=v, headers=(RecordHeader(key=b"h", value=b"1"),))
        for i, v in enumerate(values)
    )
    buf = io.BytesIO()
    write_new_batch(buf, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1, records=records,
                                        attributes=0))
    return buf.getvalue()


class WireClient:
    """One TCP connection to a broker; ``request()`` sends a kio request and returns the response."""

    def __init__(self, bootstrap: str, timeout_s: float = TIMEOUT_S):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._next = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """The next response frame without its size prefix; None when the broker closed the connection."""
        head = self._recv_exactly(4)
        if head is None:
            return None
        return self._recv_exactly(struct.unpack(">i", head)[0])

    def _recv_exactly(self, n: int) -> bytes | None:
        chunks, left = [], n
        while left:
            try:
                chunk = self.sock.recv(left)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def send(self, request) -> int:
        cid = self._next
        self._next += 1
        self.send_raw(encode_request(request, cid))
        return cid

    def receive(self, request_type):
        frame = self.recv_frame()
        assert frame is not None, "broker closed the connection"
        return decode_response(frame, request_type.__api_key__, request_type.__version__)

    def request(self, request):
        """Send ``request``, wait for its response, check the correlation id, return the response."""
        cid = self.send(request)
        got, response = self.receive(type(request))
        assert got == cid
        return response

    def is_closed_by_broker(self) -> bool:
        """True when the broker has closed this connection (read returns EOF within the timeout)."""
        return self.recv_frame() is None

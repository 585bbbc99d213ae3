"""Partition routing for the ``pykafka`` sink: explicit partition > murmur2(key) > round robin.

The rule (:func:`partition_for`) for one record of a topic with ``num_partitions``
partitions:

1. a non-null explicit ``partition`` is used as is (the caller checks the range);
2. a non-null key goes to ``to_positive(murmur2(key)) % num_partitions``, bit for bit
   what the Java client's default partitioner does (``BuiltInPartitioner.partitionForKey``,
   ``Utils.murmur2`` with seed ``0x9747b28c``; librdkafka's ``murmur2`` partitioner is the
   same), so Spark jobs and Java producers put the same key in the same partition;
3. a record with neither goes round robin over the available partitions (those with a
   leader; all of them when metadata shows none), like Kafka's ``RoundRobinPartitioner``.

Option ``partitioner`` changes step 2 and 3: ``murmur2`` (default) as above,
``roundrobin`` ignores keys, or ``module.Class`` names a class whose instances have
``partition(topic, key, num_partitions) -> int`` (``key`` is ``bytes`` or ``None``).

:class:`Router` applies the rule to whole Arrow columns: murmur2 runs once per
distinct key of a batch (``dictionary_encode``) and is vectorised with numpy over all
keys at once, one step per 4-byte block of the longest key. Its results equal
:func:`partition_for` row by row.
"""

from __future__ import annotations

import importlib
import random
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_kafka.errors import OptionError, RecordError

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF

MURMUR2 = "murmur2"
ROUND_ROBIN = "roundrobin"


def murmur2(data: bytes) -> int:
    """32-bit murmur2 of ``data`` as a signed int, equal to Kafka's ``Utils.murmur2``.

    Seed ``0x9747b28c``, 4-byte little-endian blocks, tail handled as in the Java
    client (source: ``org.apache.kafka.common.utils.Utils.murmur2``).
    """
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK32
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``), so ``-1 → 2147483647``."""
    return number & 0x7FFFFFFF


def partition_for(
    key: bytes | None,
    num_partitions: int,
    explicit: int | None = None,
    round_robin_index: int = 0,
    available: Sequence[int] | None = None,
) -> int:
    """The partition of one record under the default (``murmur2``) partitioner.

    ``explicit`` (the row's ``partition`` column) wins when not None; else a non-null
    ``key`` (bytes; a string key is its UTF-8 bytes) gives
    ``to_positive(murmur2(key)) % num_partitions``; else the record takes
    ``available[round_robin_index % len(available)]`` (``available`` defaults to all
    partitions ``0..num_partitions-1``). Raises ValueError when ``num_partitions < 1``.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if explicit is not None:
        return explicit
    if key is not None:
        return to_positive(murmur2(key)) % num_partitions
    parts = available if available else range(num_partitions)
    return parts[round_robin_index % len(parts)]


def murmur2_array(keys: pa.Array) -> np.ndarray:
    """murmur2 of every value of a binary/string Arrow array, as ``int64`` numpy array.

    Null entries get 0 (callers mask them). Vectorised over all keys at once: rows are
    ordered by their number of 4-byte blocks, step ``j`` mixes block ``j`` into the rows
    that have one (a prefix), then tails and final mixing run on all rows. The number of
    numpy steps is the block count of the longest key. Equal to :func:`murmur2` element by
    element.
    """
    keys = _as_binary(keys)
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + n + 1].astype(np.int64)
    data_buf = keys.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    order = np.argsort(-(lengths // 4), kind="stable")
    starts, lengths = starts[order], lengths[order]
    nblocks = lengths // 4  # descending
    # rows_with_block[j]: how many rows (a prefix) have a block j
    rows_with_block = np.searchsorted(-nblocks, -np.arange(int(nblocks[0])), side="left")
    m = np.uint32(_M)
    h = (np.uint32(MURMUR2_SEED) ^ lengths.astype(np.uint32)).astype(np.uint32)

    def byte_at(pos: np.ndarray) -> np.ndarray:
        return data[pos].astype(np.uint32)

    for j, rows in enumerate(rows_with_block.tolist()):
        pos = starts[:rows] + 4 * j
        k = byte_at(pos) | (byte_at(pos + 1) << np.uint32(8)) | (byte_at(pos + 2) << np.uint32(16)) | (
            byte_at(pos + 3) << np.uint32(24))
        k *= m
        k ^= k >> np.uint32(24)
        k *= m
        h[:rows] = (h[:rows] * m) ^ k
    rest = lengths & 3
    tail = starts + 4 * nblocks
    for r, shift in ((3, 16), (2, 8)):
        sel = rest >= r
        h[sel] ^= byte_at(tail[sel] + (r - 1)) << np.uint32(shift)
    sel = rest >= 1
    h[sel] = (h[sel] ^ byte_at(tail[sel])) * m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    out = np.empty(n, dtype=np.uint32)
    out[order] = h
    if keys.null_count:
        out[~keys.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out.view(np.int32).astype(np.int64)


def _as_binary(keys: pa.Array) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type):
        keys = keys.cast(pa.binary())
    if pa.types.is_string(keys.type):
        keys = keys.view(pa.binary())
    if not pa.types.is_binary(keys.type):
        raise TypeError(f"keys must be a binary or string Arrow array, got {keys.type}")
    return keys


def load_partitioner(name: str | None) -> str | Callable[[str, bytes | None, int], int]:
    """Resolve option ``partitioner``: ``murmur2`` (default), ``roundrobin`` or ``module.Class``.

    Returns the built-in name, or the bound ``partition`` method of a new instance of the
    user class (constructed without arguments). Raises OptionError naming the option when
    the name is unknown, the module or class cannot be imported, construction fails, or
    the class has no callable ``partition(topic, key, num_partitions)``.
    """
    if name is None or name.strip().lower() == MURMUR2:
        return MURMUR2
    name = name.strip()
    if name.lower() == ROUND_ROBIN:
        return ROUND_ROBIN
    module_name, _, class_name = name.rpartition(".")
    if not module_name:
        raise OptionError(
            f"option 'partitioner' must be 'murmur2', 'roundrobin' or 'module.Class', got {name!r}"
        )
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise OptionError(
            f"option 'partitioner': cannot import {name!r} ({type(e).__name__}: {e}); "
            "the class must be importable on the driver and on every executor"
        ) from None
    try:
        instance = cls()
    except Exception as e:
        raise OptionError(
            f"option 'partitioner': {name}() failed ({type(e).__name__}: {e}); "
            "the class must be constructible without arguments"
        ) from None
    method = getattr(instance, "partition", None)
    if not callable(method):
        raise OptionError(
            f"option 'partitioner': class {name!r} has no method "
            "partition(topic, key, num_partitions) -> int"
        )
    return method


class Router:
    """Per-task partition assignment for whole Arrow columns.

    ``partitioner`` is what :func:`load_partitioner` returned; ``start`` is the first
    round-robin position of every topic, or None for a random one per topic (so tasks
    and micro-batches do not all start at partition 0). Round-robin positions advance
    per topic across batches.
    """

    def __init__(self, partitioner, start: int | None = None):
        self.partitioner = partitioner
        self.start = start
        self._next: dict[str, int] = {}

    def assign(
        self,
        topic: str,
        n: int,
        num_partitions: int,
        keys: pa.Array | None = None,
        explicit: pa.Array | None = None,
        available: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Partition (``int64`` numpy array) for each of ``n`` records of one topic.

        ``keys``: binary/string array or None (no key column); ``explicit``: int array of
        the ``partition`` column or None; both of length ``n``. Explicit values are
        returned unchecked (the caller validates the range against fresh metadata).
        Raises RecordError when a user partitioner returns something that is not an int
        in ``[0, num_partitions)``.
        """
        if explicit is not None:
            explicit_mask = explicit.is_valid().to_numpy(zero_copy_only=False)
            result = explicit.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            todo = ~explicit_mask
        else:
            result = np.zeros(n, dtype=np.int64)
            todo = np.ones(n, dtype=bool)
        if not todo.any():
            return result
        if callable(self.partitioner):
            return self._assign_user(topic, keys, num_partitions, result, todo)
        if keys is not None and self.partitioner == MURMUR2:
            key_valid = keys.is_valid().to_numpy(zero_copy_only=False)
            hashed = todo & key_valid
            if hashed.any():
                result[hashed] = self._key_partitions(keys, num_partitions)[hashed]
            todo &= ~key_valid
        count = int(todo.sum())
        if count:
            parts = np.asarray(available if available else range(num_partitions), dtype=np.int64)
            first = self._next.get(topic)
            if first is None:
                first = self.start if self.start is not None else random.randrange(len(parts))
            result[todo] = parts[(first + np.arange(count)) % len(parts)]
            self._next[topic] = first + count
        return result

    @staticmethod
    def _key_partitions(keys: pa.Array, num_partitions: int) -> np.ndarray:
        encoded = pc.dictionary_encode(_as_binary(keys))
        distinct = (murmur2_array(encoded.dictionary) & 0x7FFFFFFF) % num_partitions
        indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return distinct[indices] if len(distinct) else np.zeros(len(keys), dtype=np.int64)

    def _assign_user(self, topic, keys, num_partitions, result, todo) -> np.ndarray:
        key_list = _as_binary(keys).to_pylist() if keys is not None else None
        for i in np.nonzero(todo)[0]:
            key = key_list[i] if key_list is not None else None
            p = self.partitioner(topic, key, num_partitions)
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p < num_partitions:
                raise RecordError(
                    f"partitioner {_describe(self.partitioner)} returned {p!r} for topic '{topic}' "
                    f"with {num_partitions} partitions; it must return an int in [0, {num_partitions})"
                )
            result[i] = p
        return result


def _describe(method) -> str:
    owner = getattr(method, "__self__", None)
    cls = type(owner) if owner is not None else method
    return f"{cls.__module__}.{getattr(cls, '__qualname__', repr(cls))}"

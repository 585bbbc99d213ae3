"""Run one controller quorum member as a process: ``python -m pyspark_kafka.broker.raft.node``.

For fault tests (SIGKILL, SIGSTOP) and for trying the quorum by hand::

    python -m pyspark_kafka.broker.raft.node --data-dir D/node-0 \\
        -c node.id=0 -c controller.quorum.voters=0@127.0.0.1:19093,1@127.0.0.1:19094,2@127.0.0.1:19095

Each stdin line ``append <text>`` appends the record ``<text>`` (UTF-8) when this node leads. One
JSON object per line goes to stdout: ``{"event": "ready"}``, ``{"event": "committed", "offset": n,
"value": text}`` for every committed record (the ``subscribe`` listener, from offset 0),
``{"event": "appended", "value": text, "offset": n}`` or ``{"event": "append_failed", "value": text,
"error": message}`` for each append. SIGTERM/SIGINT stop the node gracefully (a leader resigns).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from pyspark_kafka.broker.errors import NotControllerError
from pyspark_kafka.broker.raft.raft_client import RaftMetadataLog


def _emit(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def _append(node: RaftMetadataLog, text: str) -> None:
    try:
        offset = await node.append([text.encode()])
    except NotControllerError as exc:
        _emit(event="append_failed", value=text, error=str(exc))
    else:
        _emit(event="appended", value=text, offset=offset)


async def _main(data_dir: str, config: dict[str, str]) -> None:
    node = RaftMetadataLog(data_dir, config)
    node.subscribe(lambda offset, record: _emit(event="committed", offset=offset, value=record.decode()))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await node.start()
    _emit(event="ready")
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending: set[asyncio.Task] = set()

    async def commands() -> None:
        while True:
            line = await reader.readline()
            if not line:
                return
            command, _, text = line.decode().rstrip("\n").partition(" ")
            if command == "append":
                task = asyncio.create_task(_append(node, text))
                pending.add(task)
                task.add_done_callback(pending.discard)

    reading = asyncio.create_task(commands())
    await stop.wait()
    reading.cancel()
    await node.stop()
    await asyncio.gather(reading, *pending, return_exceptions=True)


def main(argv: list[str] | None = None) -> None:
    """Parse ``--data-dir`` and ``-c name=value`` (Kafka's config names) and run until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("-c", "--config", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    config = {}
    for item in args.config:
        name, eq, value = item.partition("=")
        if not eq:
            parser.error(f"-c {item!r}: expected NAME=VALUE")
        config[name] = value
    asyncio.run(_main(args.data_dir, config))


if __name__ == "__main__":
    main()

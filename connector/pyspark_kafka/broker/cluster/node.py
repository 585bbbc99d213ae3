"""One node process of the replicated cluster: ``python -m pyspark_kafka.broker.cluster.node ...``.

``--roles broker,controller``: a combined node (:mod:`~pyspark_kafka.broker.cluster.combined`: its controller
on a one-voter metadata log and the cluster broker in one process, on ``--port``). ``--roles controller``: a
controller (the :class:`QuorumController`, answering the controller channel on ``--port``)
on a :class:`SingleVoterMetadataLog` when ``--voters`` names one voter, or on a
:class:`~pyspark_kafka.broker.raft.RaftMetadataLog` when it names several (each voter's Raft listener on its
``--voters`` address; the active controller is the Raft leader); ``--roles broker``: a broker
(``process.roles=broker``, ``controller.quorum.voters``) on ``--port``. Both run until SIGINT/SIGTERM and then stop
cleanly (a broker does a controlled shutdown first). ``--config KEY=VALUE`` (repeatable) passes Kafka broker
configs; ``--controller-channels id@host:port,...`` gives a broker the controller channel of each voter (Raft
mode; passed to the broker as ``PYSPARK_KAFKA_CONTROLLER_CHANNELS``). Kafka runs the same split with ``process.roles=controller`` and ``process.roles=broker``.
"""

from __future__ import annotations

import argparse
import faulthandler
import base64
import uuid
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path


async def run_controller(node_id: int, data_dir: Path, host: str, port: int, config: dict[str, str]) -> None:
    """Serve the controller on ``host:port`` until SIGINT/SIGTERM."""
    from pyspark_kafka.broker.config import BrokerConfig
    from pyspark_kafka.broker.controller.channel import start_channel_server
    from pyspark_kafka.broker.controller.metadata_snapshot import metadata_snapshots
    from pyspark_kafka.broker.controller.single_voter_log import SingleVoterMetadataLog
    from pyspark_kafka.broker.controller.quorum_controller import QuorumController

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cfg = BrokerConfig({**config, "node.id": str(node_id), "process.roles": "controller"})
    voters = config["controller.quorum.voters"]
    # metadata log snapshots (KIP-630): metadata.log.max.record.bytes.between.snapshots / .snapshot.interval.ms
    snapshots = metadata_snapshots(data_dir / "__cluster_metadata-0", cfg.get)
    from pyspark_kafka.broker import meta_properties

    meta_properties.check_node_id(data_dir, node_id)  # another node's data dir: refused before anything is written
    if "," in voters.strip(","):
        from pyspark_kafka.broker.raft import RaftMetadataLog

        metadata_log = RaftMetadataLog(data_dir, {k: v for k, v in config.items() if k.startswith("controller.quorum.")}
                                       | {"node.id": str(node_id)}, snapshots=snapshots)
        cluster_id = metadata_log.cluster_id
    else:
        metadata_log = SingleVoterMetadataLog(node_id, data_dir, node_id, snapshots=snapshots)
        raw = uuid.uuid5(uuid.NAMESPACE_URL, str(data_dir.resolve())).bytes
        cluster_id = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    # meta.properties (as Kafka's): written at the first start, checked at every start (another node's data dir is
    # refused); the stored cluster id is kept, so a restart on other ports or a moved data dir keeps its cluster id
    cluster_id = meta_properties.ensure(data_dir, node_id, cluster_id).cluster_id
    metadata_log.cluster_id = cluster_id
    await metadata_log.start()
    controller = QuorumController(metadata_log, cfg, cluster_id)
    await controller.start()
    server = await start_channel_server(host, port, controller.handle)
    logging.getLogger("pyspark_kafka.controller").info("controller %d listening on %s:%d (data dir %s)",
                                                       node_id, host, port, data_dir)
    try:
        await stop.wait()
    finally:
        server.close()
        await controller.stop()
        await metadata_log.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyspark_kafka.broker.cluster.node")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--roles", choices=("broker", "controller", "broker,controller"), required=True,
                        help="broker,controller: a combined node (its own one-voter controller, no --voters needed)")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--voters", default="", help="controller.quorum.voters: id@host:port (required unless "
                        "--roles broker,controller)")
    parser.add_argument("--controller-channels", default="", help="brokers, Raft mode: id@host:port of each "
                        "controller's channel")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: stacks into node.log
    config = dict(item.split("=", 1) for item in args.config)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s node-{args.node_id} %(levelname)s %(name)s: %(message)s")
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if not args.voters and args.roles != "broker,controller":
        parser.error(f"--roles {args.roles} needs --voters id@host:port (controller.quorum.voters)")
    from pyspark_kafka.broker.cluster.broker_lifecycle import BrokerRegistrationError
    from pyspark_kafka.broker.meta_properties import MetaPropertiesError

    try:
        return _run(args, config, data_dir)
    except MetaPropertiesError as exc:  # another node's data dir: the message names the fix
        logging.getLogger("pyspark_kafka.broker").error("%s", exc)
        return 1
    except BrokerRegistrationError:  # e.g. another cluster's data dir (INCONSISTENT_CLUSTER_ID): already logged
        return 1


def _run(args: argparse.Namespace, config: dict[str, str], data_dir: Path) -> int:
    """Run the node ``args`` asks for until it stops; 0."""
    if args.roles == "broker,controller":  # a combined node: one process, one event loop, one node id
        from pyspark_kafka.broker.server import run_broker

        run_broker(data_dir, host=args.host, port=args.port,
                   config={**config, "node.id": str(args.node_id), "process.roles": "broker,controller",
                           **({"controller.quorum.voters": args.voters} if args.voters else {})})
        return 0
    if args.roles == "controller":
        asyncio.run(run_controller(args.node_id, data_dir, args.host, args.port,
                                   {**config, "controller.quorum.voters": args.voters}))
        return 0
    from pyspark_kafka.broker.server import run_broker

    if args.controller_channels:
        os.environ["PYSPARK_KAFKA_CONTROLLER_CHANNELS"] = args.controller_channels

    run_broker(data_dir, host=args.host, port=args.port,
               config={**config, "node.id": str(args.node_id), "process.roles": "broker",
                       "controller.quorum.voters": args.voters})
    return 0


if __name__ == "__main__":
    sys.exit(main())

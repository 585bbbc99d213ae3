"""Restart time of a controller and a broker of the replicated cluster after 10^3..10^5 metadata records,
with metadata log snapshots (this code) and without them (the code before snapshots, or none written).

Usage: ``python bench/metadata_restart.py [--records 1000,10000,100000] [--runs 3] [--controllers 1]
[--snapshot-bytes 1048576] [--before-commit a5546b8] [--combined]``.

``--combined``: the one-node cluster of ``pyspark-kafka broker`` (combined mode, #38) instead: the records go in
through the Kafka protocol (librdkafka's CreateAcls / DeleteAcls, 1000 bindings a request), the node is SIGKILLed,
and each restart is timed from ``Popen`` to its first Metadata answer listing itself, the two code trees taking
turns on the same data directory ("after" this tree, then "before" ``--before-commit``, ``--runs`` times).

For each record count: a real cluster (``--controllers`` controllers, one broker) gets that many metadata records
through the controller channel (CreateAcls of 1000 bindings, then DeleteAcls of them: whole ``acl`` and
``remove_acl`` records as a busy cluster writes them, the image staying small), then its processes are killed
(SIGKILL). Then, ``--runs`` times each, timed from the process start (``Popen``) to:

- controller: its first answer on the controller channel (``quorum`` op; with 3 controllers, the restarted one
  answers once its log is loaded and replayed; the other two keep running);
- broker: its first Metadata answer listing itself (it serves only once its image caught up and it is unfenced).

"after" runs this code with ``metadata.log.max.record.bytes.between.snapshots`` = ``--snapshot-bytes``; "before"
runs the same data directories with the code of ``--before-commit`` (extracted with ``git archive``; it ignores
the snapshot files), the whole log replayed. Prints the median and every run in seconds, and the load average.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark_kafka.broker.cluster import EmbeddedCluster
from pyspark_kafka.broker.cluster.embedded_cluster import metadata
from pyspark_kafka.broker.controller.snapshots import SnapshotStore

REPO = Path(__file__).resolve().parents[1]
BATCH = 1000


def fill(cluster: EmbeddedCluster, records: int) -> int:
    """Write about ``records`` metadata records (ACLs created then deleted, ``BATCH`` per request); returns how many."""
    written, k = 0, 0
    while written < records:
        n = min(BATCH, max(1, (records - written) // 2))
        principal = f"User:bench-{k}"
        creations = [[2, f"topic-{i}", 3, principal, "*", 3, 3] for i in range(n)]
        for op, body in (("create_acls", {"creations": creations}),
                         ("delete_acls", {"filters": [[1, None, 1, principal, None, 1, 1]]})):
            answer = None
            for _ in range(100):
                answer = cluster.controller_call(cluster.active_controller(), {"op": op, **body}, timeout_s=60)
                if answer is not None and answer.get("error_code") == 0:
                    break
                time.sleep(0.1)
            assert answer is not None and answer.get("error_code") == 0, answer
        written += 2 * n
        k += 1
    return written


def _newest_end(node_dir: Path) -> int:
    """End offset of the newest snapshot file in ``node_dir/__cluster_metadata-0`` (0: none)."""
    paths = SnapshotStore(node_dir / "__cluster_metadata-0").paths()
    return int(paths[0].name.split("-")[0]) if paths else 0


def _wait_stable(value, quiet_s: float, timeout_s: float) -> None:
    """Poll ``value()`` until it has not changed for ``quiet_s`` seconds (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    last, since = value(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.2)
        now = value()
        if now != last:
            last, since = now, time.monotonic()


def _spawn(cluster: EmbeddedCluster, node_id: int, code_root: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(code_root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(cluster.node_dir(node_id) / "node.log", "ab") as out:
        proc = subprocess.Popen(cluster.command(node_id), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    cluster.procs[node_id] = proc
    return proc


def _ready_controller(cluster: EmbeddedCluster, node_id: int) -> bool:
    return cluster.controller_call(node_id, {"op": "quorum"}, timeout_s=1) is not None


def _ready_broker(cluster: EmbeddedCluster, node_id: int) -> bool:
    try:
        return node_id in {b.node_id for b in metadata(cluster.address(node_id), topics=[], timeout_s=1).brokers}
    except OSError:
        return False


def time_restart(cluster: EmbeddedCluster, node_id: int, code_root: Path, timeout_s: float = 300) -> float:
    """Seconds from starting ``node_id`` (with the code under ``code_root``) to its first ready answer; the node is
    left running. Raises TimeoutError."""
    ready = _ready_controller if node_id in cluster.controller_ids else _ready_broker
    started = time.perf_counter()
    proc = _spawn(cluster, node_id, code_root)
    while not ready(cluster, node_id):
        if proc.poll() is not None or time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"node {node_id} not ready: {cluster._log_tail(node_id)}")
        time.sleep(0.01)
    return time.perf_counter() - started


def _kill(cluster: EmbeddedCluster, node_id: int) -> None:
    proc = cluster.procs.get(node_id)
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)


def measure(records: int, runs: int, controllers: int, snapshot_bytes: int, before_root: Path | None) -> dict:
    """``{"records": n, "after": {"controller": [...], "broker": [...]}, "before": {...}}`` in seconds."""
    result: dict = {"records": records}
    with tempfile.TemporaryDirectory(prefix="metadata-restart-") as tmp:
        config = {"metadata.log.max.record.bytes.between.snapshots": str(snapshot_bytes)}
        cluster = EmbeddedCluster(1, data_dir=Path(tmp) / "cluster", config=config, controllers=controllers)
        with cluster:
            result["written"] = fill(cluster, records)
            controller, broker = cluster.controller_ids[-1], cluster.broker_ids[0]
            # let the broker apply (and snapshot) what the controller snapshotted before it is killed
            _wait_stable(lambda: _newest_end(cluster.data_dir / f"node-{broker}.metadata"), 3.0, 120.0)
            _kill(cluster, broker)
            for label, root in (("after", REPO / "connector"), ("before", before_root)):
                if root is None:
                    continue
                if label == "before":  # the old code knows no snapshot config
                    cluster.config.pop("metadata.log.max.record.bytes.between.snapshots", None)
                times: dict[str, list[float]] = {"controller": [], "broker": []}
                for _ in range(runs):
                    _kill(cluster, controller)
                    times["controller"].append(time_restart(cluster, controller, root))
                for _ in range(runs):
                    _kill(cluster, broker)
                    times["broker"].append(time_restart(cluster, broker, root))
                _kill(cluster, broker)
                result[label] = times
    return result


def _fill_combined(bootstrap: str, records: int) -> int:
    """``fill`` through the Kafka protocol (librdkafka's admin client): ACLs created then deleted, ``BATCH`` a
    request; returns how many metadata records that wrote."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    written, k = 0, 0
    while written < records:
        n = min(BATCH, max(1, (records - written) // 2))
        principal = f"User:bench-{k}"
        bindings = [AclBinding(ResourceType.TOPIC, f"topic-{i}", ResourcePatternType.LITERAL, principal, "*",
                               AclOperation.READ, AclPermissionType.ALLOW) for i in range(n)]
        for future in admin.create_acls(bindings, request_timeout=60).values():
            future.result()
        found = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
        for future in admin.delete_acls([found], request_timeout=60).values():
            assert len(future.result()) == n
        written += 2 * n
        k += 1
    return written


def measure_combined(records: int, runs: int, snapshot_bytes: int, before_root: Path | None) -> dict:
    """The one-node cluster: ``{"records": n, "written": w, "after": {"node": [...]}, "before": {"node": [...]}}``
    in seconds ("before": the code under ``before_root``, run in turn with this tree's on the same data
    directory). The node is stopped by its pid."""
    from pyspark_kafka.broker.cluster.embedded_cluster import free_port

    result: dict = {"records": records}
    with tempfile.TemporaryDirectory(prefix="metadata-restart-combined-") as tmp:
        data_dir, port = Path(tmp) / "node", free_port()
        bootstrap = f"127.0.0.1:{port}"
        procs: list[subprocess.Popen] = []

        def start(between: int, root: Path = REPO / "connector") -> subprocess.Popen:
            env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            with open(Path(tmp) / "node.log", "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "pyspark_kafka", "broker", "--data-dir", str(data_dir), "--port",
                     str(port), "--log-level", "warning", "--config",
                     f"metadata.log.max.record.bytes.between.snapshots={between}", "--config",
                     "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer", "--config",
                     "allow.everyone.if.no.acl.found=true"],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
            procs.append(proc)
            return proc

        def ready() -> bool:
            try:
                return bool(metadata(bootstrap, topics=[], timeout_s=1).brokers)
            except OSError:
                return False

        def timed(between: int, root: Path = REPO / "connector") -> float:
            started = time.perf_counter()
            proc = start(between, root)
            while not ready():
                if proc.poll() is not None or time.perf_counter() - started > 300:
                    raise TimeoutError((Path(tmp) / "node.log").read_text()[-2000:])
                time.sleep(0.01)
            return time.perf_counter() - started

        def kill() -> None:
            for proc in procs:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(30)
            procs.clear()

        try:
            timed(snapshot_bytes)
            result["written"] = _fill_combined(bootstrap, records)
            trees = [("after", REPO / "connector")] + ([("before", before_root)] if before_root else [])
            for _ in range(runs):
                for label, root in trees:
                    kill()
                    result.setdefault(label, {"node": []})["node"].append(timed(snapshot_bytes, root))
        finally:
            kill()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--controllers", type=int, default=1, choices=(1, 3))
    parser.add_argument("--snapshot-bytes", type=int, default=1 << 20)
    parser.add_argument("--before-commit", default="a5546b8",
                        help="the code before snapshots (git archive of this commit); '' to skip")
    parser.add_argument("--combined", action="store_true", help="the one-node cluster (combined mode)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="metadata-before-") as before:
        before_root = None
        if args.before_commit:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before_commit, "connector"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", before], input=archive, check=True)
            before_root = Path(before) / "connector"
        if args.combined:
            print(f"combined node, snapshot bytes={args.snapshot_bytes} runs={args.runs} "
                  f"load average before: {os.getloadavg()}")
            for n in (int(x) for x in args.records.split(",")):
                r = measure_combined(n, args.runs, args.snapshot_bytes, before_root)
                for label in (x for x in ("before", "after") if x in r):
                    print(f"{r['written']:>7} records {label:>6}: " + "  ".join(
                        f"{role} median {statistics.median(v):.2f} s (runs {', '.join(f'{x:.2f}' for x in v)})"
                        for role, v in r[label].items()), flush=True)
            print(f"load average after: {os.getloadavg()}")
            return
        print(f"controllers={args.controllers} snapshot bytes={args.snapshot_bytes} runs={args.runs} "
              f"load average before: {os.getloadavg()}")
        for n in (int(x) for x in args.records.split(",")):
            r = measure(n, args.runs, args.controllers, args.snapshot_bytes, before_root)
            for label in ("before", "after"):
                if label in r:
                    print(f"{r['written']:>7} records {label:>6}: " + "  ".join(
                        f"{role} median {statistics.median(v):.2f} s (runs {', '.join(f'{x:.2f}' for x in v)})"
                        for role, v in r[label].items()), flush=True)
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

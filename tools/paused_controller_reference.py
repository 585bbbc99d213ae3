"""Reference check by hand for ``test_a_paused_active_controller_is_replaced_without_fencing_the_brokers``.

    python tools/paused_controller_reference.py

Apache Kafka (the default version of ``pyspark_kafka.testing.apache_kafka``) with 3 dedicated controllers and 3
brokers, with the embedded test's settings (2 s broker sessions, 200 ms heartbeats); a topic with 3 replicas; the
active controller (the last "Completed transition to Leader" in the controllers' logs) is SIGSTOPped for 12 s (a
bounded observation window), a topic is created meanwhile, and the partition's (leader, leader epoch, ISR) is printed
before and after, with each other controller's fencing and leadership log lines. The controller is resumed (SIGCONT)
and every JVM stopped also on failure. Needs Java and Maven (the Kafka jars). Measured results:
docs/replication-tests.md.

    python tools/paused_controller_reference.py --repeat 20

The same script for ``test_repeated_pauses_of_the_active_controller_under_cpu_load_fence_no_broker`` (issue #38):
that test's settings (imported from it), 3 partitions, a busy-loop process hogging a core, and ``--repeat`` pauses of
its ``PAUSE_S`` each, every one until a controller logs a newer "Completed transition to Leader"; then the
controllers' "Fencing broker" lines and each partition's (leader, leader epoch, ISR) before and after are printed.
Every JVM and the hog are stopped by pid, also on failure.
"""
import os, re, signal, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "connector"))
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark_kafka.testing.apache_kafka import ApacheKafka
from pyspark_kafka.broker.cluster.embedded_cluster import metadata
FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "200", "replica.lag.time.max.ms": "3000",
        "min.insync.replicas": "2", "default.replication.factor": "3"}
def part(k, topic):
    for b in k.node_ids:
        r = metadata(k.address(b), [topic])
        for t in r.topics:
            for p in t.partitions:
                return (int(p.leader_id), int(p.leader_epoch), sorted(int(x) for x in p.isr_nodes))
def leader_lines(k):
    """(timestamp, controller) of every "Completed transition to Leader" line of the controllers' logs."""
    return sorted((l[:23], c) for c in k.controller_ids for l in k.log_path(c).read_text(errors="replace").splitlines()
                  if "Completed transition to Leader" in l)
def repeated(pauses):
    import subprocess
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from broker.cluster.test_controller_failover import PAUSE_CONFIG, PAUSE_S
    config = {k: v for k, v in PAUSE_CONFIG.items() if k != "replica.fetch.backoff.ms"}
    print("settings", config, "pause", PAUSE_S, "s")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with ApacheKafka(nodes=3, controllers=3, config=config) as k:
            a = AdminClient({"bootstrap.servers": k.bootstrap_servers})
            a.create_topics([NewTopic("paused", 3, 3)])["paused"].result(30)
            time.sleep(3)  # the ISRs settle (by hand: a bounded observation window)
            def parts():
                r = metadata(k.address(k.node_ids[0]), ["paused"])
                return {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch), len(p.isr_nodes))
                        for t in r.topics for p in t.partitions}
            before = parts(); print("before", before)
            elections = 0
            for i in range(pauses):
                lines = leader_lines(k)
                active = lines[-1][1]
                os.kill(k.controller_pids[active], signal.SIGSTOP)
                t0 = time.time()
                try:
                    deadline = t0 + 30
                    while len(leader_lines(k)) == len(lines) and time.time() < deadline:
                        time.sleep(0.05)
                    elections += len(leader_lines(k)) > len(lines)
                    time.sleep(max(0.0, PAUSE_S - (time.time() - t0)))
                finally:
                    os.kill(k.controller_pids[active], signal.SIGCONT)
                time.sleep(1.0)  # the resumed controller rejoins (by hand: a bounded observation window)
            fencings = [l[:200] for c in k.controller_ids for l in k.log_path(c).read_text(errors="replace").splitlines()
                        if "Fencing broker" in l]
            after = parts()
            print(f"{pauses} pauses, {elections} with a new leader; fencings: {len(fencings)}", *fencings, sep="\n")
            print("after", after, "leaders moved:", sum(before[p][:2] != after[p][:2] for p in before))
    finally:
        hog.kill(); hog.wait(10)
if "--repeat" in sys.argv:
    repeated(int(sys.argv[sys.argv.index("--repeat") + 1]))
    sys.exit(0)
with ApacheKafka(nodes=3, controllers=3, config=FAST) as k:
    a = AdminClient({"bootstrap.servers": k.bootstrap_servers})
    a.create_topics([NewTopic("paused", 1, 3)])["paused"].result(30)
    deadline = time.time() + 30
    while time.time() < deadline:
        ok = all(len([1 for t in metadata(k.address(b), ["paused"]).topics for p in t.partitions if len(p.isr_nodes) == 3]) for b in k.node_ids)
        if ok: break
        time.sleep(0.1)
    before = part(k, "paused"); print("before", before)
    active, best = None, ""
    for c in k.controller_ids:
        for l in k.log_path(c).read_text(errors="replace").splitlines():
            if "Completed transition to Leader" in l:
                print(c, l[:200])
                if l[:25] > best: active, best = c, l[:25]
    print("active controller", active)
    os.kill(k.controller_pids[active], signal.SIGSTOP)
    t0 = time.time()
    try:
        time.sleep(12)  # a bounded observation window: election plus several session timeouts
        t1 = time.time()
        try:
            a.create_topics([NewTopic("after", 1, 3)])["after"].result(60)
            print("create after pause took", round(time.time() - t1, 1), "s")
        except Exception as e:
            print("create failed after", round(time.time() - t1, 1), "s:", e)
        time.sleep(2)
        print("after", part(k, "paused"), "in", round(time.time() - t0, 1), "s")
        for c in k.controller_ids:
            if c == active: continue
            txt = k.log_path(c).read_text(errors="replace")
            print(c, "fence/leader lines:", [l[:200] for l in txt.splitlines() if ("ence" in l and "roker" in l) or "transition to" in l][-8:])
    finally:
        os.kill(k.controller_pids[active], signal.SIGCONT)

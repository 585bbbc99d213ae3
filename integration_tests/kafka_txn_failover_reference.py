"""By hand, not collected by pytest: the transaction-coordinator failover scenarios of
``tests/broker/cluster/test_coordinator_failover.py`` on Apache Kafka's three-node cluster (4.3.1 jars from
Maven Central), so the embedded cluster's outcomes can be compared result by result.

``python -m integration_tests.kafka_txn_failover_reference`` (about 2 minutes; needs java and the Maven cache).
Apache Kafka 4.3.1 printed (2026-11-24), the same outcomes as the embedded cluster's tests::

    mid-transaction kill: commit OK after 7.5-8.6 s
    timed-out transaction: LSO [2, 2, 2] after 10.7 s
    late commit: KafkaError{FATAL,code=_FENCED,...} fatal
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.static.primitive import i8

from pyspark_kafka.testing.apache_kafka import ApacheKafka
from pyspark_kafka.testing.clusters import send_request


def coordinator(kafka: ApacheKafka, key: str) -> int:
    """The transaction coordinator of ``key`` named by the first live node that answers (20 s at most)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for node in kafka.node_ids:
            try:
                answer = send_request(kafka.address(node), FindCoordinatorRequest(
                    key_type=i8(1), coordinator_keys=(key,)), FindCoordinatorResponse).coordinators[0]
            except OSError:
                continue
            if answer.error_code == 0:
                return int(answer.node_id)
        time.sleep(0.1)
    raise TimeoutError(f"no coordinator for {key!r}")


def last_stable_offsets(bootstrap: str, topic: str):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)]
    except KafkaException as exc:
        return str(exc)
    finally:
        consumer.close()


def main() -> None:
    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
              "transaction.state.log.num.partitions": "3"}
    with ApacheKafka(3, config=config) as kafka:
        bootstrap = kafka.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("tx", 3, 3), NewTopic("late", 3, 3)]).values():
            future.result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "payments",
                             "transaction.timeout.ms": "60000"})
        producer.init_transactions(60)
        producer.begin_transaction()
        for p in range(3):
            producer.produce("tx", b"x", partition=p)
        assert producer.flush(60) == 0
        victim = coordinator(kafka, "payments")
        started = time.monotonic()
        kafka.kill(victim)
        try:
            producer.commit_transaction(120)
            print("mid-transaction kill: commit OK after", round(time.monotonic() - started, 1), "s")
        except KafkaException as exc:
            print("mid-transaction kill: commit failed:", exc.args[0])
        kafka.restart(victim)

        late = Producer({"bootstrap.servers": bootstrap, "transactional.id": "late-payer",
                         "transaction.timeout.ms": "2000"})
        late.init_transactions(60)
        late.begin_transaction()
        for p in range(3):
            late.produce("late", b"open", partition=p)
        assert late.flush(60) == 0
        kafka.kill(coordinator(kafka, "late-payer"))
        started = time.monotonic()
        while time.monotonic() - started < 90 and last_stable_offsets(bootstrap, "late") != [2, 2, 2]:
            time.sleep(0.5)
        print("timed-out transaction: LSO", last_stable_offsets(bootstrap, "late"), "after",
              round(time.monotonic() - started, 1), "s")
        try:
            late.commit_transaction(60)
            print("late commit OK")
        except KafkaException as exc:
            print("late commit:", exc.args[0], "fatal" if exc.args[0].fatal() else "not fatal")


if __name__ == "__main__":
    main()

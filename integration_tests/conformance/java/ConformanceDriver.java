/*
 * Kafka's Java client as a conformance driver: one primitive of the scenario script per run.
 *
 *   java -cp <kafka-clients and deps> ConformanceDriver COMMAND BOOTSTRAP TOPIC [ARGS...] < input.json
 *
 * Commands (input on stdin as JSON, output on stdout as JSON; byte strings are base64):
 *   version                                   -> "4.3.1"
 *   metadata  BOOTSTRAP TOPIC                 -> {"brokers": {id: "host:port"}, "partitions": {p: leader}}
 *   produce   BOOTSTRAP TOPIC CODEC IDEMPOTENT  [{value, key, headers: [[k, v]], partition, timestamp}]
 *   transactions BOOTSTRAP TOPIC               [[[values...], commit], ...]  (partition 0)
 *   fetch     BOOTSTRAP TOPIC ISOLATION COUNT  {partition: offset} -> [{partition, offset, key, value, headers, timestamp}]
 *   offsets_for_times BOOTSTRAP TOPIC          {partition: timestamp ms} -> {partition: offset or null}
 *   group_consume BOOTSTRAP TOPIC GROUP COUNT  -> records; commitSync, then close (LeaveGroup)
 *   group_member  BOOTSTRAP TOPIC GROUP        prints "assignment: 0,1,..." whenever its assignment
 *                                              changes, until stdin closes; then close (LeaveGroup)
 *
 * Environment: KAFKA_CLIENT_PROPERTIES names a properties file of extra client settings
 * (security.protocol, sasl.*, ssl.*), like the Kafka tools' --command-config.
 *
 * Every wait is bounded (WAIT_MS); any client error ends the run with a non-zero exit and the
 * exception on stderr.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ConformanceDriver {
    static final long WAIT_MS = 30_000;
    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        String command = args[0];
        if (command.equals("version")) {
            System.out.println(JSON.writeValueAsString(org.apache.kafka.common.utils.AppInfoParser.getVersion()));
            return;
        }
        String bootstrap = args[1];
        String topic = args[2];
        JsonNode input = command.equals("group_member") ? null : readInput();
        Object out;
        switch (command) {
            case "metadata": out = metadata(bootstrap, topic); break;
            case "produce": out = produce(bootstrap, topic, args[3], Boolean.parseBoolean(args[4]), input); break;
            case "transactions": out = transactions(bootstrap, topic, input); break;
            case "fetch": out = fetch(bootstrap, topic, args[3], Integer.parseInt(args[4]), input); break;
            case "offsets_for_times": out = offsetsForTimes(bootstrap, topic, input); break;
            case "group_consume": out = groupConsume(bootstrap, topic, args[3], Integer.parseInt(args[4])); break;
            case "group_member": groupMember(bootstrap, topic, args[3]); return;
            default: throw new IllegalArgumentException("unknown command " + command);
        }
        System.out.println(JSON.writeValueAsString(out));
    }

    static JsonNode readInput() throws Exception {
        byte[] raw = System.in.readAllBytes();
        return raw.length == 0 ? JSON.createObjectNode() : JSON.readTree(raw);
    }

    static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    static String b64(byte[] value) {
        return value == null ? null : Base64.getEncoder().encodeToString(value);
    }

    static Properties base(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "20000");
        // security settings (security.protocol, sasl.*, ssl.*) from a properties file, as the tools' --command-config
        String extra = System.getenv("KAFKA_CLIENT_PROPERTIES");
        if (extra != null) {
            try (java.io.FileInputStream in = new java.io.FileInputStream(extra)) {
                p.load(in);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return p;
    }

    static Object metadata(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap))) {
            ObjectNode out = JSON.createObjectNode();
            ObjectNode brokers = out.putObject("brokers");
            for (Node n : admin.describeCluster().nodes().get(WAIT_MS, TimeUnit.MILLISECONDS)) {
                brokers.put(String.valueOf(n.id()), n.host() + ":" + n.port());
            }
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(WAIT_MS, TimeUnit.MILLISECONDS).get(topic);
            ObjectNode partitions = out.putObject("partitions");
            for (TopicPartitionInfo p : d.partitions()) {
                partitions.put(String.valueOf(p.partition()), p.leader() == null ? -1 : p.leader().id());
            }
            return out;
        }
    }

    static KafkaProducer<byte[], byte[]> producer(Properties p) {
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("delivery.timeout.ms", String.valueOf(WAIT_MS));
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static Object produce(String bootstrap, String topic, String codec, boolean idempotent, JsonNode records)
            throws Exception {
        Properties p = base(bootstrap);
        p.put("compression.type", codec);
        p.put("enable.idempotence", String.valueOf(idempotent));
        if (!idempotent) {
            p.put("max.in.flight.requests.per.connection", "1");  // keep order without idempotence
        }
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(p)) {
            for (JsonNode r : records) {
                List<Header> headers = new ArrayList<>();
                for (JsonNode h : r.path("headers")) {
                    headers.add(new RecordHeader(h.get(0).asText(), bytes(h.get(1))));
                }
                Integer partition = r.path("partition").isNull() || r.path("partition").isMissingNode()
                    ? null : r.get("partition").asInt();
                Long timestamp = r.path("timestamp").isNull() || r.path("timestamp").isMissingNode()
                    ? null : r.get("timestamp").asLong();
                sent.add(producer.send(new ProducerRecord<>(topic, partition, timestamp, bytes(r.get("key")),
                    bytes(r.get("value")), headers)));
            }
            producer.flush();
            ArrayNode offsets = JSON.createArrayNode();
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get(WAIT_MS, TimeUnit.MILLISECONDS);  // the delivery error, if any
                offsets.addArray().add(m.partition()).add(m.offset());
            }
            return offsets;
        }
    }

    static Object transactions(String bootstrap, String topic, JsonNode steps) {
        Properties p = base(bootstrap);
        p.put("transactional.id", "conformance-java-" + java.util.UUID.randomUUID());
        try (KafkaProducer<byte[], byte[]> producer = producer(p)) {
            producer.initTransactions();
            for (JsonNode step : steps) {
                producer.beginTransaction();
                for (JsonNode v : step.get(0)) {
                    producer.send(new ProducerRecord<>(topic, 0, null, bytes(v)));
                }
                producer.flush();  // in the log before the outcome
                if (step.get(1).asBoolean()) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
            }
        }
        return "ok";
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, Map<String, String> extra) {
        Properties p = base(bootstrap);
        p.put("enable.auto.commit", "false");
        p.putAll(extra);
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static ObjectNode record(ConsumerRecord<byte[], byte[]> r) {
        ObjectNode o = JSON.createObjectNode();
        o.put("partition", r.partition());
        o.put("offset", r.offset());
        o.put("key", b64(r.key()));
        o.put("value", b64(r.value()));
        o.put("timestamp", r.timestamp());
        ArrayNode headers = o.putArray("headers");
        for (Header h : r.headers()) {
            headers.addArray().add(h.key()).add(b64(h.value()));
        }
        return o;
    }

    static ArrayNode pollUntil(KafkaConsumer<byte[], byte[]> consumer, int count, String what) {
        ArrayNode out = JSON.createArrayNode();
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (out.size() < count) {
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError(what + ": got " + out.size() + " of " + count + " records in "
                    + WAIT_MS / 1000 + " s");
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                out.add(record(r));
            }
        }
        return out;
    }

    static Object fetch(String bootstrap, String topic, String isolation, int count, JsonNode start) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, Map.of("isolation.level", isolation))) {
            List<TopicPartition> parts = new ArrayList<>();
            start.fieldNames().forEachRemaining(p -> parts.add(new TopicPartition(topic, Integer.parseInt(p))));
            consumer.assign(parts);
            for (TopicPartition tp : parts) {
                consumer.seek(tp, start.get(String.valueOf(tp.partition())).asLong());
            }
            return pollUntil(consumer, count, "fetch " + topic);
        }
    }

    static Object offsetsForTimes(String bootstrap, String topic, JsonNode times) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, Map.of())) {
            Map<TopicPartition, Long> query = new HashMap<>();
            times.fieldNames().forEachRemaining(p ->
                query.put(new TopicPartition(topic, Integer.parseInt(p)), times.get(p).asLong()));
            ObjectNode out = JSON.createObjectNode();
            for (Map.Entry<TopicPartition, OffsetAndTimestamp> e :
                    consumer.offsetsForTimes(query, Duration.ofMillis(WAIT_MS)).entrySet()) {
                String p = String.valueOf(e.getKey().partition());
                if (e.getValue() == null) {
                    out.putNull(p);
                } else {
                    out.put(p, e.getValue().offset());
                }
            }
            return out;
        }
    }

    static Map<String, String> groupConf(String group) {
        return Map.of("group.id", group, "auto.offset.reset", "earliest", "session.timeout.ms", "10000",
            "heartbeat.interval.ms", "1000");
    }

    static Object groupConsume(String bootstrap, String topic, String group, int count) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, groupConf(group))) {
            consumer.subscribe(List.of(topic));
            ArrayNode got = pollUntil(consumer, count, "group " + group);
            consumer.commitSync(Duration.ofMillis(WAIT_MS));
            return got;
        }
    }

    static void groupMember(String bootstrap, String topic, String group) throws Exception {
        AtomicBoolean done = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) { /* until the driver closes our stdin */ }
            } catch (java.io.IOException e) {
                // closed
            }
            done.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, groupConf(group))) {
            consumer.subscribe(List.of(topic));
            String last = null;
            long deadline = System.currentTimeMillis() + 10 * WAIT_MS;
            while (!done.get() && System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(100));
                TreeSet<Integer> owned = new TreeSet<>();
                for (TopicPartition tp : consumer.assignment()) {
                    owned.add(tp.partition());
                }
                String now = owned.toString().replaceAll("[\\[\\] ]", "");
                if (!now.equals(last)) {
                    System.out.println("assignment: " + now);
                    System.out.flush();
                    last = now;
                }
            }
        }
    }
}

/*
 * Kafka's Java client as a conformance driver: one primitive of the scenario script per run.
 *
 *   java -cp <kafka-clients and deps> ConformanceDriver COMMAND BOOTSTRAP TOPIC [ARGS...] < input.json
 *
 * Commands (input on stdin as JSON, output on stdout as JSON; byte strings are base64):
 *   version                                   -> "4.3.1"
 *   metadata  BOOTSTRAP TOPIC                 -> {"brokers": {id: "host:port"}, "partitions": {p: leader}}
 *   produce   BOOTSTRAP TOPIC CODEC IDEMPOTENT [ACKS]  [{value, key, headers: [[k, v]], partition, timestamp}]
 *                                              -> [[partition, offset, timestamp], ...] (ACKS 0: offset -1)
 *   transactions BOOTSTRAP TOPIC               [[[values...], commit], ...]  (partition 0)
 *   fetch     BOOTSTRAP TOPIC ISOLATION COUNT  {partition: offset}
 *                                              -> [{partition, offset, key, value, headers, timestamp, timestamp_type}]
 *   offsets_for_times BOOTSTRAP TOPIC          {partition: timestamp ms} -> {partition: offset or null}
 *   group_consume BOOTSTRAP TOPIC GROUP COUNT [PROTOCOL]  -> records; commitSync, then close (LeaveGroup)
 *   produce_runs BOOTSTRAP TOPIC              [{codec, idempotent, acks, records}] -> [reports of each run]
 *   consume_transform_produce BOOTSTRAP TOPIC GROUP OUT COUNT
 *                                              COUNT records of TOPIC (group GROUP) copied to OUT in one
 *                                              transaction, offsets via sendOffsetsToTransaction, commit
 *   group_member  BOOTSTRAP TOPIC GROUP [ASSIGNOR|-] [PROTOCOL]
 *                                              prints "assignment: 0,1,..." whenever its assignment
 *                                              changes, and "event <ms> assigned|revoked|lost 0,1" from its
 *                                              rebalance listener, "record <p> <offset>" per record; commits
 *                                              synchronously on revoke; until stdin closes, then commit and
 *                                              close (LeaveGroup). ASSIGNOR: range, roundrobin,
 *                                              cooperative-sticky ("-" or absent: Kafka's default list)
 *   PROTOCOL is group.protocol: classic (default) or consumer (KIP-848; the session and heartbeat
 *   settings then come from the broker, and the client refuses an assignor class)
 *   admin     BOOTSTRAP -  [{op, ...}, ...]    the admin client operations of AdminOps, in order
 *                                              -> [result per op] ({"error": Kafka error name} on failure)
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
            // kafka-clients' own version file (AppInfoParser, which reads it, moved to
            // org.apache.kafka.common.utils.internals in 4.4.0)
            Properties version = new Properties();
            try (java.io.InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
                if (in != null) version.load(in);
            }
            System.out.println(JSON.writeValueAsString(version.getProperty("version", "unknown")));
            return;
        }
        String bootstrap = args[1];
        String topic = args[2];
        JsonNode input = command.equals("group_member") ? null : readInput();
        Object out;
        switch (command) {
            case "metadata": out = metadata(bootstrap, topic); break;
            case "produce": out = produce(bootstrap, topic, args[3], Boolean.parseBoolean(args[4]),
                args.length > 5 ? args[5] : "all", input); break;
            case "produce_runs": {
                ArrayNode runs = JSON.createArrayNode();
                for (JsonNode run : input) {
                    runs.add((JsonNode) produce(bootstrap, topic, run.get("codec").asText(),
                        run.get("idempotent").asBoolean(), run.get("acks").asText(), run.get("records")));
                }
                out = runs;
                break;
            }
            case "consume_transform_produce":
                out = consumeTransformProduce(bootstrap, topic, args[3], args[4], Integer.parseInt(args[5])); break;
            case "admin": out = AdminOps.run(bootstrap, input); break;
            case "transactions": out = transactions(bootstrap, topic, input); break;
            case "fetch": out = fetch(bootstrap, topic, args[3], Integer.parseInt(args[4]), input); break;
            case "offsets_for_times": out = offsetsForTimes(bootstrap, topic, input); break;
            case "group_consume": out = groupConsume(bootstrap, topic, args[3], Integer.parseInt(args[4]),
                args.length > 5 ? args[5] : "classic"); break;
            case "group_member": groupMember(bootstrap, topic, args[3],
                args.length > 4 && !args[4].equals("-") ? args[4] : null, args.length > 5 ? args[5] : "classic"); return;
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
        p.putIfAbsent("acks", "all");
        p.put("max.request.size", String.valueOf(2 << 20));  // records of ~1 MB
        p.put("linger.ms", "5");
        p.put("delivery.timeout.ms", String.valueOf(WAIT_MS));
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static Object produce(String bootstrap, String topic, String codec, boolean idempotent, String acks,
            JsonNode records) throws Exception {
        Properties p = base(bootstrap);
        p.put("acks", acks);
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
                offsets.addArray().add(m.partition()).add(m.hasOffset() ? m.offset() : -1)
                    .add(m.hasTimestamp() ? m.timestamp() : -1);
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
        o.put("timestamp_type", r.timestampType().name);
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
        return groupConf(group, "classic");
    }

    static Map<String, String> groupConf(String group, String protocol) {
        if (protocol.equals("consumer")) {
            return Map.of("group.id", group, "auto.offset.reset", "earliest", "group.protocol", "consumer");
        }
        return Map.of("group.id", group, "auto.offset.reset", "earliest", "session.timeout.ms", "10000",
            "heartbeat.interval.ms", "1000");
    }

    static Object groupConsume(String bootstrap, String topic, String group, int count, String protocol) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, groupConf(group, protocol))) {
            consumer.subscribe(List.of(topic));
            ArrayNode got = pollUntil(consumer, count, "group " + group);
            consumer.commitSync(Duration.ofMillis(WAIT_MS));
            return got;
        }
    }

    static Object consumeTransformProduce(String bootstrap, String topic, String group, String out, int count) {
        Properties p = base(bootstrap);
        p.put("transactional.id", "conformance-java-ctp-" + java.util.UUID.randomUUID());
        Map<String, String> conf = new HashMap<>(groupConf(group));
        conf.put("isolation.level", "read_committed");
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, conf);
             KafkaProducer<byte[], byte[]> producer = producer(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(topic));
            ArrayNode got = pollUntil(consumer, count, "consume_transform_produce " + group);
            producer.beginTransaction();
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> next = new HashMap<>();
            for (JsonNode r : got) {
                TopicPartition tp = new TopicPartition(topic, r.get("partition").asInt());
                producer.send(new ProducerRecord<>(out, r.get("partition").asInt(), null, bytes(r.get("key")),
                    bytes(r.get("value"))));
                long after = r.get("offset").asLong() + 1;
                if (!next.containsKey(tp) || next.get(tp).offset() < after) {
                    next.put(tp, new org.apache.kafka.clients.consumer.OffsetAndMetadata(after));
                }
            }
            producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
            producer.commitTransaction();
            return got;
        }
    }

    static Map<String, String> assignorConf(String group, String assignor, String protocol) {
        Map<String, String> conf = new HashMap<>(groupConf(group, protocol));
        if (assignor != null) {
            String cls;
            switch (assignor) {
                case "range": cls = "org.apache.kafka.clients.consumer.RangeAssignor"; break;
                case "roundrobin": cls = "org.apache.kafka.clients.consumer.RoundRobinAssignor"; break;
                case "cooperative-sticky": cls = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"; break;
                case "sticky": cls = "org.apache.kafka.clients.consumer.StickyAssignor"; break;
                default: throw new IllegalArgumentException("unknown assignor " + assignor);
            }
            conf.put("partition.assignment.strategy", cls);
        }
        return conf;
    }

    static String partitions(java.util.Collection<TopicPartition> tps) {
        TreeSet<Integer> owned = new TreeSet<>();
        for (TopicPartition tp : tps) {
            owned.add(tp.partition());
        }
        return owned.toString().replaceAll("[\\[\\] ]", "");
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void groupMember(String bootstrap, String topic, String group, String assignor, String protocol)
            throws Exception {
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
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, assignorConf(group, assignor, protocol))) {
            consumer.subscribe(List.of(topic), new org.apache.kafka.clients.consumer.ConsumerRebalanceListener() {
                public void onPartitionsRevoked(java.util.Collection<TopicPartition> revoked) {
                    if (!revoked.isEmpty()) {
                        consumer.commitSync(Duration.ofMillis(WAIT_MS));  // what this member consumed
                    }
                    say("event " + System.currentTimeMillis() + " revoked " + partitions(revoked));
                }

                public void onPartitionsAssigned(java.util.Collection<TopicPartition> assigned) {
                    say("event " + System.currentTimeMillis() + " assigned " + partitions(assigned));
                }

                public void onPartitionsLost(java.util.Collection<TopicPartition> lost) {
                    say("event " + System.currentTimeMillis() + " lost " + partitions(lost));
                }
            });
            String last = null;
            long deadline = System.currentTimeMillis() + 10 * WAIT_MS;
            while (!done.get() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    say("record " + r.partition() + " " + r.offset());
                }
                String now = partitions(consumer.assignment());
                if (!now.equals(last)) {
                    say("assignment: " + now);
                    last = now;
                }
            }
            consumer.commitSync(Duration.ofMillis(WAIT_MS));
        }
    }
}

/**
 * The admin client operations of the driver's {@code admin} command: one JSON object per operation
 * ({"op": name, ...arguments}), one JSON result per operation, in order. A failed operation gives
 * {"error": the Kafka error name (org.apache.kafka.common.protocol.Errors)} and the next runs.
 */
final class AdminOps {
    static final long WAIT_MS = ConformanceDriver.WAIT_MS;
    static final ObjectMapper JSON = ConformanceDriver.JSON;

    static Object run(String bootstrap, JsonNode script) throws Exception {
        ArrayNode results = JSON.createArrayNode();
        try (Admin admin = Admin.create(ConformanceDriver.base(bootstrap))) {
            for (JsonNode op : script) {
                try {
                    results.add(JSON.valueToTree(one(admin, op)));
                } catch (java.util.concurrent.ExecutionException e) {
                    Throwable cause = e.getCause();
                    ObjectNode error = results.addObject();
                    error.put("error", org.apache.kafka.common.protocol.Errors.forException(cause).name());
                }
            }
        }
        return results;
    }

    static <T> T get(org.apache.kafka.common.KafkaFuture<T> f) throws Exception {
        return f.get(WAIT_MS, TimeUnit.MILLISECONDS);
    }

    static List<TopicPartition> tps(JsonNode op) {
        List<TopicPartition> out = new ArrayList<>();
        for (JsonNode p : op.get("partitions")) {
            out.add(new TopicPartition(op.get("topic").asText(), p.asInt()));
        }
        return out;
    }

    static Map<String, String> strings(JsonNode node) {
        Map<String, String> out = new java.util.TreeMap<>();
        if (node != null) {
            node.fieldNames().forEachRemaining(k -> out.put(k, node.get(k).asText()));
        }
        return out;
    }

    static String name(Object state) {
        return state == null ? null : state.toString();
    }

    static Object one(Admin admin, JsonNode op) throws Exception {
        String topic = op.path("topic").asText(null);
        org.apache.kafka.common.config.ConfigResource resource = topic == null ? null
            : new org.apache.kafka.common.config.ConfigResource(
                org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic);
        switch (op.get("op").asText()) {
            case "create_topic": {
                org.apache.kafka.clients.admin.NewTopic t = new org.apache.kafka.clients.admin.NewTopic(
                    topic, op.get("partitions").asInt(), (short) op.path("replication_factor").asInt(1));
                t.configs(strings(op.get("configs")));
                org.apache.kafka.clients.admin.CreateTopicsResult r = admin.createTopics(List.of(t));
                get(r.all());
                return Map.of("partitions", get(r.numPartitions(topic)), "replication_factor",
                    (int) get(r.replicationFactor(topic)));
            }
            case "describe_topic": {
                TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
                List<Object> parts = new ArrayList<>();
                for (TopicPartitionInfo p : d.partitions()) {
                    parts.add(List.of(p.partition(), p.leader() != null && p.leader().id() >= 0, p.replicas().size(),
                        p.isr().size()));
                }
                return Map.of("internal", d.isInternal(), "partitions", parts);  // [partition, has a leader, replicas, isr]
            }
            case "create_partitions": {
                get(admin.createPartitions(Map.of(topic,
                    org.apache.kafka.clients.admin.NewPartitions.increaseTo(op.get("total").asInt()))).all());
                return "ok";
            }
            case "describe_configs": {
                org.apache.kafka.clients.admin.Config config = get(admin.describeConfigs(List.of(resource),
                    new org.apache.kafka.clients.admin.DescribeConfigsOptions().includeSynonyms(true)).all())
                    .get(resource);
                Map<String, Object> out = new java.util.TreeMap<>();
                for (JsonNode key : op.get("keys")) {
                    org.apache.kafka.clients.admin.ConfigEntry e = config.get(key.asText());
                    List<Object> synonyms = new ArrayList<>();
                    if (e != null) {
                        for (org.apache.kafka.clients.admin.ConfigEntry.ConfigSynonym s : e.synonyms()) {
                            synonyms.add(List.of(s.name(), name(s.source())));
                        }
                    }
                    out.put(key.asText(), e == null ? null : java.util.Arrays.asList(e.value(), name(e.source()),
                        e.isReadOnly(), e.isSensitive(), name(e.type()), synonyms));
                }
                return out;
            }
            case "alter_configs": {
                List<org.apache.kafka.clients.admin.AlterConfigOp> ops = new ArrayList<>();
                for (JsonNode o : op.get("ops")) {
                    ops.add(new org.apache.kafka.clients.admin.AlterConfigOp(
                        new org.apache.kafka.clients.admin.ConfigEntry(o.get(0).asText(), o.get(1).asText(null)),
                        org.apache.kafka.clients.admin.AlterConfigOp.OpType.valueOf(o.get(2).asText())));
                }
                get(admin.incrementalAlterConfigs(Map.of(resource, ops)).all());
                return "ok";
            }
            case "list_groups": {
                Map<String, Object> out = new java.util.TreeMap<>();
                java.util.Set<String> wanted = new java.util.HashSet<>();
                op.get("groups").forEach(g -> wanted.add(g.asText()));
                for (org.apache.kafka.clients.admin.GroupListing g : get(admin.listGroups().all())) {
                    if (wanted.contains(g.groupId())) {
                        out.put(g.groupId(), java.util.Arrays.asList(name(g.type().orElse(null)), g.protocol(),
                            name(g.groupState().orElse(null))));
                    }
                }
                return out;
            }
            case "describe_groups": {
                List<String> groups = new ArrayList<>();
                op.get("groups").forEach(g -> groups.add(g.asText()));
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<String, org.apache.kafka.clients.admin.ConsumerGroupDescription> e :
                        get(admin.describeConsumerGroups(groups).all()).entrySet()) {
                    org.apache.kafka.clients.admin.ConsumerGroupDescription d = e.getValue();
                    List<Object> members = new ArrayList<>();
                    for (org.apache.kafka.clients.admin.MemberDescription m : d.members()) {
                        members.add(List.of(m.clientId(), ConformanceDriver.partitions(
                            m.assignment().topicPartitions())));
                    }
                    members.sort(java.util.Comparator.comparing(Object::toString));
                    Map<String, Object> g = new java.util.TreeMap<>();
                    g.put("state", name(d.groupState()));
                    g.put("type", name(d.type()));
                    g.put("assignor", d.partitionAssignor());
                    g.put("simple", d.isSimpleConsumerGroup());
                    g.put("members", members);
                    g.put("coordinator_known", d.coordinator() != null && d.coordinator().id() >= 0);
                    out.put(e.getKey(), g);
                }
                return out;
            }
            case "list_group_offsets": {
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> e :
                        get(admin.listConsumerGroupOffsets(op.get("group").asText()).partitionsToOffsetAndMetadata())
                            .entrySet()) {
                    out.put(e.getKey().toString(), e.getValue() == null ? null
                        : java.util.Arrays.asList(e.getValue().offset(), e.getValue().metadata()));
                }
                return out;
            }
            case "delete_groups": {
                List<String> groups = new ArrayList<>();
                op.get("groups").forEach(g -> groups.add(g.asText()));
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<String, org.apache.kafka.common.KafkaFuture<Void>> e :
                        admin.deleteConsumerGroups(groups).deletedGroups().entrySet()) {
                    try {
                        get(e.getValue());
                        out.put(e.getKey(), "NONE");
                    } catch (java.util.concurrent.ExecutionException x) {
                        out.put(e.getKey(), org.apache.kafka.common.protocol.Errors.forException(x.getCause()).name());
                    }
                }
                return out;
            }
            case "list_offsets": {
                String spec = op.get("spec").asText();
                org.apache.kafka.clients.admin.OffsetSpec s;
                switch (spec) {
                    case "earliest": s = org.apache.kafka.clients.admin.OffsetSpec.earliest(); break;
                    case "latest": s = org.apache.kafka.clients.admin.OffsetSpec.latest(); break;
                    case "max_timestamp": s = org.apache.kafka.clients.admin.OffsetSpec.maxTimestamp(); break;
                    case "earliest_local": s = org.apache.kafka.clients.admin.OffsetSpec.earliestLocal(); break;
                    default: s = org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(Long.parseLong(spec));
                }
                Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> query = new HashMap<>();
                for (TopicPartition tp : tps(op)) {
                    query.put(tp, s);
                }
                org.apache.kafka.clients.admin.ListOffsetsOptions options =
                    new org.apache.kafka.clients.admin.ListOffsetsOptions(
                        org.apache.kafka.common.IsolationLevel.valueOf(op.path("isolation").asText("READ_UNCOMMITTED")));
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<TopicPartition, org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo> e :
                        get(admin.listOffsets(query, options).all()).entrySet()) {
                    out.put(String.valueOf(e.getKey().partition()),
                        List.of(e.getValue().offset(), e.getValue().timestamp()));
                }
                return out;
            }
            case "delete_records": {
                Map<TopicPartition, org.apache.kafka.clients.admin.RecordsToDelete> query = new HashMap<>();
                op.get("before").fieldNames().forEachRemaining(p -> query.put(new TopicPartition(topic,
                    Integer.parseInt(p)), org.apache.kafka.clients.admin.RecordsToDelete.beforeOffset(
                        op.get("before").get(p).asLong())));
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<TopicPartition, org.apache.kafka.common.KafkaFuture<org.apache.kafka.clients.admin.DeletedRecords>> e :
                        admin.deleteRecords(query).lowWatermarks().entrySet()) {
                    try {
                        out.put(String.valueOf(e.getKey().partition()), get(e.getValue()).lowWatermark());
                    } catch (java.util.concurrent.ExecutionException x) {
                        out.put(String.valueOf(e.getKey().partition()),
                            org.apache.kafka.common.protocol.Errors.forException(x.getCause()).name());
                    }
                }
                return out;
            }
            case "describe_cluster": {
                org.apache.kafka.clients.admin.DescribeClusterResult r = admin.describeCluster();
                Node controller = get(r.controller());
                Map<String, Object> out = new java.util.TreeMap<>();
                out.put("nodes", get(r.nodes()).size());
                out.put("cluster_id_set", get(r.clusterId()) != null && !get(r.clusterId()).isEmpty());
                out.put("controller_is_a_node", controller != null && get(r.nodes()).stream()
                    .anyMatch(n -> n.id() == controller.id()));
                return out;
            }
            case "describe_log_dirs": {
                List<Integer> brokers = new ArrayList<>();
                for (Node n : get(admin.describeCluster().nodes())) {
                    brokers.add(n.id());
                }
                Map<String, Object> out = new java.util.TreeMap<>();
                int dirs = 0;
                for (Map<String, org.apache.kafka.clients.admin.LogDirDescription> byDir :
                        get(admin.describeLogDirs(brokers).allDescriptions()).values()) {
                    for (org.apache.kafka.clients.admin.LogDirDescription d : byDir.values()) {
                        dirs++;
                        for (Map.Entry<TopicPartition, org.apache.kafka.clients.admin.ReplicaInfo> e :
                                d.replicaInfos().entrySet()) {
                            if (e.getKey().topic().equals(topic)) {
                                out.put(String.valueOf(e.getKey().partition()), java.util.Arrays.asList(
                                    e.getValue().size() > 0, e.getValue().offsetLag(), e.getValue().isFuture(),
                                    d.error() == null ? "NONE" : d.error().getClass().getSimpleName()));
                            }
                        }
                    }
                }
                out.put("dirs_described", dirs > 0);
                return out;
            }
            case "describe_producers": {
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<TopicPartition, org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState> e :
                        get(admin.describeProducers(tps(op)).all()).entrySet()) {
                    List<Object> producers = new ArrayList<>();
                    for (org.apache.kafka.clients.admin.ProducerState s : e.getValue().activeProducers()) {
                        producers.add(java.util.Arrays.asList(s.producerId() >= 0, s.producerEpoch(), s.lastSequence(),
                            s.lastTimestamp() > 0, s.coordinatorEpoch().isPresent() ? s.coordinatorEpoch().getAsInt() : null,
                            s.currentTransactionStartOffset().isPresent()
                                ? s.currentTransactionStartOffset().getAsLong() : null));
                    }
                    producers.sort(java.util.Comparator.comparing(Object::toString));
                    out.put(String.valueOf(e.getKey().partition()), producers);
                }
                return out;
            }
            case "list_transactions": {
                java.util.Set<String> wanted = new java.util.HashSet<>();
                op.get("ids").forEach(g -> wanted.add(g.asText()));
                Map<String, Object> out = new java.util.TreeMap<>();
                for (org.apache.kafka.clients.admin.TransactionListing t : get(admin.listTransactions().all())) {
                    if (wanted.contains(t.transactionalId())) {
                        out.put(t.transactionalId(), List.of(t.producerId() >= 0, name(t.state())));
                    }
                }
                return out;
            }
            case "describe_transactions": {
                List<String> ids = new ArrayList<>();
                op.get("ids").forEach(g -> ids.add(g.asText()));
                Map<String, Object> out = new java.util.TreeMap<>();
                for (Map.Entry<String, org.apache.kafka.clients.admin.TransactionDescription> e :
                        get(admin.describeTransactions(ids).all()).entrySet()) {
                    org.apache.kafka.clients.admin.TransactionDescription d = e.getValue();
                    List<String> parts = new ArrayList<>();
                    for (TopicPartition tp : d.topicPartitions()) {
                        parts.add(tp.toString());
                    }
                    java.util.Collections.sort(parts);
                    Map<String, Object> t = new java.util.TreeMap<>();
                    t.put("state", name(d.state()));
                    t.put("producer_id_set", d.producerId() >= 0);
                    t.put("producer_epoch", d.producerEpoch());
                    t.put("timeout_ms", d.transactionTimeoutMs());
                    t.put("start_time_set", d.transactionStartTimeMs().isPresent());
                    t.put("partitions", parts);
                    out.put(e.getKey(), t);
                }
                return out;
            }
            case "delete_topic": {
                get(admin.deleteTopics(List.of(topic)).all());
                return "ok";
            }
            case "create_acls": {  // "acls": [[resourceType, name, patternType, principal, host, operation, permission]]
                List<org.apache.kafka.common.acl.AclBinding> bindings = new ArrayList<>();
                for (JsonNode a : op.get("acls")) {
                    bindings.add(new org.apache.kafka.common.acl.AclBinding(
                        new org.apache.kafka.common.resource.ResourcePattern(
                            org.apache.kafka.common.resource.ResourceType.fromString(a.get(0).asText()), a.get(1).asText(),
                            org.apache.kafka.common.resource.PatternType.fromString(a.get(2).asText())),
                        new org.apache.kafka.common.acl.AccessControlEntry(a.get(3).asText(), a.get(4).asText(),
                            org.apache.kafka.common.acl.AclOperation.fromString(a.get(5).asText()),
                            org.apache.kafka.common.acl.AclPermissionType.fromString(a.get(6).asText()))));
                }
                List<String> out = new ArrayList<>();
                for (org.apache.kafka.common.KafkaFuture<Void> f : admin.createAcls(bindings).values().values()) {
                    try {
                        get(f);
                        out.add("ok");
                    } catch (java.util.concurrent.ExecutionException e) {
                        out.add(org.apache.kafka.common.protocol.Errors.forException(e.getCause()).name());
                    }
                }
                java.util.Collections.sort(out);
                return out;
            }
            case "describe_acls":  // "filter": [resourceType, name|null, patternType, principal|null, host|null, operation, permission]
            case "delete_acls": {
                JsonNode f = op.get("filter");
                org.apache.kafka.common.acl.AclBindingFilter filter = new org.apache.kafka.common.acl.AclBindingFilter(
                    new org.apache.kafka.common.resource.ResourcePatternFilter(
                        org.apache.kafka.common.resource.ResourceType.fromString(f.get(0).asText()),
                        f.get(1).isNull() ? null : f.get(1).asText(),
                        org.apache.kafka.common.resource.PatternType.fromString(f.get(2).asText())),
                    new org.apache.kafka.common.acl.AccessControlEntryFilter(
                        f.get(3).isNull() ? null : f.get(3).asText(), f.get(4).isNull() ? null : f.get(4).asText(),
                        org.apache.kafka.common.acl.AclOperation.fromString(f.get(5).asText()),
                        org.apache.kafka.common.acl.AclPermissionType.fromString(f.get(6).asText())));
                java.util.Collection<org.apache.kafka.common.acl.AclBinding> found =
                    op.get("op").asText().equals("describe_acls") ? get(admin.describeAcls(filter).values())
                    : get(admin.deleteAcls(List.of(filter)).all());
                List<String> out = new ArrayList<>();
                for (org.apache.kafka.common.acl.AclBinding b : found) {
                    out.add(b.toString());
                }
                java.util.Collections.sort(out);
                return out;
            }
            default:
                throw new IllegalArgumentException("unknown admin op " + op.get("op"));
        }
    }
}

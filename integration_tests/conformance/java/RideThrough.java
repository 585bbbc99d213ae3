/*
 * Kafka's Java client riding through leader changes: an idempotent acks=all producer and an
 * assigned (group-less) consumer in one JVM, both running while the test kills and restarts the
 * leaders of the topic's partitions.
 *
 *   java -cp <kafka-clients and deps> RideThrough BOOTSTRAP TOPIC PARTITIONS INTERVAL_MS
 *
 * The producer sends the values "0", "1", ... (as UTF-8 text) to partition n % PARTITIONS, one
 * every INTERVAL_MS, until stdin closes (or a line "stop" arrives); then it flushes and closes.
 * The consumer reads every partition from its beginning (read_uncommitted) throughout, and after
 * the producer closed, until its position reaches each partition's end offset (the high
 * watermark) or WAIT_MS passed. Lines on stdout:
 *   ack <partition> <offset> <value>     a delivery the cluster acknowledged
 *   nack <value> <exception class>: <message>   a delivery that failed
 *   read <partition> <offset> <value>    a record the consumer returned
 *   error <exception class>: <message>   the consumer failed (the run then ends)
 *   done <records read>                  last line of a complete run
 * Exit 0 after "done"; 1 when the consumer failed or did not reach the end offsets in time.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class RideThrough {
    static final long WAIT_MS = 120_000;

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long intervalMs = Long.parseLong(args[3]);
        AtomicBoolean stop = new AtomicBoolean(false);
        AtomicBoolean produced = new AtomicBoolean(false);

        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                    // other input is ignored
                }
            } catch (Exception e) {
                // a closed stdin stops the producer as "stop" does
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        Thread producerThread = new Thread(() -> {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("acks", "all");
            p.put("enable.idempotence", "true");
            p.put("linger.ms", "5");
            p.put("key.serializer", ByteArraySerializer.class.getName());
            p.put("value.serializer", ByteArraySerializer.class.getName());
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                long n = 0;
                while (!stop.get()) {
                    final String value = Long.toString(n);
                    producer.send(new ProducerRecord<>(topic, (int) (n % partitions), null,
                        value.getBytes(StandardCharsets.UTF_8)), (m, e) -> {
                            if (e != null) {
                                say("nack " + value + " " + e.getClass().getSimpleName() + ": " + e.getMessage());
                            } else {
                                say("ack " + m.partition() + " " + m.offset() + " " + value);
                            }
                        });
                    n++;
                    Thread.sleep(intervalMs);
                }
                producer.flush();
            } catch (Exception e) {
                say("nack - " + e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            produced.set(true);
        });
        producerThread.start();

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long read = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                tps.add(new TopicPartition(topic, i));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = Long.MAX_VALUE;
            Map<TopicPartition, Long> end = null;
            while (true) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    say("read " + r.partition() + " " + r.offset() + " " + new String(r.value(), StandardCharsets.UTF_8));
                    read++;
                }
                if (produced.get()) {
                    if (end == null) {
                        deadline = System.currentTimeMillis() + WAIT_MS;
                        end = consumer.endOffsets(tps, Duration.ofMillis(WAIT_MS));
                    }
                    boolean caughtUp = true;
                    for (TopicPartition tp : tps) {
                        caughtUp &= consumer.position(tp, Duration.ofMillis(WAIT_MS)) >= end.get(tp);
                    }
                    if (caughtUp) {
                        break;
                    }
                    if (System.currentTimeMillis() > deadline) {
                        say("error TimeoutException: end offsets " + end + " not reached in " + WAIT_MS + " ms");
                        System.exit(1);
                    }
                }
            }
        } catch (Exception e) {
            say("error " + e.getClass().getSimpleName() + ": " + e.getMessage());
            System.exit(1);
        }
        producerThread.join();
        say("done " + read);
    }
}

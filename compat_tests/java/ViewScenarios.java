// Scenarios of the Java client reading kbroker's filtered views (docs/views.md), for
// compat_tests/test_java_views.py.
//
// A view is read as any topic is read; what these scenarios add to KafkaHarness's is a consumer
// group that stops after part of a topic and a second member that must resume exactly where the
// first one's commit left it, and the offset lookups (earliest, latest under both isolation
// levels, by timestamp, then a seek to the offset found) asked of several topics side by side,
// and a read of a large view answered compactly (offsets and a digest of the values, not every
// record as JSON).
//
// It runs through KafkaHarness's serve loop: `java -cp CLASSPATH ViewScenarios --serve` adds
// these scenarios to KafkaHarness.SCENARIOS, then serves every scenario of both files.

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;

final class ViewScenarios {
    private ViewScenarios() {
    }

    public static void main(String[] argv) throws Exception {
        KafkaHarness.SCENARIOS.put("group_resume", ViewScenarios::groupResume);
        KafkaHarness.SCENARIOS.put("topic_offsets", ViewScenarios::topicOffsets);
        KafkaHarness.SCENARIOS.put("consume_digest", ViewScenarios::consumeDigest);
        KafkaHarness.main(argv);
    }

    /**
     * A read_committed member of `group` subscribes to `topic` and polls (at most
     * `max_poll_records` records a poll) until it has `first` records or more, commits its
     * positions (commitSync()) and closes. A second member of the group then reads until its
     * position in every partition reaches the end offsets, and commits.
     */
    static Map<String, Object> groupResume(KafkaHarness.Args args) throws Exception {
        String topic = args.get("topic");
        int partitions = args.getInt("partitions");
        int first = args.getInt("first");
        List<TopicPartition> all = new ArrayList<>();
        for (int p = 0; p < partitions; p++) all.add(new TopicPartition(topic, p));
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"),
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
            ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
            ConsumerConfig.MAX_POLL_RECORDS_CONFIG, args.getOr("max_poll_records", "7"));
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> member = KafkaHarness.consumer(args, conf)) {
            member.subscribe(List.of(topic));
            out.put("committed_before", KafkaHarness.offsets(member.committed(new java.util.HashSet<>(all))));
            List<Object> records = new ArrayList<>();
            long deadline = System.currentTimeMillis() + KafkaHarness.WAIT_MS;
            while (records.size() < first) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("first member got " + records.size() + " of " + first + " records");
                }
                for (ConsumerRecord<byte[], byte[]> r : member.poll(Duration.ofMillis(200))) records.add(KafkaHarness.record(r));
            }
            out.put("first_records", records);
            out.put("first_assignment", KafkaHarness.partitions(member.assignment()));
            out.put("first_positions", positions(member, all));
            member.commitSync();
            out.put("first_committed", KafkaHarness.offsets(member.committed(new java.util.HashSet<>(all))));
        }
        try (KafkaConsumer<byte[], byte[]> member = KafkaHarness.consumer(args, conf)) {
            member.subscribe(List.of(topic));
            Map<TopicPartition, Long> end = member.endOffsets(all);
            List<Object> records = new ArrayList<>();
            long deadline = System.currentTimeMillis() + KafkaHarness.WAIT_MS;
            while (member.assignment().size() < partitions || !KafkaHarness.reached(member, end)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("second member did not reach " + end + " (assigned "
                        + member.assignment() + ", " + records.size() + " records)");
                }
                for (ConsumerRecord<byte[], byte[]> r : member.poll(Duration.ofMillis(200))) records.add(KafkaHarness.record(r));
            }
            out.put("second_records", records);
            out.put("end", KafkaHarness.byPartition(end));
            out.put("second_positions", positions(member, all));
            member.commitSync();
            out.put("second_committed", KafkaHarness.offsets(member.committed(new java.util.HashSet<>(all))));
        }
        return out;
    }

    /**
     * consume_all's read (assign every partition of `topic`, seekToBeginning, poll until the
     * positions reach the end offsets), at `isolation` (read_committed by default), within
     * `wait_ms`, answered per partition by what it received in order: the offsets, the count, a
     * SHA-256 over the values (each as a 4-byte big-endian length, then its bytes), and how many
     * records had each value of their last `tag` header ("" for none). Bounded in size whatever
     * the number of records, for views of a hundred thousand records.
     */
    static Map<String, Object> consumeDigest(KafkaHarness.Args args) throws Exception {
        String topic = args.get("topic");
        String isolation = args.getOr("isolation", "read_committed");
        long waitMs = Long.parseLong(args.getOr("wait_ms", Long.toString(KafkaHarness.WAIT_MS)));
        try (KafkaConsumer<byte[], byte[]> consumer = KafkaHarness.consumer(args, Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation, ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
            List<TopicPartition> tps = new ArrayList<>();
            consumer.partitionsFor(topic, Duration.ofMillis(KafkaHarness.WAIT_MS))
                .forEach(p -> tps.add(new TopicPartition(topic, p.partition())));
            tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            Map<Integer, List<Long>> offsets = new TreeMap<>();
            Map<Integer, MessageDigest> digests = new TreeMap<>();
            Map<Integer, Map<String, Long>> tags = new TreeMap<>();
            for (TopicPartition tp : tps) {
                offsets.put(tp.partition(), new ArrayList<>());
                digests.put(tp.partition(), MessageDigest.getInstance("SHA-256"));
                tags.put(tp.partition(), new TreeMap<>());
            }
            long deadline = System.currentTimeMillis() + waitMs;
            int polls = 0;
            while (!KafkaHarness.reached(consumer, end)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("positions did not reach " + end + " in " + waitMs + " ms");
                }
                polls++;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    offsets.get(r.partition()).add(r.offset());
                    byte[] value = r.value() == null ? new byte[0] : r.value();
                    MessageDigest digest = digests.get(r.partition());
                    digest.update(ByteBuffer.allocate(4).putInt(value.length).array());
                    digest.update(value);
                    Header tag = r.headers().lastHeader("tag");
                    String tagValue = tag == null ? "" : new String(tag.value(), StandardCharsets.UTF_8);
                    tags.get(r.partition()).merge(tagValue, 1L, Long::sum);
                }
            }
            Map<String, Object> partitions = new TreeMap<>();
            for (TopicPartition tp : tps) {
                int p = tp.partition();
                partitions.put(Integer.toString(p), KafkaHarness.map("count", offsets.get(p).size(),
                    "offsets", offsets.get(p), "sha256", HexFormat.of().formatHex(digests.get(p).digest()),
                    "tags", tags.get(p), "position", consumer.position(tp)));
            }
            return KafkaHarness.map("isolation", isolation, "beginning", KafkaHarness.byPartition(begin),
                "end", KafkaHarness.byPartition(end), "polls", polls, "partitions", partitions);
        }
    }

    /**
     * For each of `topics` (comma-separated, `partitions` each): beginningOffsets, endOffsets under
     * read_committed and read_uncommitted, offsetsForTimes (`times`: one timestamp per partition,
     * comma-separated) and, seeking each partition to the offset found, the first record a
     * read_committed consumer gets from there.
     */
    static Map<String, Object> topicOffsets(KafkaHarness.Args args) throws Exception {
        int partitions = args.getInt("partitions");
        String[] times = args.get("times").split(",");
        if (times.length != partitions) throw new IllegalArgumentException("one time per partition: " + args.get("times"));
        Map<String, Object> out = new LinkedHashMap<>();
        for (String topic : args.get("topics").split(",")) {
            List<TopicPartition> all = new ArrayList<>();
            Map<TopicPartition, Long> query = new HashMap<>();
            for (int p = 0; p < partitions; p++) {
                TopicPartition tp = new TopicPartition(topic, p);
                all.add(tp);
                query.put(tp, Long.parseLong(times[p]));
            }
            Map<String, Object> result = new LinkedHashMap<>();
            try (KafkaConsumer<byte[], byte[]> uncommitted = KafkaHarness.consumer(args, Map.of(
                    ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted", ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
                result.put("end_read_uncommitted", KafkaHarness.byPartition(uncommitted.endOffsets(all)));
            }
            try (KafkaConsumer<byte[], byte[]> consumer = KafkaHarness.consumer(args, Map.of(
                    ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed", ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
                result.put("beginning", KafkaHarness.byPartition(consumer.beginningOffsets(all)));
                Map<TopicPartition, Long> end = consumer.endOffsets(all);
                result.put("end_read_committed", KafkaHarness.byPartition(end));
                Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(query);
                Map<String, Object> foundOut = new TreeMap<>();
                Map<String, Object> firstAfter = new TreeMap<>();
                for (TopicPartition tp : all) {
                    OffsetAndTimestamp ot = found.get(tp);
                    String p = Integer.toString(tp.partition());
                    foundOut.put(p, ot == null ? null : KafkaHarness.map("offset", ot.offset(), "timestamp", ot.timestamp()));
                    firstAfter.put(p, ot == null ? null : firstRecordFrom(consumer, tp, ot.offset(), end.get(tp)));
                }
                result.put("offsets_for_times", foundOut);
                result.put("first_record_from_found", firstAfter);
            }
            out.put(topic, result);
        }
        return out;
    }

    /** The first record at or after `offset`, or null when the position reaches `end` without one. */
    static Object firstRecordFrom(KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp, long offset, long end) {
        consumer.assign(List.of(tp));
        consumer.seek(tp, offset);
        long deadline = System.currentTimeMillis() + KafkaHarness.WAIT_MS;
        while (consumer.position(tp) < end) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException(tp + " did not reach " + end);
            List<ConsumerRecord<byte[], byte[]>> records = consumer.poll(Duration.ofMillis(200)).records(tp);
            if (!records.isEmpty()) return KafkaHarness.record(records.get(0));
        }
        return null;
    }

    static Map<String, Object> positions(KafkaConsumer<byte[], byte[]> consumer, List<TopicPartition> tps) {
        Map<String, Object> out = new TreeMap<>();
        for (TopicPartition tp : tps) {
            out.put(Integer.toString(tp.partition()), consumer.assignment().contains(tp) ? consumer.position(tp) : null);
        }
        return out;
    }
}

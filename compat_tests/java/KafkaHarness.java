// Scenarios of the Java Kafka client (kafka-clients 3.9) against a broker, for compat_tests.
//
// Each scenario drives the real client API the way applications do and returns what it
// observed as one JSON object; the pytest side asserts on it. Scenarios do not assert
// themselves, so a difference shows up in pytest with both values side by side.
//
// Two ways to run it:
//   java -cp CLASSPATH KafkaHarness SCENARIO key=value ...   one scenario, JSON on stdout
//   java -cp CLASSPATH KafkaHarness --serve                  one request per stdin line:
//        "SCENARIO<TAB>key=value<TAB>...", answered by one stdout line "@@result<TAB>JSON"
// --serve lets a whole pytest module share one JVM, which saves the JVM start and the
// client's class loading (a second or so) per scenario.
//
// Every wait is bounded: polling loops have deadlines and client calls have timeouts, so a
// broker that misbehaves makes a scenario report an exception instead of hanging.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaHarness {
    static final String RESULT_PREFIX = "@@result\t";
    // Upper bound for any single client call or polling loop in a scenario.
    static final long WAIT_MS = 30_000;

    interface Scenario {
        Map<String, Object> run(Args args) throws Exception;
    }

    static final Map<String, Scenario> SCENARIOS = new LinkedHashMap<>();

    static {
        SCENARIOS.put("ping", args -> map("pong", true));
        SCENARIOS.put("admin_topics", KafkaHarness::adminTopics);
        SCENARIOS.put("describe_cluster", KafkaHarness::describeCluster);
        SCENARIOS.put("list_offsets", KafkaHarness::listOffsets);
        SCENARIOS.put("delete_records", KafkaHarness::deleteRecords);
        SCENARIOS.put("configs", KafkaHarness::configs);
        SCENARIOS.put("groups_admin", KafkaHarness::groupsAdmin);
        SCENARIOS.put("produce", KafkaHarness::produce);
        SCENARIOS.put("consume_all", KafkaHarness::consumeAll);
        SCENARIOS.put("spark_read", KafkaHarness::sparkRead);
        SCENARIOS.put("group_commit", KafkaHarness::groupCommit);
        SCENARIOS.put("fetch_rounds", KafkaHarness::fetchRounds);
        SCENARIOS.put("txn_commit_abort", KafkaHarness::txnCommitAbort);
        SCENARIOS.put("txn_offsets", KafkaHarness::txnOffsets);
        SCENARIOS.put("txn_fencing", KafkaHarness::txnFencing);
        SCENARIOS.put("observe", KafkaHarness::observe);
        SCENARIOS.put("scram_users", KafkaHarness::scramUsers);
        SCENARIOS.put("produce_paced", KafkaHarness::producePaced);
        SCENARIOS.put("authorize", KafkaHarness::authorize);
        SCENARIOS.put("consumer_protocol_group", KafkaHarness::consumerProtocolGroup);
    }

    public static void main(String[] argv) throws Exception {
        // Client logging goes through slf4j with no binding: silent. Our stdout carries results only.
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (argv.length == 1 && argv[0].equals("--serve")) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) continue;
                String[] parts = line.split("\t");
                out.println(RESULT_PREFIX + Json.write(runOne(parts[0], Args.parse(parts, 1))));
            }
            return;
        }
        if (argv.length == 0) {
            System.err.println("usage: KafkaHarness SCENARIO key=value ... | --serve; scenarios: " + SCENARIOS.keySet());
            System.exit(2);
        }
        Map<String, Object> result = runOne(argv[0], Args.parse(argv, 1));
        out.println(Json.write(result));
        System.exit(result.containsKey("exception") ? 1 : 0);
    }

    static Map<String, Object> runOne(String name, Args args) {
        Scenario scenario = SCENARIOS.get(name);
        if (scenario == null) {
            return map("exception", map("type", "UnknownScenario", "message", name));
        }
        try {
            return scenario.run(args);
        } catch (Throwable t) {
            return map("exception", describe(t));
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Admin

    /** createTopics (and its errors), then describeTopics by name (DescribeTopicPartitions) and by id (Metadata). */
    static Map<String, Object> adminTopics(Args args) throws Exception {
        String prefix = args.get("prefix");
        String many = prefix + "-many";
        String defaults = prefix + "-defaults";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            CreateTopicsResult created = admin.createTopics(List.of(
                new NewTopic(many, 3, (short) 1).configs(Map.of("retention.ms", "3600000", "max.message.bytes", "2000000")),
                new NewTopic(defaults, Optional.empty(), Optional.empty())));
            created.all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            Map<String, Object> results = new LinkedHashMap<>();
            for (String topic : List.of(many, defaults)) {
                Config config = created.config(topic).get();
                results.put(topic, map(
                    "topic_id", created.topicId(topic).get().toString(),
                    "partitions", created.numPartitions(topic).get(),
                    "replication_factor", created.replicationFactor(topic).get(),
                    "configs", configEntries(config, List.of("retention.ms", "max.message.bytes", "cleanup.policy"))));
            }
            out.put("created", results);

            out.put("duplicate", errorOf(admin.createTopics(List.of(new NewTopic(many, 1, (short) 1))).all()));
            out.put("invalid_name", errorOf(admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all()));
            out.put("zero_partitions", errorOf(admin.createTopics(List.of(new NewTopic(prefix + "-zero", 0, (short) 1))).all()));
            out.put("too_many_replicas", errorOf(admin.createTopics(List.of(new NewTopic(prefix + "-rf3", 1, (short) 3))).all()));
            out.put("bad_config", errorOf(admin.createTopics(List.of(
                new NewTopic(prefix + "-badcfg", 1, (short) 1).configs(Map.of("retention.ms", "soon")))).all()));
            out.put("validate_only", errorOf(admin.createTopics(
                List.of(new NewTopic(prefix + "-validate", 2, (short) 1)), new CreateTopicsOptions().validateOnly(true)).all()));

            // CreateTopics succeeds once the controller has the topics; the broker may list them a
            // moment later (Admin.createTopics says so): wait for that, as a tool would.
            List<String> ours = awaitListed(admin, prefix, List.of(defaults, many));
            Set<String> listed = new HashSet<>(admin.listTopics().names().get());
            out.put("listed", ours);
            Set<String> withInternal = admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get();
            out.put("listed_internal_extra", sorted(withInternal.stream().filter(t -> !listed.contains(t)).toList()));

            // One partition per response: the broker must page through `many` with its cursor.
            Map<String, TopicDescription> byName = admin.describeTopics(
                TopicCollection.ofTopicNames(List.of(many, defaults)),
                new DescribeTopicsOptions().partitionSizeLimitPerResponse(1)).allTopicNames().get(WAIT_MS, TimeUnit.MILLISECONDS);
            out.put("by_name", mapValues(byName, KafkaHarness::topicDescription));

            List<Uuid> ids = List.of(byName.get(many).topicId(), byName.get(defaults).topicId());
            Map<Uuid, TopicDescription> byId = admin.describeTopics(TopicCollection.ofTopicIds(ids))
                .allTopicIds().get(WAIT_MS, TimeUnit.MILLISECONDS);
            Map<String, Object> byIdOut = new TreeMap<>();
            byId.forEach((id, d) -> byIdOut.put(id.toString(), topicDescription(d)));
            out.put("by_id", byIdOut);

            out.put("unknown_name", errorOf(admin.describeTopics(
                TopicCollection.ofTopicNames(List.of(prefix + "-missing"))).allTopicNames()));
            out.put("unknown_id", errorOf(admin.describeTopics(
                TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).allTopicIds()));

            out.put("delete", errorOf(admin.deleteTopics(List.of(defaults)).all()));
            out.put("listed_after_delete", awaitListed(admin, prefix, List.of(many)));
        }
        return out;
    }

    /**
     * The listed topics starting with `prefix`, sorted, once they are `expected` (polled up to
     * WAIT_MS; after that whatever is listed, for the test to report).
     */
    static List<String> awaitListed(Admin admin, String prefix, List<String> expected) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (true) {
            List<String> listed = sorted(admin.listTopics().names().get(WAIT_MS, TimeUnit.MILLISECONDS).stream()
                .filter(t -> t.startsWith(prefix)).toList());
            if (listed.equals(sorted(expected)) || System.currentTimeMillis() >= deadline) return listed;
            Thread.sleep(50);  // between polls of the condition
        }
    }

    static Map<String, Object> describeCluster(Args args) throws Exception {
        try (Admin admin = admin(args)) {
            DescribeClusterResult cluster = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node node : cluster.nodes().get(WAIT_MS, TimeUnit.MILLISECONDS)) nodes.add(node(node));
            return map("cluster_id", cluster.clusterId().get(), "controller", node(cluster.controller().get()), "nodes", nodes);
        }
    }

    /** Records with shuffled timestamps, then every OffsetSpec under both isolation levels. */
    static Map<String, Object> listOffsets(Args args) throws Exception {
        String topic = args.get("topic");
        long base = args.getLong("base");
        TopicPartition tp = new TopicPartition(topic, 0);
        long[] deltas = {10, 30, 20, 50, 40};
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of())) {
            for (int i = 0; i < deltas.length; i++) {
                producer.send(new ProducerRecord<>(topic, 0, base + deltas[i], null, bytes("r" + i)));
            }
            producer.flush();
        }
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("max_timestamp", OffsetSpec.maxTimestamp());
        for (long delta : new long[] {0, 10, 25, 50, 51}) specs.put("ts+" + delta, OffsetSpec.forTimestamp(base + delta));
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            for (IsolationLevel level : IsolationLevel.values()) {
                Map<String, Object> results = new LinkedHashMap<>();
                for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
                    ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, spec.getValue()), new ListOffsetsOptions(level))
                        .partitionResult(tp).get(WAIT_MS, TimeUnit.MILLISECONDS);
                    results.put(spec.getKey(), offsetInfo(info));
                }
                out.put(level.name(), results);
            }
            // Several partitions and specs in one call, as tools do.
            TopicPartition missing = new TopicPartition(topic, 7);
            out.put("missing_partition", errorOf(admin.listOffsets(Map.of(missing, OffsetSpec.latest()),
                new ListOffsetsOptions().timeoutMs(1000)).partitionResult(missing)));
        }
        return out;
    }

    /** deleteRecords moves the log start offset; earliest offsets, timestamp lookups and consumers follow it. */
    static Map<String, Object> deleteRecords(Args args) throws Exception {
        String topic = args.get("topic");
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            Function<Long, Object> delete = offset -> {
                KafkaFuture<org.apache.kafka.clients.admin.DeletedRecords> f = admin.deleteRecords(
                    Map.of(tp, RecordsToDelete.beforeOffset(offset))).lowWatermarks().get(tp);
                Object error = errorOf(f);
                return error != null ? error : map("low_watermark", getQuietly(f).lowWatermark());
            };
            out.put("delete_4", delete.apply(4L));
            out.put("earliest", offsetInfo(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get()));
            out.put("ts_0", offsetInfo(admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(0))).partitionResult(tp).get()));
            out.put("beginning_records", readFrom(args, tp, null, 3));
            out.put("delete_2_below_start", delete.apply(2L));
            out.put("delete_past_end", delete.apply(11L));
            out.put("delete_to_hw", delete.apply(-1L));
            out.put("earliest_after_all", offsetInfo(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get()));
            out.put("latest_after_all", offsetInfo(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get()));
            TopicPartition missing = new TopicPartition(topic, 5);
            out.put("missing_partition", errorOf(admin.deleteRecords(Map.of(missing, RecordsToDelete.beforeOffset(1)),
                new org.apache.kafka.clients.admin.DeleteRecordsOptions().timeoutMs(1000)).lowWatermarks().get(missing)));
        }
        return out;
    }

    /** Describes resource until key has value (or 15 s pass; the caller's assertions then fail). */
    static Config describeUntil(Function<ConfigResource, Config> describe, ConfigResource resource,
                                String key, String value) throws InterruptedException {
        long deadline = System.nanoTime() + 15_000_000_000L;
        while (true) {
            Config config = describe.apply(resource);
            ConfigEntry entry = config == null ? null : config.get(key);
            if ((entry != null && value.equals(entry.value())) || System.nanoTime() > deadline) {
                return config;
            }
            Thread.sleep(50);
        }
    }

    static Map<String, Object> configs(Args args) throws Exception {
        String topic = args.get("topic");
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        List<String> keys = List.of("retention.ms", "cleanup.policy", "segment.bytes", "segment.ms", "max.message.bytes");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            Function<ConfigResource, Config> describe = r -> getQuietly(admin.describeConfigs(
                List.of(r), new DescribeConfigsOptions().includeSynonyms(true)).values().get(r));
            out.put("initial", configEntries(describe.apply(resource), keys));

            // The node id differs between brokers (0 here, 1 in the Kafka container).
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, args.getOr("broker", "0"));
            out.put("broker", configEntries(describe.apply(broker), List.of("broker.id", "log.retention.hours", "num.partitions")));

            out.put("alter_1", errorOf(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "60000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)))).all()));
            // A KRaft broker applies the controller's config records after the alter returns:
            // wait until this broker shows the change rather than reading a stale image.
            out.put("after_1", configEntries(describeUntil(describe, resource, "cleanup.policy", "delete,compact"), keys));

            out.put("alter_2", errorOf(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT)))).all()));
            out.put("after_2", configEntries(describeUntil(describe, resource, "cleanup.policy", "compact"), keys));

            out.put("validate_only", errorOf(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("segment.ms", "1000"), AlterConfigOp.OpType.SET))),
                new AlterConfigsOptions().validateOnly(true)).all()));
            out.put("after_validate_only", configEntries(describe.apply(resource), List.of("segment.ms")));

            out.put("append_to_number", errorOf(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "5"), AlterConfigOp.OpType.APPEND)))).all()));
            out.put("unknown_name", errorOf(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("no.such.config", "5"), AlterConfigOp.OpType.SET)))).all()));
            out.put("bad_value", errorOf(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all()));
            ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, topic + "-missing");
            out.put("describe_missing", errorOf(admin.describeConfigs(List.of(missing)).values().get(missing)));
            out.put("alter_missing", errorOf(admin.incrementalAlterConfigs(Map.of(missing, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "1000"), AlterConfigOp.OpType.SET)))).all()));
        }
        return out;
    }

    /** A group with a live member, then empty, then deleted, as the admin APIs see it. */
    static Map<String, Object> groupsAdmin(Args args) throws Exception {
        String topic = args.get("topic");
        String group = args.get("group");
        int expected = args.getInt("records");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin(args)) {
            Map<String, Object> consumerConf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.CLIENT_ID_CONFIG, "harness-member", ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false",
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            try (KafkaConsumer<byte[], byte[]> consumer = consumer(args, consumerConf)) {
                consumer.subscribe(List.of(topic));
                out.put("consumed", pollCount(consumer, expected).size());
                consumer.commitSync(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(1, "first-only")));
                consumer.commitSync();
                out.put("member_id", consumer.groupMetadata().memberId());
                out.put("generation", consumer.groupMetadata().generationId());
                out.put("listed_active", listGroups(admin, group, new ListConsumerGroupsOptions()));
                out.put("listed_stable_filter", listGroups(admin, group,
                    new ListConsumerGroupsOptions().inStates(Set.of(ConsumerGroupState.STABLE))));
                out.put("listed_empty_filter", listGroups(admin, group,
                    new ListConsumerGroupsOptions().inStates(Set.of(ConsumerGroupState.EMPTY))));
                out.put("described_active", describeGroup(admin, group));
                out.put("offsets_active", groupOffsets(admin, group));
                out.put("delete_active", errorOf(admin.deleteConsumerGroups(List.of(group)).all()));
            }
            out.put("listed_closed", listGroups(admin, group, new ListConsumerGroupsOptions()));
            out.put("described_closed", describeGroup(admin, group));
            out.put("offsets_closed", groupOffsets(admin, group));
            out.put("described_unknown", describeGroup(admin, group + "-unknown"));
            out.put("offsets_unknown", groupOffsets(admin, group + "-unknown"));
            out.put("delete_closed", errorOf(admin.deleteConsumerGroups(List.of(group)).all()));
            out.put("listed_deleted", listGroups(admin, group, new ListConsumerGroupsOptions()));
            out.put("offsets_deleted", groupOffsets(admin, group));
        }
        return out;
    }

    static Object listGroups(Admin admin, String group, ListConsumerGroupsOptions options) throws Exception {
        List<Object> found = new ArrayList<>();
        for (ConsumerGroupListing listing : admin.listConsumerGroups(options).all().get(WAIT_MS, TimeUnit.MILLISECONDS)) {
            if (listing.groupId().equals(group)) {
                found.add(map("group_id", listing.groupId(), "simple", listing.isSimpleConsumerGroup(),
                    "state", listing.state().map(Enum::name).orElse(null),
                    "type", listing.type().map(Enum::name).orElse(null)));
            }
        }
        return found;
    }

    static Object describeGroup(Admin admin, String group) {
        KafkaFuture<ConsumerGroupDescription> future = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group);
        Object error = errorOf(future);
        if (error != null) return error;
        ConsumerGroupDescription d = getQuietly(future);
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            members.add(map("member_id", m.consumerId(), "instance_id", m.groupInstanceId().orElse(null),
                "client_id", m.clientId(), "host", m.host(), "assignment", partitions(m.assignment().topicPartitions())));
        }
        return map("group_id", d.groupId(), "simple", d.isSimpleConsumerGroup(), "state", d.state().name(),
            "assignor", d.partitionAssignor(), "coordinator", d.coordinator() == null ? null : d.coordinator().id(),
            "type", d.type().name(), "members", members);
    }

    static Object groupOffsets(Admin admin, String group) {
        KafkaFuture<Map<TopicPartition, OffsetAndMetadata>> future =
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata();
        Object error = errorOf(future);
        return error != null ? error : offsets(getQuietly(future));
    }

    // ---------------------------------------------------------------------------------------------
    // Producer

    /**
     * Keyed records with headers through a producer with default settings (3.x: idempotent,
     * acks=all) and an optional codec; returns the RecordMetadata of each send, in send order.
     */
    static Map<String, Object> produce(Args args) throws Exception {
        String topic = args.get("topic");
        int count = args.getInt("count");
        Map<String, Object> conf = new HashMap<>();
        if (args.has("compression")) conf.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.get("compression"));
        // Everything in one batch per partition, so the broker sees one compressed batch each.
        if (args.has("linger_ms")) conf.put(ProducerConfig.LINGER_MS_CONFIG, args.get("linger_ms"));
        List<Object> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, conf)) {
            List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                List<Header> headers = List.of(
                    new RecordHeader("index", bytes(Integer.toString(i))),
                    new RecordHeader("dup", bytes("first")),
                    new RecordHeader("dup", bytes("second")),
                    new RecordHeader("empty", new byte[0]),
                    new RecordHeader("null", null));
                futures.add(producer.send(new ProducerRecord<>(topic, null, null, bytes("key-" + i),
                    bytes("value-" + i + "-" + "x".repeat(200)), headers)));
            }
            for (java.util.concurrent.Future<RecordMetadata> f : futures) {
                RecordMetadata m = f.get(WAIT_MS, TimeUnit.MILLISECONDS);
                sent.add(map("partition", m.partition(), "offset", m.offset(), "timestamp", m.timestamp(),
                    "key_size", m.serializedKeySize(), "value_size", m.serializedValueSize()));
            }
        }
        return map("sent", sent);
    }

    /** One producer sending `count` records `pause_ms` apart, each acknowledged before the next:
     * with a short session lifetime (connections.max.reauth.ms) the client re-authenticates
     * (KIP-368) on its connection meanwhile. */
    static Map<String, Object> producePaced(Args args) throws Exception {
        String topic = args.get("topic");
        int count = args.getInt("count");
        long pauseMs = args.getInt("pause_ms");
        List<Object> offsets = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of(ProducerConfig.ACKS_CONFIG, "all"))) {
            for (int i = 0; i < count; i++) {
                RecordMetadata m = producer.send(new ProducerRecord<>(topic, bytes("paced-" + i)))
                    .get(WAIT_MS, TimeUnit.MILLISECONDS);
                offsets.add(m.offset());
                Thread.sleep(pauseMs);  // the pacing is the scenario: time for the session to age
            }
        }
        return map("offsets", offsets);
    }

    // ---------------------------------------------------------------------------------------------
    // SCRAM credentials (KIP-554)

    /** Upsert `user`'s credential for `mechanism` with `password` and `iterations`, then describe it. */
    static Map<String, Object> scramUsers(Args args) throws Exception {
        String user = args.get("user");
        org.apache.kafka.clients.admin.ScramMechanism mechanism =
            org.apache.kafka.clients.admin.ScramMechanism.fromMechanismName(args.get("mechanism"));
        try (Admin admin = admin(args)) {
            admin.alterUserScramCredentials(List.of(new org.apache.kafka.clients.admin.UserScramCredentialUpsertion(
                user, new org.apache.kafka.clients.admin.ScramCredentialInfo(mechanism, args.getInt("iterations")),
                args.get("password")))).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            org.apache.kafka.clients.admin.UserScramCredentialsDescription description = admin
                .describeUserScramCredentials(List.of(user)).description(user).get(WAIT_MS, TimeUnit.MILLISECONDS);
            List<Object> infos = new ArrayList<>();
            description.credentialInfos().forEach(info -> infos.add(map(
                "mechanism", info.mechanism().mechanismName(), "iterations", info.iterations())));
            return map("user", description.name(), "credentials", infos);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Consumer

    /** Every record of a topic through assign + seekToBeginning, up to the end offsets, at an isolation level. */
    static Map<String, Object> consumeAll(Args args) throws Exception {
        String topic = args.get("topic");
        String isolation = args.getOr("isolation", "read_uncommitted");
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(args, Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation, ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
            List<TopicPartition> tps = new ArrayList<>();
            consumer.partitionsFor(topic, Duration.ofMillis(WAIT_MS)).forEach(p -> tps.add(new TopicPartition(topic, p.partition())));
            tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            List<Object> records = new ArrayList<>();
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (!reached(consumer, end)) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("positions did not reach " + end);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) records.add(record(r));
            }
            Map<String, Object> positions = new TreeMap<>();
            for (TopicPartition tp : tps) positions.put(Integer.toString(tp.partition()), consumer.position(tp));
            return map("isolation", isolation, "beginning", byPartition(begin), "end", byPartition(end),
                "positions", positions, "records", records);
        }
    }

    static boolean reached(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) return false;
        }
        return true;
    }

    /**
     * What Spark's Kafka source does: the driver asks for earliest/latest/by-time offsets, an
     * executor consumer (ByteArrayDeserializer, auto.offset.reset=none, no auto-commit) assigns one
     * partition, seeks to the start of its offset range and polls up to its end; out-of-range
     * offsets must raise OffsetOutOfRangeException so Spark can report data loss.
     */
    static Map<String, Object> sparkRead(Args args) throws Exception {
        String topic = args.get("topic");
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> driverConf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, args.get("group") + "-driver-0",
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        try (KafkaConsumer<byte[], byte[]> driver = consumer(args, driverConf)) {
            driver.assign(List.of(p0, p1));
            out.put("beginning", byPartition(driver.beginningOffsets(List.of(p0, p1))));
            out.put("end", byPartition(driver.endOffsets(List.of(p0, p1))));
            driver.seekToBeginning(List.of(p0, p1));
            out.put("position_beginning", map("0", driver.position(p0), "1", driver.position(p1)));
            driver.seekToEnd(List.of(p0, p1));
            out.put("position_end", map("0", driver.position(p0), "1", driver.position(p1)));
            Map<TopicPartition, OffsetAndTimestamp> times = driver.offsetsForTimes(
                Map.of(p0, args.getLong("p0_ts"), p1, Long.MAX_VALUE - 1));
            Map<String, Object> timesOut = new TreeMap<>();
            times.forEach((tp, ot) -> timesOut.put(Integer.toString(tp.partition()),
                ot == null ? null : map("offset", ot.offset(), "timestamp", ot.timestamp())));
            out.put("offsets_for_times", timesOut);
        }
        Map<String, Object> executorConf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, args.get("group") + "-executor",
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none",
            ConsumerConfig.RECEIVE_BUFFER_CONFIG, "65536");
        try (KafkaConsumer<byte[], byte[]> executor = consumer(args, executorConf)) {
            out.put("p0_3_to_8", readRange(executor, p0, 3, 8));
            out.put("p1_1_to_4", readRange(executor, p1, 1, 4));
            // At the end: nothing to read and no error, until a fetch has completed at that offset.
            executor.assign(List.of(p0));
            executor.seek(p0, 10);
            double fetchesBefore = metric(executor, "consumer-fetch-manager-metrics", "fetch-total");
            List<Object> atEnd = new ArrayList<>();
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (metric(executor, "consumer-fetch-manager-metrics", "fetch-total") < fetchesBefore + 2) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no fetch completed at the end offset");
                for (ConsumerRecord<byte[], byte[]> r : executor.poll(Duration.ofMillis(100))) atEnd.add(record(r));
            }
            out.put("at_end", map("records", atEnd, "position", executor.position(p0)));
            out.put("past_end", outOfRange(executor, p0, 11));
            out.put("below_start", outOfRange(executor, p1, 0));
        }
        return out;
    }

    static List<Object> readRange(KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp, long from, long until) {
        consumer.assign(List.of(tp));
        consumer.seek(tp, from);
        List<Object> records = new ArrayList<>();
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (consumer.position(tp) < until) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("range not read: " + tp);
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                if (r.offset() < until) records.add(record(r));
            }
        }
        return records;
    }

    static Object outOfRange(KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp, long offset) {
        consumer.assign(List.of(tp));
        consumer.seek(tp, offset);
        long deadline = System.currentTimeMillis() + WAIT_MS;
        List<Object> records = new ArrayList<>();
        while (System.currentTimeMillis() < deadline) {
            try {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) records.add(record(r));
            } catch (OffsetOutOfRangeException e) {
                return map("error", e.getClass().getSimpleName(), "partitions", byPartition(e.offsetOutOfRangePartitions()),
                    "records", records);
            }
        }
        return map("error", null, "records", records);
    }

    /** subscribe in a group, commitSync, committed(); a second member resumes from the commits. */
    static Map<String, Object> groupCommit(Args args) throws Exception {
        String topic = args.get("topic");
        String group = args.get("group");
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Set<TopicPartition> both = Set.of(p0, p1);
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> first = consumer(args, conf)) {
            first.subscribe(List.of(topic));
            out.put("committed_before", offsets(first.committed(both)));
            out.put("first_records", pollRecords(first, args.getInt("records")));
            out.put("first_assignment", partitions(first.assignment()));
            ConsumerGroupMetadata meta = first.groupMetadata();
            out.put("first_group", map("group_id", meta.groupId(), "generation", meta.generationId(),
                "member_id_set", !meta.memberId().isEmpty(), "instance_id", meta.groupInstanceId().orElse(null)));
            first.commitSync();
            out.put("committed_all", offsets(first.committed(both)));
            first.commitSync(Map.of(p0, new OffsetAndMetadata(1, "replay-from-1")));
            out.put("committed_rewound", offsets(first.committed(both)));
        }
        try (KafkaConsumer<byte[], byte[]> second = consumer(args, conf)) {
            second.subscribe(List.of(topic));
            out.put("second_records", pollRecords(second, args.getInt("second_records")));
            second.commitSync();
            out.put("committed_second", offsets(second.committed(both)));
        }
        // A consumer that assigns partitions itself commits outside any generation (as Spark and
        // Flink do); the group is empty now, so the broker accepts it.
        try (KafkaConsumer<byte[], byte[]> standalone = consumer(args, conf)) {
            standalone.assign(List.of(p1));
            standalone.commitSync(Map.of(p1, new OffsetAndMetadata(1, "standalone")));
            out.put("committed_standalone", offsets(standalone.committed(both)));
        }
        return out;
    }

    /**
     * The consumer group protocol (KIP-848, group.protocol=consumer, early access in this
     * client): one member reads and commits, a second joins and the partitions are shared
     * incrementally (the first gives up only what moves, committing it on revocation), the
     * second resumes each partition it took at the committed offset, and after both leave a
     * third member resumes where they left off. Records per partition: `first` before the first
     * member reads, `second` while both are in the group, then one more for the third.
     */
    static Map<String, Object> consumerProtocolGroup(Args args) throws Exception {
        String topic = args.get("topic");
        String group = args.get("group");
        int partitions = args.getInt("partitions");
        int first = args.getInt("first");
        int second = args.getInt("second");
        Set<TopicPartition> all = new HashSet<>();
        for (int p = 0; p < partitions; p++) all.add(new TopicPartition(topic, p));
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer",
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of())) {
            produceEach(producer, topic, partitions, first, "a");
            RebalanceLog log1 = new RebalanceLog();
            RebalanceLog log2 = new RebalanceLog();
            try (KafkaConsumer<byte[], byte[]> c1 = consumer(args, conf); KafkaConsumer<byte[], byte[]> c2 = consumer(args, conf)) {
                c1.subscribe(List.of(topic), log1.committingOn(c1));
                out.put("first_records", positions(pollCount(c1, partitions * first)));
                out.put("first_assignment", partitions(c1.assignment()));
                ConsumerGroupMetadata meta = c1.groupMetadata();
                out.put("first_group", map("group_id", meta.groupId(), "generation", meta.generationId(),
                    "member_id_set", !meta.memberId().isEmpty()));
                c1.commitSync();
                out.put("committed_first", offsets(c1.committed(all)));

                c2.subscribe(List.of(topic), log2.committingOn(c2));
                produceEach(producer, topic, partitions, second, "b");
                // Both poll in turn until the partitions are shared and the new records read.
                List<Object> read1 = new ArrayList<>();
                List<Object> read2 = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 2 * WAIT_MS;
                while (read1.size() + read2.size() < partitions * second || c1.assignment().isEmpty()
                        || c2.assignment().isEmpty() || c1.assignment().size() + c2.assignment().size() != partitions) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("not shared in time: " + c1.assignment() + " " + c2.assignment()
                            + " after " + read1.size() + "+" + read2.size() + " records");
                    }
                    for (ConsumerRecord<byte[], byte[]> r : c1.poll(Duration.ofMillis(100))) read1.add(position(r));
                    for (ConsumerRecord<byte[], byte[]> r : c2.poll(Duration.ofMillis(100))) read2.add(position(r));
                }
                c1.commitSync();
                c2.commitSync();
                out.put("second_records_1", read1);
                out.put("second_records_2", read2);
                out.put("assignment_1", partitions(c1.assignment()));
                out.put("assignment_2", partitions(c2.assignment()));
                out.put("generation_2", c2.groupMetadata().generationId());
                out.put("committed_second", offsets(c1.committed(all)));
            }
            out.put("rebalances_1", log1.events);
            out.put("rebalances_2", log2.events);
            produceEach(producer, topic, partitions, 1, "c");
        }
        try (KafkaConsumer<byte[], byte[]> c3 = consumer(args, conf)) {
            c3.subscribe(List.of(topic));
            out.put("third_records", positions(pollCount(c3, partitions)));
            c3.commitSync();
            out.put("committed_third", offsets(c3.committed(all)));
        }
        return out;
    }

    /** What a member's rebalance listener saw, in order; it commits what it gives up, as applications do. */
    static final class RebalanceLog {
        final List<Object> events = new ArrayList<>();

        ConsumerRebalanceListener committingOn(KafkaConsumer<byte[], byte[]> consumer) {
            return new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                    if (!revoked.isEmpty()) {
                        consumer.commitSync();
                        events.add(map("revoked", partitions(revoked)));
                    }
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
                    if (!assigned.isEmpty()) events.add(map("assigned", partitions(assigned)));
                }
            };
        }
    }

    static void produceEach(KafkaProducer<byte[], byte[]> producer, String topic, int partitions, int count,
                            String prefix) throws Exception {
        for (int p = 0; p < partitions; p++) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, p, null, bytes(prefix + p + "-" + i))).get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        }
    }

    static List<Object> positions(List<ConsumerRecord<byte[], byte[]>> records) {
        List<Object> out = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : records) out.add(position(r));
        return out;
    }

    static Object position(ConsumerRecord<byte[], byte[]> r) {
        return map("partition", r.partition(), "offset", r.offset(), "value", string(r.value()));
    }

    /**
     * Repeated polls of one consumer while records arrive round after round on different
     * partitions: each round must be delivered exactly once. Clients keep a fetch session
     * across these polls when the broker grants one, and fall back to full fetches when not.
     */
    static Map<String, Object> fetchRounds(Args args) throws Exception {
        String topic = args.get("topic");
        int rounds = args.getInt("rounds");
        int partitions = args.getInt("partitions");
        List<Object> delivered = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of());
             KafkaConsumer<byte[], byte[]> consumer = consumer(args, Map.of(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            consumer.assign(tps);
            consumer.seekToEnd(tps);
            for (TopicPartition tp : tps) consumer.position(tp);  // resolve the end offsets before producing
            for (int round = 0; round < rounds; round++) {
                // Rounds write to partition 0, 1, ..., then to all of them, and again: the
                // consumer's fetches see partitions change between having data and not.
                List<Integer> targets = new ArrayList<>();
                int slot = round % (partitions + 1);
                if (slot == partitions) {
                    for (int p = 0; p < partitions; p++) targets.add(p);
                } else {
                    targets.add(slot);
                }
                int expected = 0;
                for (int p : targets) {
                    for (int i = 0; i < 2; i++) {
                        producer.send(new ProducerRecord<>(topic, p, null, bytes("r" + round + "-p" + p + "-" + i)));
                        expected++;
                    }
                }
                producer.flush();
                List<ConsumerRecord<byte[], byte[]>> got = pollCount(consumer, expected);
                List<Object> roundOut = new ArrayList<>();
                for (ConsumerRecord<byte[], byte[]> r : got) {
                    roundOut.add(map("partition", r.partition(), "offset", r.offset(), "value", string(r.value())));
                }
                delivered.add(roundOut);
            }
            // Anything left over would be a duplicate delivery; one more fetch must bring nothing.
            double fetches = metric(consumer, "consumer-fetch-manager-metrics", "fetch-total");
            List<Object> extra = new ArrayList<>();
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (metric(consumer, "consumer-fetch-manager-metrics", "fetch-total") < fetches + 2) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no fetch completed");
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) extra.add(record(r));
            }
            return map("rounds", delivered, "extra", extra);
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Transactions

    static Map<String, Object> txnCommitAbort(Args args) throws Exception {
        String topic = args.get("topic");
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, txnConf(args.get("txid")));
             Admin admin = admin(args)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) producer.send(new ProducerRecord<>(topic, 0, null, bytes("committed-" + i)));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 2; i++) producer.send(new ProducerRecord<>(topic, 0, null, bytes("aborted-" + i)));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, bytes("committed-3")));
            producer.commitTransaction();
            // An open transaction: its record is written but not yet committed.
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, bytes("pending")));
            producer.flush();
            Map<String, Object> open = new LinkedHashMap<>();
            for (IsolationLevel level : IsolationLevel.values()) {
                open.put(level.name(), offsetInfo(admin.listOffsets(Map.of(tp, OffsetSpec.latest()),
                    new ListOffsetsOptions(level)).partitionResult(tp).get(WAIT_MS, TimeUnit.MILLISECONDS)));
            }
            out.put("latest_while_open", open);
            out.put("read_committed_while_open", consumeAll(args.with("isolation", "read_committed")));
            producer.commitTransaction();
        }
        out.put("read_committed", consumeAll(args.with("isolation", "read_committed")));
        out.put("read_uncommitted", consumeAll(args.with("isolation", "read_uncommitted")));
        return out;
    }

    /** consume-transform-produce: offsets committed with the transaction, or not at all when it aborts. */
    static Map<String, Object> txnOffsets(Args args) throws Exception {
        String input = args.get("input");
        String output = args.get("output");
        String group = args.get("group");
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
            ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaProducer<byte[], byte[]> producer = producer(args, txnConf(args.get("txid")));
             KafkaConsumer<byte[], byte[]> consumer = consumer(args, conf)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            List<ConsumerRecord<byte[], byte[]>> records = pollCount(consumer, args.getInt("records"));
            producer.beginTransaction();
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : records) {
                producer.send(new ProducerRecord<>(output, 0, null, bytes(string(r.value()).toUpperCase())));
                next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1, "txn"));
            }
            producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
            producer.commitTransaction();
            // The group's offsets become visible when the commit markers are written, after
            // commitTransaction returns; a read_committed consumer asks for stable offsets
            // (OffsetFetch require_stable) and waits for them, as an application would.
            out.put("offsets_after_commit", offsets(consumer.committed(next.keySet(), Duration.ofMillis(WAIT_MS))));

            producer.beginTransaction();
            producer.send(new ProducerRecord<>(output, 0, null, bytes("NEVER")));
            Map<TopicPartition, OffsetAndMetadata> rewound = new HashMap<>();
            for (TopicPartition tp : next.keySet()) rewound.put(tp, new OffsetAndMetadata(0, "aborted"));
            producer.sendOffsetsToTransaction(rewound, consumer.groupMetadata());
            producer.abortTransaction();
            out.put("offsets_after_abort", offsets(consumer.committed(next.keySet(), Duration.ofMillis(WAIT_MS))));
        }
        out.put("output", consumeAll(args.with("topic", output).with("isolation", "read_committed")));
        return out;
    }

    /** A second producer with the same transactional.id fences the first; its open transaction is aborted. */
    static Map<String, Object> txnFencing(Args args) throws Exception {
        String topic = args.get("topic");
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> old = producer(args, txnConf(args.get("txid")))) {
            old.initTransactions();
            old.beginTransaction();
            old.send(new ProducerRecord<>(topic, 0, null, bytes("zombie")));
            old.flush();
            try (KafkaProducer<byte[], byte[]> fresh = producer(args, txnConf(args.get("txid")))) {
                fresh.initTransactions();
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(topic, 0, null, bytes("fresh")));
                fresh.commitTransaction();
            }
            try {
                old.commitTransaction();
                out.put("zombie_commit", null);
            } catch (Exception e) {
                out.put("zombie_commit", e.getClass().getSimpleName());
            }
        }
        out.put("read_committed", consumeAll(args.with("isolation", "read_committed")));
        return out;
    }

    static Map<String, Object> txnConf(String transactionalId) {
        // Bounded: FindCoordinator/InitProducerId retry until max.block.ms when the broker cannot serve them.
        return Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId, ProducerConfig.MAX_BLOCK_MS_CONFIG, "5000");
    }

    // ---------------------------------------------------------------------------------------------
    // One deterministic script whose observation is compared between brokers

    /**
     * Produces, reads, provokes errors, forms a two-member group and runs transactions, recording
     * only what must come out the same on any correct broker: offsets, order, error types,
     * assignments, generations and what each isolation level sees. No ids, times or topic names.
     * Needs `topic` with 4 partitions and `txn_topic` with 1, both new and empty.
     */
    static Map<String, Object> observe(Args args) throws Exception {
        String topic = args.get("topic");
        String txnTopic = args.get("txn_topic");
        Map<String, Object> out = new LinkedHashMap<>();

        // Offsets the broker assigns, in send order, to records sent to explicit partitions.
        int[] targets = {0, 1, 0, 0, 1, 2, 3, 0};
        List<Object> produced = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of())) {
            List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < targets.length; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, targets[i], bytes("k" + i), bytes("v" + i))));
            }
            for (java.util.concurrent.Future<RecordMetadata> f : futures) {
                RecordMetadata m = f.get(WAIT_MS, TimeUnit.MILLISECONDS);
                produced.add(List.of(m.partition(), m.offset()));
            }
        }
        out.put("produced", produced);

        // The order a consumer reads each partition in.
        Map<String, Object> consumed = new TreeMap<>();
        for (Object r : (List<?>) consumeAll(args.with("topic", topic)).get("records")) {
            Map<?, ?> record = (Map<?, ?>) r;
            ((List<Object>) consumed.computeIfAbsent(String.valueOf(record.get("partition")), k -> new ArrayList<>()))
                .add(List.of(record.get("offset"), string((byte[]) record.get("value"))));
        }
        out.put("consumed", consumed);

        // Errors the client surfaces from the broker's answers.
        Map<String, Object> errors = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of(ProducerConfig.MAX_BLOCK_MS_CONFIG, "2000"))) {
            // The partition never appears in metadata: the send fails once max.block.ms passes.
            errors.put("produce_to_missing_partition", errorName(() ->
                producer.send(new ProducerRecord<>(topic, 7, null, bytes("x"))).get(WAIT_MS, TimeUnit.MILLISECONDS)));
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(args, Map.of(
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none"))) {
            Map<?, ?> past = (Map<?, ?>) outOfRange(consumer, new TopicPartition(topic, 0), 100);
            errors.put("fetch_past_end", map("error", past.get("error"), "partitions", past.get("partitions")));
        }
        try (Admin admin = admin(args)) {
            errors.put("create_existing_topic", errorName(() ->
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(WAIT_MS, TimeUnit.MILLISECONDS)));
            errors.put("delete_records_past_end", errorName(() -> admin.deleteRecords(Map.of(new TopicPartition(topic, 0),
                RecordsToDelete.beforeOffset(1000))).all().get(WAIT_MS, TimeUnit.MILLISECONDS)));
        }
        out.put("errors", errors);

        // Two members of one group share the partitions, then one leaves.
        out.put("group", groupAssignments(args, topic, args.get("group")));

        // Transactional visibility: committed, aborted, then an open transaction, seen by both levels.
        TopicPartition tp = new TopicPartition(txnTopic, 0);
        Map<String, Object> txn = new LinkedHashMap<>();
        Args txnArgs = args.with("topic", txnTopic);
        try (KafkaProducer<byte[], byte[]> producer = producer(args, txnConf(args.get("txid")));
             Admin admin = admin(args)) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(txnTopic, 0, null, bytes("c0")));
            producer.send(new ProducerRecord<>(txnTopic, 0, null, bytes("c1")));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(txnTopic, 0, null, bytes("a0")));
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(txnTopic, 0, null, bytes("open0")));
            producer.flush();
            Map<String, Object> latest = new LinkedHashMap<>();
            for (IsolationLevel level : IsolationLevel.values()) {
                latest.put(level.name(), admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(level))
                    .partitionResult(tp).get(WAIT_MS, TimeUnit.MILLISECONDS).offset());
            }
            txn.put("latest_while_open", latest);
            txn.put("read_committed_while_open", offsetsAndValues(consumeAll(txnArgs.with("isolation", "read_committed"))));
            txn.put("read_uncommitted_while_open", offsetsAndValues(consumeAll(txnArgs.with("isolation", "read_uncommitted"))));
            producer.commitTransaction();

            // A second producer with the same transactional.id fences this one.
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(txnTopic, 0, null, bytes("zombie")));
            producer.flush();
            try (KafkaProducer<byte[], byte[]> fresh = producer(args, txnConf(args.get("txid")))) {
                fresh.initTransactions();
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(txnTopic, 0, null, bytes("fresh")));
                fresh.commitTransaction();
            }
            errors.put("zombie_commit", errorName(() -> {
                producer.commitTransaction();
                return null;
            }));
        }
        txn.put("read_committed", offsetsAndValues(consumeAll(txnArgs.with("isolation", "read_committed"))));
        txn.put("read_uncommitted", offsetsAndValues(consumeAll(txnArgs.with("isolation", "read_uncommitted"))));
        out.put("transactions", txn);
        return out;
    }

    /** Assignments and generations as members come and go; members are named by join order. */
    static Map<String, Object> groupAssignments(Args args, String topic, String group) {
        Map<String, Object> conf = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> first = consumer(args, conf)) {
            first.subscribe(List.of(topic));
            pollUntil(List.of(first), () -> first.assignment().size() == 4);
            out.put("alone", memberView(first));
            try (KafkaConsumer<byte[], byte[]> second = consumer(args, conf)) {
                second.subscribe(List.of(topic));
                pollUntil(List.of(first, second), () -> !first.assignment().isEmpty() && !second.assignment().isEmpty()
                    && first.assignment().size() + second.assignment().size() == 4
                    && first.groupMetadata().generationId() == second.groupMetadata().generationId());
                // Which member gets which half depends on the member ids the broker chose: compare as a set.
                List<String> halves = new ArrayList<>(List.of(
                    String.valueOf(partitionNumbers(first.assignment())), String.valueOf(partitionNumbers(second.assignment()))));
                Collections.sort(halves);
                out.put("together", map("assignments", halves, "generations",
                    List.of(first.groupMetadata().generationId(), second.groupMetadata().generationId())));
            }
            pollUntil(List.of(first), () -> first.assignment().size() == 4);
            out.put("after_leave", memberView(first));
        }
        return out;
    }

    static Map<String, Object> memberView(KafkaConsumer<byte[], byte[]> consumer) {
        return map("partitions", partitionNumbers(consumer.assignment()), "generation", consumer.groupMetadata().generationId());
    }

    static List<Integer> partitionNumbers(Collection<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        Collections.sort(out);
        return out;
    }

    /** Polls each consumer in turn until the condition holds (bounded by WAIT_MS). */
    static void pollUntil(List<KafkaConsumer<byte[], byte[]>> consumers, java.util.function.BooleanSupplier done) {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("group did not settle");
            for (KafkaConsumer<byte[], byte[]> c : consumers) c.poll(Duration.ofMillis(100));
        }
    }

    static List<Object> offsetsAndValues(Map<String, Object> consumed) {
        List<Object> out = new ArrayList<>();
        for (Object r : (List<?>) consumed.get("records")) {
            Map<?, ?> record = (Map<?, ?>) r;
            out.add(List.of(record.get("offset"), string((byte[]) record.get("value"))));
        }
        return out;
    }

    interface Call {
        Object call() throws Exception;
    }

    /** null when the call succeeds, else the simple class name of what it threw (unwrapped). */
    static String errorName(Call call) {
        try {
            call.call();
            return null;
        } catch (Exception e) {
            Throwable t = e;
            while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) t = t.getCause();
            return t.getClass().getSimpleName();
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Authorization

    interface Operation {
        void run(Args args) throws Exception;
    }

    static final Map<String, Operation> AUTHORIZED_OPERATIONS = new LinkedHashMap<>();

    static {
        AUTHORIZED_OPERATIONS.put("produce", KafkaHarness::authzProduce);
        AUTHORIZED_OPERATIONS.put("fetch", KafkaHarness::authzFetch);
        AUTHORIZED_OPERATIONS.put("create_topic", args -> {
            try (Admin admin = admin(args)) {
                admin.createTopics(List.of(new NewTopic(args.get("name"), 1, (short) 1))).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("delete_topic", args -> {
            try (Admin admin = admin(args)) {
                admin.deleteTopics(List.of(args.get("name"))).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("describe_configs", args -> {
            try (Admin admin = admin(args)) {
                admin.describeConfigs(List.of(new ConfigResource(ConfigResource.Type.TOPIC, args.get("topic"))))
                    .all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("alter_configs", args -> {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, args.get("topic"));
            AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", args.get("retention_ms")), AlterConfigOp.OpType.SET);
            try (Admin admin = admin(args)) {
                admin.incrementalAlterConfigs(Map.of(resource, List.of(set))).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("join_group", KafkaHarness::authzJoinGroup);
        AUTHORIZED_OPERATIONS.put("commit", args -> {
            // The admin's commit (FindCoordinator, then OffsetCommit): a consumer would also look
            // the topic up, whose refusal could come first.
            TopicPartition tp = new TopicPartition(args.get("topic"), 0);
            try (Admin admin = admin(args)) {
                admin.alterConsumerGroupOffsets(args.get("group"), Map.of(tp, new OffsetAndMetadata(1)))
                    .all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("transactional", KafkaHarness::authzTransactional);
        AUTHORIZED_OPERATIONS.put("list_offsets", args -> {
            TopicPartition tp = new TopicPartition(args.get("topic"), 0);
            try (Admin admin = admin(args)) {
                admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("delete_records", args -> {
            TopicPartition tp = new TopicPartition(args.get("topic"), 0);
            try (Admin admin = admin(args)) {
                admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(0))).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
        AUTHORIZED_OPERATIONS.put("create_acls", args -> {
            AclBinding binding = new AclBinding(new ResourcePattern(ResourceType.GROUP, args.get("name"), PatternType.LITERAL),
                new AccessControlEntry("User:probe", "*", AclOperation.READ, AclPermissionType.ALLOW));
            try (Admin admin = admin(args)) {
                admin.createAcls(List.of(binding)).all().get(WAIT_MS, TimeUnit.MILLISECONDS);
            }
        });
    }

    /**
     * One operation of the denial matrix (op=...) as the client's principal: {"outcome": "OK"} or the
     * Kafka error the client reports (Errors.forException), or for describe_cluster the cluster
     * operations it may perform.
     */
    static Map<String, Object> authorize(Args args) throws Exception {
        String op = args.get("op");
        if (op.equals("describe_cluster")) {
            try (Admin admin = admin(args)) {
                Set<AclOperation> allowed = admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true))
                    .authorizedOperations().get(WAIT_MS, TimeUnit.MILLISECONDS);
                List<String> names = new ArrayList<>();
                if (allowed != null) for (AclOperation o : allowed) names.add(o.name());
                return map("outcome", "operations", "operations", sorted(names));
            }
        }
        Operation operation = AUTHORIZED_OPERATIONS.get(op);
        if (operation == null) throw new IllegalArgumentException("unknown operation " + op);
        try {
            operation.run(args);
            return map("outcome", "OK");
        } catch (Exception e) {
            Throwable cause = e;
            while ((cause instanceof ExecutionException || cause instanceof CompletionException) && cause.getCause() != null) {
                cause = cause.getCause();
            }
            Errors error = Errors.forException(cause);
            if (error == Errors.UNKNOWN_SERVER_ERROR && !(cause instanceof org.apache.kafka.common.errors.UnknownServerException)) {
                return map("outcome", cause.getClass().getSimpleName() + ": " + cause.getMessage());
            }
            return map("outcome", error.name());
        }
    }

    static void authzProduce(Args args) throws Exception {
        // Not idempotent: the cell is about WRITE on the topic, not about InitProducerId.
        try (KafkaProducer<byte[], byte[]> producer = producer(args, Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false", ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.RETRIES_CONFIG, "0", ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000"))) {
            producer.send(new ProducerRecord<>(args.get("topic"), 0, null, bytes("java " + args.get("principal"))))
                .get(WAIT_MS, TimeUnit.MILLISECONDS);
        }
    }

    static void authzFetch(Args args) {
        TopicPartition tp = new TopicPartition(args.get("topic"), 0);
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(args, Map.of(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, 0);
            pollCount(consumer, 1);
        }
    }

    static void authzJoinGroup(Args args) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(args, Map.of(
                ConsumerConfig.GROUP_ID_CONFIG, args.get("group"), ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
            consumer.subscribe(List.of(args.get("topic")));
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (consumer.assignment().isEmpty()) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("no assignment");
                consumer.poll(Duration.ofMillis(200));
            }
        }  // close() leaves the group, so the next member's join is not held up
    }

    static void authzTransactional(Args args) throws Exception {
        KafkaProducer<byte[], byte[]> producer = producer(args, Map.of(
            ProducerConfig.TRANSACTIONAL_ID_CONFIG, args.get("transactional_id"), ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000"));
        try {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(args.get("topic"), 0, null, bytes("transactional java"))).get(WAIT_MS, TimeUnit.MILLISECONDS);
            producer.commitTransaction();
        } finally {
            producer.close(Duration.ofSeconds(5));
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Clients

    static Admin admin(Args args) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Long.toString(WAIT_MS));
        props.putAll(clientSettings(args));
        return Admin.create(props);
    }

    /** Client settings passed as client.NAME=VALUE (security.protocol, ssl.*), for every client a scenario makes. */
    static Map<String, String> clientSettings(Args args) {
        Map<String, String> settings = new HashMap<>();
        args.values.forEach((k, v) -> {
            if (k.startsWith("client.")) settings.put(k.substring("client.".length()), v);
        });
        return settings;
    }

    static KafkaProducer<byte[], byte[]> producer(Args args, Map<String, Object> overrides) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.putAll(clientSettings(args));
        props.putAll(overrides);
        return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    }

    static KafkaConsumer<byte[], byte[]> consumer(Args args, Map<String, Object> overrides) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.putAll(clientSettings(args));
        props.putAll(overrides);
        return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** Polls until `expected` records arrived (bounded by WAIT_MS). */
    static List<ConsumerRecord<byte[], byte[]>> pollCount(KafkaConsumer<byte[], byte[]> consumer, int expected) {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (got.size() < expected) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("got " + got.size() + " of " + expected + " records");
            }
            ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
            batch.forEach(got::add);
        }
        return got;
    }

    static List<Object> pollRecords(KafkaConsumer<byte[], byte[]> consumer, int expected) {
        List<Object> out = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : pollCount(consumer, expected)) out.add(record(r));
        return out;
    }

    static List<Object> readFrom(Args args, TopicPartition tp, Long offset, int count) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(args, Map.of(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"))) {
            consumer.assign(List.of(tp));
            if (offset == null) consumer.seekToBeginning(List.of(tp)); else consumer.seek(tp, offset);
            return pollRecords(consumer, count);
        }
    }

    static double metric(KafkaConsumer<?, ?> consumer, String group, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : consumer.metrics().entrySet()) {
            MetricName n = e.getKey();
            if (n.group().equals(group) && n.name().equals(name) && !n.tags().containsKey("topic")) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        throw new IllegalStateException("no metric " + group + "/" + name);
    }

    // ---------------------------------------------------------------------------------------------
    // Results as plain data

    static Map<String, Object> record(ConsumerRecord<byte[], byte[]> r) {
        List<Object> headers = new ArrayList<>();
        for (Header h : r.headers()) headers.add(java.util.Arrays.asList(h.key(), h.value()));
        return map("partition", r.partition(), "offset", r.offset(), "key", r.key(), "value", r.value(),
            "timestamp", r.timestamp(), "timestamp_type", r.timestampType().name(), "headers", headers,
            "leader_epoch", r.leaderEpoch().orElse(null));
    }

    static Map<String, Object> topicDescription(TopicDescription d) {
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            parts.add(map("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                "replicas", p.replicas().stream().map(Node::id).toList(), "isr", p.isr().stream().map(Node::id).toList()));
        }
        return map("name", d.name(), "topic_id", d.topicId().toString(), "internal", d.isInternal(), "partitions", parts);
    }

    static Map<String, Object> node(Node n) {
        return n == null ? null : map("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    static Map<String, Object> offsetInfo(ListOffsetsResultInfo info) {
        return map("offset", info.offset(), "timestamp", info.timestamp(), "leader_epoch", info.leaderEpoch().orElse(null));
    }

    static Map<String, Object> configEntries(Config config, List<String> names) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (String name : names) {
            ConfigEntry e = config.get(name);
            if (e == null) {
                out.put(name, null);
                continue;
            }
            List<Object> synonyms = new ArrayList<>();
            e.synonyms().forEach(s -> synonyms.add(List.of(s.name(), String.valueOf(s.value()), s.source().name())));
            out.put(name, map("value", e.value(), "source", e.source().name(), "read_only", e.isReadOnly(),
                "sensitive", e.isSensitive(), "default", e.isDefault(), "synonyms", synonyms));
        }
        return out;
    }

    static Map<String, Object> offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach((tp, om) -> out.put(tp.topic() + ":" + tp.partition(),
            om == null ? null : map("offset", om.offset(), "metadata", om.metadata())));
        return out;
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach((tp, offset) -> out.put(Integer.toString(tp.partition()), offset));
        return out;
    }

    static List<String> partitions(Collection<TopicPartition> tps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.topic() + ":" + tp.partition());
        Collections.sort(out);
        return out;
    }

    static <V> Map<String, Object> mapValues(Map<String, V> in, Function<V, Object> f) {
        Map<String, Object> out = new TreeMap<>();
        in.forEach((k, v) -> out.put(k, f.apply(v)));
        return out;
    }

    static List<String> sorted(List<String> in) {
        List<String> out = new ArrayList<>(in);
        Collections.sort(out);
        return out;
    }

    /** null when the future succeeds, else {"error": simple class name, "message": ...}. */
    static Object errorOf(KafkaFuture<?> future) {
        try {
            future.get(WAIT_MS, TimeUnit.MILLISECONDS);
            return null;
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            return map("error", cause.getClass().getSimpleName(), "message", cause.getMessage());
        } catch (Exception e) {
            return map("error", e.getClass().getSimpleName(), "message", e.getMessage());
        }
    }

    static <T> T getQuietly(KafkaFuture<T> future) {
        try {
            return future.get(WAIT_MS, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new CompletionException(e);
        }
    }

    static Map<String, Object> describe(Throwable t) {
        // The trace of the wrapper too: Kafka's ApiExceptions carry no stack of their own, and
        // the ExecutionException's says which call of the scenario failed.
        java.io.StringWriter trace = new java.io.StringWriter();
        t.printStackTrace(new java.io.PrintWriter(trace));
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) t = t.getCause();
        return map("type", t.getClass().getSimpleName(), "message", String.valueOf(t.getMessage()), "trace", trace.toString());
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String string(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    // ---------------------------------------------------------------------------------------------

    /** key=value arguments of a scenario. */
    static final class Args {
        final Map<String, String> values;

        Args(Map<String, String> values) {
            this.values = values;
        }

        static Args parse(String[] parts, int from) {
            Map<String, String> values = new LinkedHashMap<>();
            for (int i = from; i < parts.length; i++) {
                int eq = parts[i].indexOf('=');
                if (eq < 0) throw new IllegalArgumentException("expected key=value: " + parts[i]);
                values.put(parts[i].substring(0, eq), parts[i].substring(eq + 1));
            }
            return new Args(values);
        }

        boolean has(String key) {
            return values.containsKey(key);
        }

        String get(String key) {
            String v = values.get(key);
            if (v == null) throw new IllegalArgumentException("missing argument " + key);
            return v;
        }

        String getOr(String key, String fallback) {
            return values.getOrDefault(key, fallback);
        }

        int getInt(String key) {
            return Integer.parseInt(get(key));
        }

        long getLong(String key) {
            return Long.parseLong(get(key));
        }

        Args with(String key, String value) {
            Map<String, String> copy = new LinkedHashMap<>(values);
            copy.put(key, value);
            return new Args(copy);
        }
    }

    /** Just enough JSON: maps, lists, strings, numbers, booleans, null; byte[] as base64. */
    static final class Json {
        static String write(Object value) {
            StringBuilder sb = new StringBuilder();
            write(sb, value);
            return sb.toString();
        }

        static void write(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Map<?, ?> m) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) sb.append(',');
                    first = false;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof Collection<?> c) {
                sb.append('[');
                boolean first = true;
                for (Object o : c) {
                    if (!first) sb.append(',');
                    first = false;
                    write(sb, o);
                }
                sb.append(']');
            } else if (v instanceof byte[] b) {
                sb.append("{\"b64\":");
                string(sb, Base64.getEncoder().encodeToString(b));
                sb.append('}');
            } else if (v instanceof Double d) {
                sb.append(d.isNaN() || d.isInfinite() ? "null" : d.toString());
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else if (v instanceof Enum<?> e) {
                string(sb, e.name());
            } else {
                string(sb, v.toString());
            }
        }

        static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    case '\r' -> sb.append("\\r");
                    case '\t' -> sb.append("\\t");
                    default -> {
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                    }
                }
            }
            sb.append('"');
        }
    }
}

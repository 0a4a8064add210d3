"""Apache Kafka 3.9's broker and topic config catalogue: every broker config name with its type,
which ones Kafka changes at run time (KIP-226 dynamic broker configs) and at which level, their
defaults and value checks, and the types of topic configs.

Taken from Kafka 3.9.0's `KafkaConfig.configDef`, `DynamicBrokerConfig.AllDynamicConfigs` and
`dynamicConfigUpdateModes`, `DynamicConfig.Broker` and `LogConfig`; kbroker reports and checks
configs with it so that DescribeConfigs and AlterConfigs answer as Kafka's do. Whether kbroker
*uses* a setting is decided elsewhere (kbroker/config.py).
"""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Kafka's type of every broker config (ConfigDef.Type), by type (and Kafka 4.0's
# group.consumer.regex.refresh.interval.ms, of the consumer group protocol kbroker serves as 4.0 does,
# and Kafka 4.1's group.share.max.share.sessions, of share groups as released).
_BROKER_NAMES_BY_TYPE = {
    "BOOLEAN": _names("""
        auto.create.topics.enable auto.include.jmx.reporter auto.leader.rebalance.enable
        broker.id.generation.enable controlled.shutdown.enable delete.topic.enable
        eligible.leader.replicas.enable group.coordinator.new.enable group.share.enable
        log.cleaner.enable log.message.downconversion.enable log.preallocate
        remote.log.storage.system.enable ssl.allow.dn.changes ssl.allow.san.changes
        transaction.partition.verification.enable unclean.leader.election.enable
        unstable.api.versions.enable unstable.feature.versions.enable
        zookeeper.metadata.migration.enable zookeeper.set.acl zookeeper.ssl.client.enable
        zookeeper.ssl.crl.enable zookeeper.ssl.ocsp.enable
    """),
    "CLASS": _names("""
        alter.config.policy.class.name client.quota.callback.class
        create.topic.policy.class.name principal.builder.class
        sasl.client.callback.handler.class sasl.login.callback.handler.class
        sasl.login.class sasl.server.callback.handler.class ssl.engine.factory.class
    """),
    "DOUBLE": _names("""
        log.cleaner.io.buffer.load.factor log.cleaner.io.max.bytes.per.second
        log.cleaner.min.cleanable.ratio remote.log.manager.task.retry.jitter
        sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
        sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
    """),
    "INT": _names("""
        alter.log.dirs.replication.quota.window.num
        alter.log.dirs.replication.quota.window.size.seconds background.threads
        broker.heartbeat.interval.ms broker.id broker.session.timeout.ms
        compression.gzip.level compression.lz4.level compression.zstd.level
        connection.failed.authentication.delay.ms controlled.shutdown.max.retries
        controller.quorum.append.linger.ms controller.quorum.election.backoff.max.ms
        controller.quorum.election.timeout.ms controller.quorum.fetch.timeout.ms
        controller.quorum.request.timeout.ms controller.quorum.retry.backoff.ms
        controller.quota.window.num controller.quota.window.size.seconds
        controller.socket.timeout.ms default.replication.factor
        delete.records.purgatory.purge.interval.requests fetch.max.bytes
        fetch.purgatory.purge.interval.requests group.consumer.heartbeat.interval.ms
        group.consumer.max.heartbeat.interval.ms group.consumer.max.session.timeout.ms
        group.consumer.max.size group.consumer.min.heartbeat.interval.ms
        group.consumer.min.session.timeout.ms group.consumer.session.timeout.ms
        group.consumer.regex.refresh.interval.ms
        group.coordinator.append.linger.ms group.coordinator.threads
        group.initial.rebalance.delay.ms group.max.session.timeout.ms group.max.size
        group.min.session.timeout.ms group.share.delivery.count.limit
        group.share.heartbeat.interval.ms group.share.max.heartbeat.interval.ms
        group.share.max.record.lock.duration.ms group.share.max.session.timeout.ms
        group.share.min.heartbeat.interval.ms group.share.min.record.lock.duration.ms
        group.share.min.session.timeout.ms group.share.max.share.sessions group.share.partition.max.record.locks
        group.share.record.lock.duration.ms group.share.session.timeout.ms
        initial.broker.registration.timeout.ms kafka.metrics.polling.interval.secs
        leader.imbalance.per.broker.percentage log.cleaner.io.buffer.size
        log.cleaner.threads log.flush.offset.checkpoint.interval.ms
        log.flush.start.offset.checkpoint.interval.ms log.index.interval.bytes
        log.index.size.max.bytes log.retention.hours log.retention.minutes log.roll.hours
        log.roll.jitter.hours log.segment.bytes max.connection.creation.rate max.connections
        max.connections.per.ip max.incremental.fetch.session.cache.slots
        max.request.partition.size.limit message.max.bytes metadata.log.segment.bytes
        metadata.log.segment.min.bytes metadata.max.idle.interval.ms metrics.num.samples
        min.insync.replicas node.id num.io.threads num.network.threads num.partitions
        num.recovery.threads.per.data.dir num.replica.alter.log.dirs.threads
        num.replica.fetchers offset.metadata.max.bytes offsets.commit.timeout.ms
        offsets.load.buffer.size offsets.retention.minutes offsets.topic.compression.codec
        offsets.topic.num.partitions offsets.topic.segment.bytes password.encoder.iterations
        password.encoder.key.length producer.id.expiration.check.interval.ms
        producer.id.expiration.ms producer.purgatory.purge.interval.requests
        queued.max.requests quota.window.num quota.window.size.seconds
        remote.fetch.max.wait.ms remote.log.manager.copier.thread.pool.size
        remote.log.manager.copy.quota.window.num
        remote.log.manager.copy.quota.window.size.seconds
        remote.log.manager.expiration.thread.pool.size
        remote.log.manager.fetch.quota.window.num
        remote.log.manager.fetch.quota.window.size.seconds
        remote.log.manager.thread.pool.size remote.log.metadata.custom.metadata.max.bytes
        remote.log.reader.max.pending.tasks remote.log.reader.threads
        replica.fetch.backoff.ms replica.fetch.max.bytes replica.fetch.min.bytes
        replica.fetch.response.max.bytes replica.fetch.wait.max.ms
        replica.socket.receive.buffer.bytes replica.socket.timeout.ms
        replication.quota.window.num replication.quota.window.size.seconds
        request.timeout.ms reserved.broker.max.id sasl.login.connect.timeout.ms
        sasl.login.read.timeout.ms sasl.oauthbearer.clock.skew.seconds
        sasl.server.max.receive.size socket.listen.backlog.size socket.receive.buffer.bytes
        socket.request.max.bytes socket.send.buffer.bytes telemetry.max.bytes
        transaction.abort.timed.out.transaction.cleanup.interval.ms
        transaction.max.timeout.ms
        transaction.remove.expired.transaction.cleanup.interval.ms
        transaction.state.log.load.buffer.size transaction.state.log.min.isr
        transaction.state.log.num.partitions transaction.state.log.segment.bytes
        transactional.id.expiration.ms zookeeper.connection.timeout.ms
        zookeeper.max.in.flight.requests zookeeper.metadata.migration.min.batch.size
        zookeeper.session.timeout.ms
    """),
    "LIST": _names("""
        controller.quorum.bootstrap.servers controller.quorum.voters
        group.consumer.assignors group.coordinator.rebalance.protocols
        kafka.metrics.reporters log.cleanup.policy metric.reporters process.roles
        sasl.enabled.mechanisms sasl.kerberos.principal.to.local.rules
        sasl.oauthbearer.expected.audience ssl.cipher.suites ssl.enabled.protocols
        zookeeper.ssl.cipher.suites zookeeper.ssl.enabled.protocols
    """),
    "LONG": _names("""
        connections.max.idle.ms connections.max.reauth.ms
        controlled.shutdown.retry.backoff.ms delegation.token.expiry.check.interval.ms
        delegation.token.expiry.time.ms delegation.token.max.lifetime.ms
        follower.replication.throttled.rate leader.imbalance.check.interval.seconds
        leader.replication.throttled.rate log.cleaner.backoff.ms
        log.cleaner.dedupe.buffer.size log.cleaner.delete.retention.ms
        log.cleaner.max.compaction.lag.ms log.cleaner.min.compaction.lag.ms
        log.dir.failure.timeout.ms log.flush.interval.messages log.flush.interval.ms
        log.flush.scheduler.interval.ms log.initial.task.delay.ms log.local.retention.bytes
        log.local.retention.ms log.message.timestamp.after.max.ms
        log.message.timestamp.before.max.ms log.message.timestamp.difference.max.ms
        log.retention.bytes log.retention.check.interval.ms log.retention.ms
        log.roll.jitter.ms log.roll.ms log.segment.delete.delay.ms
        metadata.log.max.record.bytes.between.snapshots
        metadata.log.max.snapshot.interval.ms metadata.log.segment.ms
        metadata.max.retention.bytes metadata.max.retention.ms metrics.sample.window.ms
        offsets.retention.check.interval.ms queued.max.request.bytes
        remote.log.index.file.cache.total.size.bytes
        remote.log.manager.copy.max.bytes.per.second
        remote.log.manager.fetch.max.bytes.per.second remote.log.manager.task.interval.ms
        remote.log.manager.task.retry.backoff.max.ms
        remote.log.manager.task.retry.backoff.ms
        replica.alter.log.dirs.io.max.bytes.per.second
        replica.high.watermark.checkpoint.interval.ms replica.lag.time.max.ms
        sasl.kerberos.min.time.before.relogin sasl.login.retry.backoff.max.ms
        sasl.login.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.refresh.ms
        sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
        sasl.oauthbearer.jwks.endpoint.retry.backoff.ms server.max.startup.time.ms
        socket.connection.setup.timeout.max.ms socket.connection.setup.timeout.ms
        unclean.leader.election.interval.ms
    """),
    "PASSWORD": _names("""
        delegation.token.master.key delegation.token.secret.key password.encoder.old.secret
        password.encoder.secret sasl.jaas.config ssl.key.password
        ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.password
        ssl.truststore.certificates ssl.truststore.password zookeeper.ssl.keystore.password
        zookeeper.ssl.truststore.password
    """),
    "SHORT": _names("""
        group.share.max.groups group.share.max.size offsets.commit.required.acks
        offsets.topic.replication.factor sasl.login.refresh.buffer.seconds
        sasl.login.refresh.min.period.seconds transaction.state.log.replication.factor
    """),
    "STRING": _names("""
        advertised.listeners authorizer.class.name broker.rack compression.type
        control.plane.listener.name controller.listener.names early.start.listeners
        group.consumer.migration.policy inter.broker.listener.name
        inter.broker.protocol.version listener.security.protocol.map listeners log.dir
        log.dirs log.message.format.version log.message.timestamp.type
        max.connections.per.ip.overrides metadata.log.dir metrics.recording.level
        password.encoder.cipher.algorithm password.encoder.keyfactory.algorithm
        remote.log.metadata.manager.class.name remote.log.metadata.manager.class.path
        remote.log.metadata.manager.impl.prefix remote.log.metadata.manager.listener.name
        remote.log.storage.manager.class.name remote.log.storage.manager.class.path
        remote.log.storage.manager.impl.prefix replica.selector.class
        sasl.kerberos.kinit.cmd sasl.kerberos.service.name
        sasl.mechanism.controller.protocol sasl.mechanism.inter.broker.protocol
        sasl.oauthbearer.expected.issuer sasl.oauthbearer.jwks.endpoint.url
        sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
        sasl.oauthbearer.token.endpoint.url security.inter.broker.protocol
        security.providers ssl.client.auth ssl.endpoint.identification.algorithm
        ssl.keymanager.algorithm ssl.keystore.location ssl.keystore.type
        ssl.principal.mapping.rules ssl.protocol ssl.provider
        ssl.secure.random.implementation ssl.trustmanager.algorithm ssl.truststore.location
        ssl.truststore.type zookeeper.clientCnxnSocket zookeeper.connect
        zookeeper.ssl.endpoint.identification.algorithm zookeeper.ssl.keystore.location
        zookeeper.ssl.keystore.type zookeeper.ssl.protocol zookeeper.ssl.truststore.location
        zookeeper.ssl.truststore.type
    """),
}
BROKER_CONFIG_TYPES: dict[str, str] = {name: kind for kind, names in _BROKER_NAMES_BY_TYPE.items() for name in names}

# Dynamic configs that may only be set per broker (resource name = broker id): Kafka refuses them on
# the cluster-wide default entity.
PER_BROKER_DYNAMIC = _names("""
    advertised.listeners listener.security.protocol.map listeners principal.builder.class
    sasl.enabled.mechanisms sasl.jaas.config sasl.kerberos.kinit.cmd
    sasl.kerberos.min.time.before.relogin sasl.kerberos.principal.to.local.rules
    sasl.kerberos.service.name sasl.kerberos.ticket.renew.jitter
    sasl.kerberos.ticket.renew.window.factor sasl.login.refresh.buffer.seconds
    sasl.login.refresh.min.period.seconds sasl.login.refresh.window.factor
    sasl.login.refresh.window.jitter sasl.mechanism.inter.broker.protocol ssl.cipher.suites
    ssl.client.auth ssl.enabled.protocols ssl.endpoint.identification.algorithm
    ssl.engine.factory.class ssl.key.password ssl.keymanager.algorithm
    ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location ssl.keystore.password
    ssl.keystore.type ssl.protocol ssl.provider ssl.secure.random.implementation
    ssl.trustmanager.algorithm ssl.truststore.certificates ssl.truststore.location
    ssl.truststore.password ssl.truststore.type
""")
# Dynamic configs that may be set per broker or as a cluster-wide default (resource name "").
CLUSTER_WIDE_DYNAMIC = _names("""
    background.threads compression.gzip.level compression.lz4.level compression.type
    compression.zstd.level log.cleaner.backoff.ms log.cleaner.dedupe.buffer.size
    log.cleaner.delete.retention.ms log.cleaner.io.buffer.load.factor log.cleaner.io.buffer.size
    log.cleaner.io.max.bytes.per.second log.cleaner.max.compaction.lag.ms
    log.cleaner.min.cleanable.ratio log.cleaner.min.compaction.lag.ms log.cleaner.threads
    log.cleanup.policy log.flush.interval.messages log.flush.interval.ms
    log.index.interval.bytes log.index.size.max.bytes log.local.retention.bytes
    log.local.retention.ms log.message.downconversion.enable log.message.timestamp.after.max.ms
    log.message.timestamp.before.max.ms log.message.timestamp.difference.max.ms
    log.message.timestamp.type log.preallocate log.retention.bytes log.retention.ms
    log.roll.jitter.ms log.roll.ms log.segment.bytes log.segment.delete.delay.ms
    max.connection.creation.rate max.connections max.connections.per.ip
    max.connections.per.ip.overrides message.max.bytes metric.reporters min.insync.replicas
    num.io.threads num.network.threads num.recovery.threads.per.data.dir num.replica.fetchers
    producer.id.expiration.ms remote.fetch.max.wait.ms
    remote.log.index.file.cache.total.size.bytes remote.log.manager.copy.max.bytes.per.second
    remote.log.manager.fetch.max.bytes.per.second transaction.partition.verification.enable
    unclean.leader.election.enable
""")
# DescribeConfigs reports every other broker config read-only.
DYNAMIC_BROKER_CONFIGS = PER_BROKER_DYNAMIC | CLUSTER_WIDE_DYNAMIC
# Replication throttles: stored with the dynamic broker configs too, though not reported as dynamic.
BROKER_QUOTA_CONFIGS = _names("""
    follower.replication.throttled.rate leader.replication.throttled.rate
    replica.alter.log.dirs.io.max.bytes.per.second
""")
# Security configs Kafka changes only per listener (listener.name.<listener>.<config>).
LISTENER_ONLY_DYNAMIC = _names("""
    ssl.key.password ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location
    ssl.keystore.password ssl.keystore.type ssl.truststore.certificates ssl.truststore.location
    ssl.truststore.password ssl.truststore.type
""")

# Kafka's defaults of the dynamic configs, as DescribeConfigs shows them (None: no value).
DYNAMIC_DEFAULTS: dict[str, str | None] = {
    "advertised.listeners": None,
    "background.threads": "10",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "follower.replication.throttled.rate": "9223372036854775807",
    "leader.replication.throttled.rate": "9223372036854775807",
    "listener.security.protocol.map": "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
    "listeners": "PLAINTEXT://:9092",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.io.buffer.load.factor": "0.9",
    "log.cleaner.io.buffer.size": "524288",
    "log.cleaner.io.max.bytes.per.second": "1.7976931348623157E308",
    "log.cleaner.max.compaction.lag.ms": "9223372036854775807",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.threads": "1",
    "log.cleanup.policy": "delete",
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": None,
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.local.retention.bytes": "-2",
    "log.local.retention.ms": "-2",
    "log.message.downconversion.enable": "true",
    "log.message.timestamp.after.max.ms": "9223372036854775807",
    "log.message.timestamp.before.max.ms": "9223372036854775807",
    "log.message.timestamp.difference.max.ms": "9223372036854775807",
    "log.message.timestamp.type": "CreateTime",
    "log.preallocate": "false",
    "log.retention.bytes": "-1",
    "log.retention.ms": None,
    "log.roll.jitter.ms": None,
    "log.roll.ms": None,
    "log.segment.bytes": "1073741824",
    "log.segment.delete.delay.ms": "60000",
    "max.connection.creation.rate": "2147483647",
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "message.max.bytes": "1048588",
    "metric.reporters": "",
    "min.insync.replicas": "1",
    "num.io.threads": "8",
    "num.network.threads": "3",
    "num.recovery.threads.per.data.dir": "1",
    "num.replica.fetchers": "1",
    "principal.builder.class": "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
    "producer.id.expiration.ms": "86400000",
    "remote.fetch.max.wait.ms": "500",
    "remote.log.index.file.cache.total.size.bytes": "1073741824",
    "remote.log.manager.copy.max.bytes.per.second": "9223372036854775807",
    "remote.log.manager.fetch.max.bytes.per.second": "9223372036854775807",
    "replica.alter.log.dirs.io.max.bytes.per.second": "9223372036854775807",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.jaas.config": None,
    "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
    "sasl.kerberos.min.time.before.relogin": "60000",
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",
    "sasl.kerberos.service.name": None,
    "sasl.kerberos.ticket.renew.jitter": "0.05",
    "sasl.kerberos.ticket.renew.window.factor": "0.8",
    "sasl.login.refresh.buffer.seconds": "300",
    "sasl.login.refresh.min.period.seconds": "60",
    "sasl.login.refresh.window.factor": "0.8",
    "sasl.login.refresh.window.jitter": "0.05",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "ssl.cipher.suites": "",
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.engine.factory.class": None,
    "ssl.key.password": None,
    "ssl.keymanager.algorithm": "SunX509",
    "ssl.keystore.certificate.chain": None,
    "ssl.keystore.key": None,
    "ssl.keystore.location": None,
    "ssl.keystore.password": None,
    "ssl.keystore.type": "JKS",
    "ssl.protocol": "TLSv1.3",
    "ssl.provider": None,
    "ssl.secure.random.implementation": None,
    "ssl.trustmanager.algorithm": "PKIX",
    "ssl.truststore.certificates": None,
    "ssl.truststore.location": None,
    "ssl.truststore.password": None,
    "ssl.truststore.type": "JKS",
    "transaction.partition.verification.enable": "true",
    "unclean.leader.election.enable": "false",
}

# Kafka's checks of dynamic config values beyond their type: (least, most) for numbers (None: no bound),
# or the allowed values of strings and lists.
DYNAMIC_RANGES: dict[str, tuple[float | None, float | None]] = {
    "background.threads": (1, None),
    "compression.gzip.level": (1, 9),
    "compression.lz4.level": (1, 17),
    "compression.zstd.level": (-131072, 22),
    "follower.replication.throttled.rate": (0, None),
    "leader.replication.throttled.rate": (0, None),
    "log.cleaner.backoff.ms": (0, None),
    "log.cleaner.delete.retention.ms": (0, None),
    "log.cleaner.io.buffer.size": (0, None),
    "log.cleaner.max.compaction.lag.ms": (1, None),
    "log.cleaner.min.cleanable.ratio": (0, 1),
    "log.cleaner.min.compaction.lag.ms": (0, None),
    "log.cleaner.threads": (0, None),
    "log.flush.interval.messages": (1, None),
    "log.index.interval.bytes": (0, None),
    "log.index.size.max.bytes": (4, None),
    "log.local.retention.bytes": (-2, None),
    "log.local.retention.ms": (-2, None),
    "log.message.timestamp.after.max.ms": (0, None),
    "log.message.timestamp.before.max.ms": (0, None),
    "log.message.timestamp.difference.max.ms": (0, None),
    "log.segment.bytes": (14, None),
    "log.segment.delete.delay.ms": (0, None),
    "max.connection.creation.rate": (0, None),
    "max.connections": (0, None),
    "max.connections.per.ip": (0, None),
    "message.max.bytes": (0, None),
    "min.insync.replicas": (1, None),
    "num.io.threads": (1, None),
    "num.network.threads": (1, None),
    "num.recovery.threads.per.data.dir": (1, None),
    "producer.id.expiration.ms": (1, None),
    "remote.fetch.max.wait.ms": (1, None),
    "remote.log.index.file.cache.total.size.bytes": (1, None),
    "remote.log.manager.copy.max.bytes.per.second": (1, None),
    "remote.log.manager.fetch.max.bytes.per.second": (1, None),
    "replica.alter.log.dirs.io.max.bytes.per.second": (0, None),
}
DYNAMIC_CHOICES: dict[str, tuple[str, ...]] = {
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "log.cleanup.policy": ("compact", "delete"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
    "ssl.client.auth": ("required", "requested", "none"),
}
# compression.gzip.level also takes -1 (the codec's default level).
RANGE_EXCEPTIONS: dict[str, frozenset[int]] = {"compression.gzip.level": frozenset({-1})}

# Kafka's type of every topic config (LogConfig).
TOPIC_CONFIG_TYPES: dict[str, str] = {
    "cleanup.policy": "LIST",
    "compression.gzip.level": "INT",
    "compression.lz4.level": "INT",
    "compression.type": "STRING",
    "compression.zstd.level": "INT",
    "delete.retention.ms": "LONG",
    "file.delete.delay.ms": "LONG",
    "flush.messages": "LONG",
    "flush.ms": "LONG",
    "follower.replication.throttled.replicas": "LIST",
    "index.interval.bytes": "INT",
    "leader.replication.throttled.replicas": "LIST",
    "local.retention.bytes": "LONG",
    "local.retention.ms": "LONG",
    "max.compaction.lag.ms": "LONG",
    "max.message.bytes": "INT",
    "message.downconversion.enable": "BOOLEAN",
    "message.format.version": "STRING",
    "message.timestamp.after.max.ms": "LONG",
    "message.timestamp.before.max.ms": "LONG",
    "message.timestamp.difference.max.ms": "LONG",
    "message.timestamp.type": "STRING",
    "min.cleanable.dirty.ratio": "DOUBLE",
    "min.compaction.lag.ms": "LONG",
    "min.insync.replicas": "INT",
    "preallocate": "BOOLEAN",
    "remote.log.copy.disable": "BOOLEAN",
    "remote.log.delete.on.disable": "BOOLEAN",
    "remote.storage.enable": "BOOLEAN",
    "retention.bytes": "LONG",
    "retention.ms": "LONG",
    "segment.bytes": "INT",
    "segment.index.bytes": "INT",
    "segment.jitter.ms": "LONG",
    "segment.ms": "LONG",
    "unclean.leader.election.enable": "BOOLEAN",
    "errors.deadletterqueue.group.enable": "BOOLEAN",  # KIP-1191 (Kafka trunk)
    # Delayed delivery (docs/delayed-and-retry.md): kbroker's own.
    "delivery.delay.ms": "LONG",
    "delay.max.ms": "LONG",
    "delay.tick.ms": "LONG",
    "delayed.delivery.enable": "BOOLEAN",
    "retry.target.topic": "STRING",
    "retry.backoff.ms": "LIST",
    "retry.dead.letter.topic": "STRING",
    # Filtered view topics (docs/views.md): kbroker's own.
    "view.source.topic": "STRING",
    "view.filter": "STRING",
    "view.tag.header": "STRING",
}

"""`kbroker bench`: throughput, latency and memory of kbroker, measured against references.

Every measurement of kbroker is paired with the same measurement, same client settings, of a
reference broker started in the same run: librdkafka's built-in mock cluster (a C broker that
shows what the client itself manages on this machine) and, where a Docker engine is reachable,
Apache Kafka. Runs alternate (kbroker, reference, kbroker, ...) and the report gives medians and
kbroker/reference ratios, because absolute numbers on a shared machine mean little.
"""

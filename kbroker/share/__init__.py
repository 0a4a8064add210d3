"""Share groups (KIP-932): queues on a Kafka log."""

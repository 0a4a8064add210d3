"""A share consumer run as its own process, so tests can kill it while it holds records.

    python -m tests.share_member BOOTSTRAP GROUP TOPIC

It polls (explicit acknowledgement) until a poll gives it records, prints them as one JSON line
{"held": [[offset, delivery count], ...]}, and then stops polling without acknowledging: the
records stay locked until the process is killed and their locks expire.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    held: list[list[int]] = []
    while not held:  # explicit mode: a poll after one that gave records would need acknowledgements
        held = [[m.offset(), m.delivery_count()] for m in consumer.poll(0.5) if m.error() is None]
    sys.stdout.write(json.dumps({"held": held}) + "\n")
    sys.stdout.flush()
    while True:  # hold the records until killed
        time.sleep(3600)


if __name__ == "__main__":
    main()

"""A share consumer run as its own process, so tests can kill it while it holds records.

    python -m tests.share_member BOOTSTRAP GROUP TOPIC [ACCEPTED]

It polls (explicit acknowledgement) until a poll gives it records, accepts the first ACCEPTED of
them (default none) and commits that, prints one JSON line {"held": [[offset, delivery count],
...], "accepted": [offsets whose ACCEPT was answered without error]}, and then stops polling
without acknowledging the rest: they stay locked until the process is killed and their locks
expire.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    accepted = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    messages = []
    while not messages:  # explicit mode: a poll after one that gave records would need acknowledgements
        messages = [m for m in consumer.poll(0.5) if m.error() is None]
    for message in messages[:accepted]:
        consumer.acknowledge(message)
    answered = consumer.commit_sync(30) if accepted else {}
    ok = all(error is None for error in answered.values())
    done = [m.offset() for m in messages[:accepted]] if answered and ok else []
    held = [[m.offset(), m.delivery_count()] for m in messages[accepted:]]
    sys.stdout.write(json.dumps({"held": held, "accepted": done}) + "\n")
    sys.stdout.flush()
    while True:  # hold the records until killed
        time.sleep(3600)


if __name__ == "__main__":
    main()

"""ConsumerGroupHeartbeat v1, which the generated declarations lack: Kafka 3.9's spec (the one
protocol/messages is generated from) still marks v1 unstable, and Kafka 4.0 made it the version
clients speak (librdkafka 2.10+ sends nothing older). v1 adds `subscribed_topic_regex` after the
subscribed names, and from it on the client makes up its member id (KIP-1082); its answer is
v0's. Registered with the generated module when the handlers load, before any request is read;
to be dropped once the declarations are generated from Kafka 4.0's specs.
"""

from __future__ import annotations

from protocol.messages import consumer_group_heartbeat as generated
from protocol.primitives import Field, KString, KStruct

VERSION = 1


def _request_v1() -> KStruct:
    v0 = generated.REQUEST[0]
    fields = list(v0.fields)
    after_names = next(i for i, f in enumerate(fields) if f.name == "subscribed_topic_names") + 1
    fields.insert(after_names, Field("subscribed_topic_regex", KString(compact=True, nullable=True), None))
    return KStruct(*fields, flexible=True, name="ConsumerGroupHeartbeatRequest")


def register() -> None:
    if VERSION not in generated.REQUEST:
        generated.REQUEST[VERSION] = _request_v1()
        generated.RESPONSE[VERSION] = generated.RESPONSE[0]
        generated.MAX_VERSION = VERSION

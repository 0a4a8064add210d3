"""A small blocking Kafka client over `protocol.connection.ClientProtocol`.

Made for the command-line tools and tests: one request at a time per connection, API
versions negotiated per broker, metadata to find partition leaders. It is not a general
client (no pipelining, no retries beyond what a tool needs, no group membership: it only
administers groups).

`Client` is the whole of it. Its parts, each a module of this package:

- `connection`: one socket to one broker (`BrokerConnection`), the bootstrap list;
- `cluster`: `ClusterClient`, connections per node, request routing and cluster metadata;
- `admin`: topics, configs, leader elections and partition reassignments;
- `data`: Produce, ListOffsets and Fetch; `records` encodes and decodes their record batches;
- `quotas`: client quotas (DescribeClientQuotas, AlterClientQuotas);
- `leaders`: kbroker's own describe APIs asked of each partition's leader; through it `delayed`,
  what leaders hold for delayed delivery (DescribeDelayed), and `archive`, the local and
  archived sizes of partitions (DescribeArchive);
- `coordinators`: FindCoordinator, then `groups` (consumer groups and their offsets),
  `share_offsets` (share groups' start offsets) and
  `transactions` (listing, describing, aborting) through the coordinator it finds;
- `errors`: `BrokerUnreachable`, and error codes as `KafkaError`s.
"""

from __future__ import annotations

from kbroker.client.admin import AclAdmin, AdminClient
from kbroker.client.archive import ArchiveClient
from kbroker.client.data import DataClient
from kbroker.client.delayed import DelayedClient
from kbroker.client.errors import BrokerUnreachable
from kbroker.client.groups import GroupsClient
from kbroker.client.quotas import QuotasClient
from kbroker.client.records import Record
from kbroker.client.share_offsets import ShareOffsetsClient
from kbroker.client.transactions import TransactionsClient

__all__ = ["BrokerUnreachable", "Client", "Record"]


class Client(AdminClient, AclAdmin, ArchiveClient, DataClient, DelayedClient, GroupsClient, QuotasClient,
             ShareOffsetsClient, TransactionsClient):
    """Blocking client for a cluster reached through `bootstrap` ("host:port[,host:port]"):
    every part of the package over one set of connections and one metadata cache."""

"""`kbroker transactions`: list, describe, and abort hanging transactions, like kafka-transactions.sh
(same subcommands, options and tables)."""

from __future__ import annotations

import argparse

from kbroker.cli.common import CommandError, add_bootstrap_argument, connect, describe_error
from kbroker.client import Client
from kbroker.client.transactions import ProducerState
from kbroker.clock import wall_clock_ms
from protocol.errors import KafkaError

MS_PER_MINUTE = 60_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("list", help="list transactions")
    describe = sub.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True, help="transactional id")
    producers = sub.add_parser("describe-producers", help="describe the states of active producers for a "
                                                          "topic partition")
    producers.add_argument("--broker-id", type=int, help="describe the producer state on this replica")
    _add_partition_arguments(producers)
    abort = sub.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    _add_partition_arguments(abort)
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, help="producer id (with --producer-epoch, --coordinator-epoch)")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")
    hanging = sub.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15,
                         help="maximum transaction timeout in minutes to limit the scope of the search")
    hanging.add_argument("--topic", help="topic name to limit search to")
    hanging.add_argument("--partition", type=int, help="partition number")


def _add_partition_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="topic name")
    parser.add_argument("--partition", type=int, required=True, help="partition number")


def run(args: argparse.Namespace) -> int:
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        return _ACTIONS[args.action](client, args)


def _list(client: Client, _args: argparse.Namespace) -> int:
    rows = [[t.transactional_id, str(node), str(t.producer_id), t.state]
            for node, listings in client.list_transactions().items() for t in listings]
    print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def _describe(client: Client, args: argparse.Namespace) -> int:
    try:
        txn = client.describe_transaction(args.transactional_id)
    except KafkaError as e:
        raise CommandError(f"Failed to describe transaction state of transactional-id `{args.transactional_id}`: "
                           f"{describe_error(e)}") from None
    open_ = txn.start_time_ms >= 0
    row = [str(txn.coordinator_id), txn.transactional_id, str(txn.producer_id), str(txn.producer_epoch), txn.state,
           str(txn.timeout_ms), str(txn.start_time_ms) if open_ else "None",
           str(wall_clock_ms() - txn.start_time_ms) if open_ else "None",
           ",".join(f"{t}-{p}" for t, p in txn.partitions)]
    print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                 "TopicPartitions"], [row])
    return 0


def _describe_producers(client: Client, args: argparse.Namespace) -> int:
    producers = client.describe_producers(args.topic, args.partition, args.broker_id)
    rows = [[str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch), str(p.last_sequence),
             str(p.last_timestamp), str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None"]
            for p in producers]
    print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                 "CurrentTransactionStartOffset"], rows)
    return 0


def _abort(client: Client, args: argparse.Namespace) -> int:
    if args.start_offset is None and args.producer_id is None:
        raise CommandError("The transaction to abort must be identified either with --start-offset (for brokers "
                           "on 3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch "
                           "(for older brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise CommandError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CommandError("Missing required argument --coordinator-epoch")
        producer_id, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    else:
        found = [p for p in client.describe_producers(args.topic, args.partition)
                 if p.current_txn_start_offset == args.start_offset]
        if not found:
            raise CommandError(f"Could not find any open transactions starting at offset {args.start_offset} "
                               f"on partition {args.topic}-{args.partition}")
        producer_id, epoch, coordinator_epoch = found[0].producer_id, found[0].producer_epoch, found[0].coordinator_epoch
    # A transaction that hung before its first marker has no coordinator epoch yet: 0 is safe, as in Kafka.
    client.abort_transaction(args.topic, args.partition, producer_id, epoch, max(coordinator_epoch, 0))
    return 0


def _find_hanging(client: Client, args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise CommandError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                           "of the search")
    if args.partition is not None and args.topic is None:
        raise CommandError("The --partition argument requires --topic to be provided")
    now = wall_clock_ms()
    candidates = [(tp, p) for tp in _partitions_to_search(client, args)
                  for p in client.describe_producers(*tp, args.broker_id)
                  if p.current_txn_start_offset >= 0
                  and now - p.last_timestamp > args.max_transaction_timeout * MS_PER_MINUTE]
    hanging = _hanging(client, candidates)
    rows = [[topic, str(partition), str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
             str(p.current_txn_start_offset), str(p.last_timestamp), str((now - p.last_timestamp) // MS_PER_MINUTE)]
            for (topic, partition), p in hanging]
    print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                 "LastTimestamp", "Duration(min)"], rows)
    return 0


def _partitions_to_search(client: Client, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    meta = client.metadata(None if args.topic is None else [args.topic], refresh=True)
    return sorted((t.name, p.partition) for t in meta.topics.values() for p in t.partitions.values()
                  if args.broker_id is None or args.broker_id in p.replicas)


def _hanging(client: Client, candidates: list[tuple[tuple[str, int], ProducerState]]
             ) -> list[tuple[tuple[str, int], ProducerState]]:
    """Open transactions no coordinator will finish: their producer id has no transactional id, or
    the coordinator's transaction does not include the partition (Kafka's rule)."""
    if not candidates:
        return []
    producer_ids = {p.producer_id for _, p in candidates}
    transactional_ids = {t.producer_id: t.transactional_id
                         for listings in client.list_transactions(producer_ids=producer_ids).values()
                         for t in listings}
    hanging = []
    for tp, producer in candidates:
        transactional_id = transactional_ids.get(producer.producer_id)
        if transactional_id is None or tp not in client.describe_transaction(transactional_id).partitions:
            hanging.append((tp, producer))
    return hanging


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """Kafka's prettyPrintTable: every cell padded to its column's width and followed by a tab."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        print("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=True)))


_ACTIONS = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "abort": _abort,
    "find-hanging": _find_hanging,
}

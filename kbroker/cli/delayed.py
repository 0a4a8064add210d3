"""`kbroker delayed`: what the brokers hold for delayed delivery (docs/delayed-and-retry.md).

`--describe` asks each partition's leader (DescribeDelayed, kbroker's own API) and prints one
line per partition that has records pending (every partition of the topics with `--all`):
pending records and their bytes, those held by open transactions, and the next due time.
Kafka has no such tool, so the table is kbroker's own.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from kbroker.cli.common import add_bootstrap_argument, connect
from kbroker.cli.consumer_groups import _print_table
from kbroker.client.delayed import DelayedPartition
from kbroker.clock import wall_clock_ms

COLUMNS = ["TOPIC", "PARTITION", "LEADER", "PENDING", "PENDING-BYTES", "HELD", "NEXT-DUE"]
NONE = "-"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true",
                         help="show each partition's pending delayed records (from its leader)")
    parser.add_argument("--topic", action="append", default=[], help="a topic to describe (repeatable; default: all)")
    parser.add_argument("--all", action="store_true",
                        help="every partition of the topics, also those with nothing pending")


def run(args: argparse.Namespace) -> int:
    with connect(args.bootstrap_server, command_config=args.command_config) as client:
        partitions = client.describe_delayed(args.topic or None)
    shown = partitions if args.all else [p for p in partitions if p.pending_count]
    now = wall_clock_ms()
    _print_table([(title, len(title)) for title in COLUMNS], [_row(p, now) for p in shown], blank_line=False)
    if not shown:
        sys.stdout.flush()
        print("No partition has delayed records pending." if partitions else "No partition to describe.",
              file=sys.stderr)
    return 0


def _row(p: DelayedPartition, now_ms: int) -> list[str]:
    return [p.topic, str(p.partition), str(p.leader), str(p.pending_count), str(p.pending_bytes),
            str(p.held_count), NONE if p.next_due_ms is None else due_text(p.next_due_ms, now_ms)]


def due_text(due_ms: int, now_ms: int) -> str:
    """`2025-01-02T03:04:05.678Z (in 12.3s)`; a due time already passed (the record waits for the
    high watermark, or the mover's next tick) says how long ago."""
    moment = datetime.fromtimestamp(due_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    wait = duration_text(abs(due_ms - now_ms))
    return f"{moment} ({'in ' + wait if due_ms >= now_ms else wait + ' ago'})"


def duration_text(ms: int) -> str:
    """A duration in its two largest units: 12.3s, 4m05s, 2h07m, 3d04h."""
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"

"""`kbroker console`: serve the read-only web console of a cluster (docs/operations.md,
"Console") until interrupted."""

from __future__ import annotations

import argparse
import sys

from kbroker.cli.common import CommandError, add_bootstrap_argument, load_command_config
from kbroker.console.server import ClusterPoller, make_server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_argument(parser)
    parser.add_argument("--listen", default="127.0.0.1:8088", metavar="HOST:PORT",
                        help="where the page is served (default 127.0.0.1:8088; port 0 picks a free one)")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                        help="a broker's metrics endpoint, e.g. http://broker1:9404/metrics, for the charts; "
                             "repeatable, one per broker")
    parser.add_argument("--refresh-s", type=float, default=2.0,
                        help="seconds between reads of the cluster and its metrics (default 2)")


def run(args: argparse.Namespace) -> int:
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--listen {args.listen}: expected HOST:PORT")
    if args.refresh_s <= 0:
        raise CommandError("--refresh-s must be positive")
    poller = ClusterPoller(args.bootstrap_server, args.metrics_url, args.refresh_s,
                           security=load_command_config(args.command_config))
    try:
        server = make_server(host, int(port), poller)
    except OSError as e:
        raise CommandError(f"cannot listen on {args.listen}: {e.strerror or e}") from None
    poller.start()
    bound_host, bound_port = server.server_address[:2]
    print(f"kbroker console on http://{bound_host}:{bound_port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        poller.stop()
    sys.stdout.flush()
    return 0

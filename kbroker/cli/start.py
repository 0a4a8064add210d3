"""`kbroker start [server.properties] [--override key=value ...]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from kbroker.config import BrokerConfig, ConfigError
from kbroker.malloc_tuning import keep_large_buffers
from kbroker.metadata.store import MetadataConflict, MetadataUnavailable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="server.properties file")
    parser.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override a property"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        config = BrokerConfig.load(args.config, args.override)
    except (ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    keep_large_buffers()
    if os.environ.get("KBROKER_EVENT_LOOP") == "uvloop":  # for measuring it (docs/performance.md)
        import uvloop

        return uvloop.run(_serve(config))
    return asyncio.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    from kbroker.broker import Broker

    try:
        broker = Broker(config)
    except (ConfigError, MetadataUnavailable, MetadataConflict) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        await broker.start()
    except (MetadataConflict, ConfigError) as e:  # another live broker has this broker.id; a busy metrics port
        print(f"error: {e}", file=sys.stderr)
        await broker.stop()
        return 1
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    endpoints = ", ".join(f"{name}://{host}:{port}" for name, host, port in broker.bound)
    print(f"kbroker {config.broker_id} started (cluster {broker.cluster_id}) on {endpoints}", flush=True)
    await stopping.wait()
    logging.getLogger("kbroker").info("shutting down")
    await broker.stop()
    return 0

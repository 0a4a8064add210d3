"""`kbroker` command line: subcommands mirror Kafka's tools."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kbroker.cli import start

COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "start": ("start a broker (like kafka-server-start.sh)", start.add_arguments, start.run),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kbroker", description="A broker that speaks the Kafka protocol.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(command)
        command.set_defaults(run=run)
    return parser


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CommandError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

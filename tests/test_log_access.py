"""Handlers and coordinators never reach a partition's `Log` (docs/architecture.md, "Services").

The data path belongs to the replica manager, as Kafka's ReplicaManager owns it: handlers translate
between the wire and `ReplicaManager` / `Partition` calls, and coordinators write and replay their
topics through `Partition`. Read statically (`ast`): no attribute named `log` (`partition.log`,
`partition.log.read(...)`) and no import of the storage modules that hold logs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kbroker/handlers", "kbroker/coordinator")
# Modules whose objects are the logs themselves; `kbroker.storage.producer_state` and the like
# (values that cross the partition API) stay importable.
LOG_MODULES = frozenset({"kbroker.storage.log", "kbroker.storage.log_manager", "kbroker.storage.segment",
                         "kbroker.storage.log_segments"})


def log_accesses(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` reads an attribute named `log` or imports a module of LOG_MODULES."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and node.attr == "log":
            found.append((node.lineno, ".log"))
        elif isinstance(node, ast.ImportFrom) and node.module in LOG_MODULES:
            found.append((node.lineno, f"imports {node.module}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"imports {a.name}") for a in node.names if a.name in LOG_MODULES]
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_log_access(path: Path) -> None:
    assert log_accesses(path.read_text(), str(path.relative_to(ROOT))) == []


def test_the_check_sees_log_access() -> None:
    """The reading itself: each way of reaching a log is found, loggers and log_* names are not."""
    source = """
from kbroker.storage.log import Log
import kbroker.storage.log_manager
def f(ctx, partition, log_):
    partition.log.read(0, 10)
    ctx.broker.replicas.get("t", 0).log
    log_.log_end_offset
    logging.getLogger("x").info("y")
    partition.log_end_offset
"""
    assert log_accesses(source) == [
        "<source>:2: imports kbroker.storage.log",
        "<source>:3: imports kbroker.storage.log_manager",
        "<source>:5: .log",
        "<source>:6: .log",
    ]
    assert len(modules()) > 40  # the packages are where they are said to be

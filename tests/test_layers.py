"""The layers of the code base (docs/architecture.md, "Layers"): which package may import which.

The graph is read statically (`ast`) from every module of kbroker/ and protocol/: a unit is
`protocol`, a package of kbroker (`kbroker.cluster`) or a top-level module of kbroker
(`kbroker.config`). Every import between units must be in `ALLOWED`, and `ALLOWED` has no cycle,
so no two packages import each other. The one exception is `TYPE_ONLY`: a few services are handed
the `Broker` that wires them and name its type under `if TYPE_CHECKING:`, which never runs.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_PACKAGES = ("kbroker", "protocol")

# unit -> the units it may import at run time. Lower layers first.
ALLOWED: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    # Utilities, on nothing but the protocol.
    "kbroker": frozenset(),
    "kbroker.clock": frozenset(),
    "kbroker.fsutil": frozenset({"protocol"}),
    "kbroker.kafka_configs": frozenset({"protocol"}),
    "kbroker.log_limiter": frozenset({"protocol"}),
    "kbroker.malloc_tuning": frozenset(),
    "kbroker.pacing": frozenset({"protocol"}),
    "kbroker.partitioner": frozenset({"protocol"}),
    "kbroker.ports": frozenset(),
    "kbroker.properties": frozenset(),
    "kbroker.rates": frozenset(),
    "kbroker.tasks": frozenset(),
    # moto's S3 server as a local process, for the tests and the archive benchmark.
    "kbroker.s3_server": frozenset({"kbroker.ports"}),
    # Delayed delivery's pure core: delay headers, pending batches, the timing wheel, the index,
    # retry topics' rules (a forwarded record's partition is the default partitioner's).
    "kbroker.delay": frozenset({"kbroker.clock", "kbroker.fsutil", "kbroker.partitioner", "protocol"}),
    # Metrics: the counters request paths bump, and what serves them over HTTP (prometheus_client).
    "kbroker.metrics": frozenset({"protocol"}),
    # The log, then configuration (topic defaults come from the log's LogConfig) and metadata.
    "kbroker.storage": frozenset({"kbroker.clock", "kbroker.delay", "kbroker.fsutil", "protocol"}),
    # TLS contexts, principals, SASL mechanisms and sessions (stdlib ssl and cryptography, the protocol).
    "kbroker.security": frozenset({"protocol"}),
    "kbroker.config": frozenset({"kbroker.kafka_configs", "kbroker.metrics", "kbroker.properties", "kbroker.security",
                                 "kbroker.storage", "protocol"}),
    # meta.properties of the log dirs, and new cluster ids.
    "kbroker.meta_properties": frozenset({"kbroker.config", "kbroker.fsutil", "kbroker.properties"}),
    "kbroker.dynamic_config": frozenset({"kbroker.config", "kbroker.kafka_configs", "kbroker.security", "protocol"}),
    "kbroker.metadata": frozenset({"kbroker.clock", "kbroker.config", "kbroker.fsutil", "kbroker.meta_properties",
                                   "kbroker.ports", "kbroker.security", "protocol"}),
    # Filtered views: the filter language, batches filtered, a view's read of its source's log, the
    # indexer of appended batches (a task of its own).
    "kbroker.views": frozenset({"kbroker.pacing", "kbroker.storage", "kbroker.tasks", "protocol"}),
    # The archive (tiered storage): the object store, remote log metadata, copies and reads.
    "kbroker.archive": frozenset({"kbroker.clock", "kbroker.log_limiter", "kbroker.metadata", "kbroker.storage",
                                  "kbroker.tasks", "protocol"}),
    # Replica manager, partitions, fetch sessions, replication, topics, the controller.
    "kbroker.cluster": frozenset({"kbroker.archive", "kbroker.clock", "kbroker.config", "kbroker.delay", "kbroker.dynamic_config", "kbroker.fsutil",
                                  "kbroker.metadata", "kbroker.metrics", "kbroker.pacing", "kbroker.rates",
                                  "kbroker.security", "kbroker.storage", "kbroker.tasks", "kbroker.views", "protocol"}),
    # Share groups' pure state: share partitions, sessions, the assignor.
    "kbroker.share": frozenset({"kbroker.clock", "protocol"}),
    # Group and transaction coordinators, over the replica manager.
    "kbroker.coordinator": frozenset({"kbroker.clock", "kbroker.cluster", "kbroker.share", "kbroker.storage",
                                      "kbroker.tasks", "protocol"}),
    # One module per API, over the services.
    "kbroker.handlers": frozenset({"kbroker.clock", "kbroker.cluster", "kbroker.config", "kbroker.coordinator",
                                   "kbroker.share", "kbroker.views",
                                   "kbroker.dynamic_config", "kbroker.kafka_configs", "kbroker.log_limiter",
                                   "kbroker.pacing", "kbroker.security", "kbroker.storage", "protocol"}),
    # The network server dispatches to the handlers (one way: handlers never import it).
    "kbroker.server": frozenset({"kbroker.clock", "kbroker.config", "kbroker.handlers", "kbroker.log_limiter",
                                 "kbroker.metrics", "kbroker.rates", "kbroker.security", "protocol"}),
    # The wiring of one broker.
    "kbroker.broker": frozenset({"kbroker.archive", "kbroker.clock", "kbroker.cluster", "kbroker.config", "kbroker.coordinator",
                                 "kbroker.meta_properties", "kbroker.metadata", "kbroker.metrics", "kbroker.security",
                                 "kbroker.server",
                                 "kbroker.share", "kbroker.storage"}),
    # Clients, tools and benchmarks, outside the broker.
    "kbroker.client": frozenset({"kbroker.clock", "kbroker.security", "protocol"}),
    # The web console: a process of its own over the admin client.
    "kbroker.console": frozenset({"kbroker.client", "kbroker.security", "protocol"}),
    # Local broker processes (and their ZooKeeper), for the tests, benchmarks and `kbroker cluster`.
    "kbroker.launcher": frozenset({"kbroker.metadata", "kbroker.ports"}),
    # The delayed-delivery benchmark reads the `.delayed` snapshot a stopped broker left.
    "kbroker.bench": frozenset({"kbroker.client", "kbroker.config", "kbroker.delay", "kbroker.launcher",
                                "kbroker.metadata", "kbroker.ports", "kbroker.properties", "kbroker.s3_server",
                                "protocol"}),
    "kbroker.cli": frozenset({"kbroker.clock", "kbroker.bench", "kbroker.broker", "kbroker.client", "kbroker.config",
                              "kbroker.console",
                              "kbroker.fsutil", "kbroker.launcher", "kbroker.malloc_tuning", "kbroker.metadata",
                              "kbroker.partitioner", "kbroker.views",
                              "kbroker.ports", "kbroker.properties", "kbroker.security", "protocol"}),
}

# unit -> the units it may name in type hints only (under `if TYPE_CHECKING:`), against the layers.
TYPE_ONLY: dict[str, frozenset[str]] = {
    "kbroker.cluster": frozenset({"kbroker.broker"}),  # ConfigService pushes configs to the Broker's parts
    "kbroker.handlers": frozenset({"kbroker.broker"}),  # RequestContext.broker
    "kbroker.server": frozenset({"kbroker.broker"}),  # Server(broker)
    "kbroker.metrics": frozenset({"kbroker.broker"}),  # the collector reads the Broker's state
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str  # the unit imported
    type_only: bool


def all_modules() -> dict[str, Path]:
    modules = {}
    for top in TOP_PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


MODULES = all_modules()


def unit_of(module: str) -> str | None:
    """The layer unit of a dotted module name, None outside kbroker and protocol."""
    parts = module.split(".")
    if parts[0] == "protocol":
        return "protocol"
    if parts[0] != "kbroker":
        return None
    return "kbroker" if len(parts) == 1 else f"kbroker.{parts[1]}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    # `from kbroker import dynamic_config` imports a module of the kbroker package.
    names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    return list(dict.fromkeys(names))


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in _imported_names(node, module, path.name == "__init__.py"):
                target = unit_of(name)
                if target is not None:
                    found.append(Import(module, node.lineno, target, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return found


def cross_unit_imports() -> list[Import]:
    return [i for m in MODULES for i in imports_of(m) if i.target != unit_of(i.module)]


def find_cycle(graph: dict[str, frozenset[str]]) -> list[str] | None:
    """One cycle of the graph as a path that ends where it starts, or None."""
    done: set[str] = set()
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            cycle = walk(nxt)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        cycle = walk(node)
        if cycle:
            return cycle
    return None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_every_unit_has_a_place_in_the_layers() -> None:
    units = {unit_of(m) for m in MODULES}
    assert units - ALLOWED.keys() == set(), "a new package or module: give it its row in ALLOWED"


def test_protocol_imports_nothing_from_kbroker() -> None:
    offending = [i for i in cross_unit_imports() if unit_of(i.module) == "protocol"]
    assert offending == []


def test_imports_follow_the_layers() -> None:
    offending = [
        f"{i.module}:{i.line} imports {i.target}{' (type only)' if i.type_only else ''}"
        for i in cross_unit_imports()
        if i.target not in ALLOWED.get(unit_of(i.module) or "", frozenset())
        and not (i.type_only and i.target in TYPE_ONLY.get(unit_of(i.module) or "", frozenset()))
    ]
    assert offending == []


def test_the_layers_have_no_cycle() -> None:
    assert find_cycle(ALLOWED) is None


def test_no_cycle_between_packages_at_run_time() -> None:
    graph: dict[str, set[str]] = {}
    for i in cross_unit_imports():
        if not i.type_only:
            graph.setdefault(unit_of(i.module) or "", set()).add(i.target)
    assert find_cycle({unit: frozenset(targets) for unit, targets in graph.items()}) is None


def test_the_checks_see_a_cycle_and_a_type_only_import() -> None:
    """The graph reading itself: a cycle is found, and TYPE_CHECKING imports are told apart."""
    assert find_cycle({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}) == ["a", "b", "c", "a"]
    server = [i for i in imports_of("kbroker.server.server") if i.target == "kbroker.broker"]
    assert server and all(i.type_only for i in server)
    assert any(i.target == "kbroker.handlers" and not i.type_only for i in imports_of("kbroker.server.connection"))


# Request paths: they answer from the broker's MetadataCache and hand store writes to services
# that run them off the event loop (docs/architecture.md, "Metadata"). A ZooKeeper read here
# would hold up every client while ZooKeeper is slow or stopped.
REQUEST_PATH_PACKAGES = ("kbroker/handlers", "kbroker/coordinator", "kbroker/server")
STORE_ATTRIBUTES = frozenset({"store", "_store"})


def store_uses(source: str, where: str) -> list[str]:
    """Where a module reaches a metadata store (`x.store`) or a ZooKeeper client (kazoo)."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Attribute) and node.attr in STORE_ATTRIBUTES:
            found.append(f"{where}:{node.lineno} uses .{node.attr}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{where}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "kazoo"]
    return found


def test_request_paths_never_touch_the_metadata_store() -> None:
    offending = [use for package in REQUEST_PATH_PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                 for use in store_uses(path.read_text(), str(path.relative_to(ROOT)))]
    assert offending == []


def test_the_store_check_finds_store_reads_and_zookeeper_clients() -> None:
    source = "from kazoo.client import KazooClient\n\ndef handle(ctx):\n    return ctx.broker.topics.store.get_topic('t')\n"
    assert store_uses(source, "h.py") == ["h.py:1 imports kazoo.client", "h.py:4 uses .store"]

"""Kafka's own command-line tools run against two brokers at once, and their output compared.

A `ToolTarget` is one broker as the tools see it (its bootstrap address and the values that
legitimately differ between brokers: cluster id, log directory). `ToolPair.run(tool, *args)`
runs the same invocation against kbroker and the Apache Kafka reference in parallel (each
invocation is a JVM start; two at once use the two cores) and returns both results;
`assert_same` compares exit codes, stdout and stderr after masking.

Masks replace what may differ between two correct brokers, and only that:
- the values each target is known to have (bootstrap address, cluster id, log directory) are
  replaced literally, so a wrong cluster id or a foreign address still shows as a difference;
- values generated at run time (topic ids, member ids, producer ids) are renamed in order of
  appearance (`<topic-id-1>`, `<topic-id-2>`, ...), so "the same id twice" and "two different
  ids" stay distinguishable;
- timestamps and timings are replaced by their kind (`<time>`, `<ms>`).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.kafka_local import TOOL_TIMEOUT_S, tool_command

# A tool is a short-lived JVM: C1 only and the serial collector start it about a third faster,
# and nothing it does runs long enough for C2 to pay off.
TOOL_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"
BOOTSTRAP = "{bootstrap}"  # in a tool's arguments: the address of the target it runs against


@dataclass(frozen=True)
class ToolResult:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@dataclass(frozen=True)
class ToolTarget:
    """One broker, and the values of it that the masks replace literally."""

    name: str
    home: Path
    bootstrap: str
    cluster_id: str
    log_dir: str

    def run(self, tool: str, *args: str, input: str | None = None, timeout: float = TOOL_TIMEOUT_S) -> ToolResult:
        argv = tool_command(self.home, tool, *(a.replace(BOOTSTRAP, self.bootstrap) for a in args))
        env = {**os.environ, "KAFKA_HEAP_OPTS": os.environ.get("KAFKA_TOOLS_HEAP_OPTS", "-Xmx256m"),
               "KAFKA_JVM_PERFORMANCE_OPTS": TOOL_JVM_OPTS}
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=None if input is not None else subprocess.DEVNULL)
        return ToolResult(done.returncode, done.stdout, done.stderr)

    def popen(self, tool: str, *args: str) -> subprocess.Popen[str]:
        """A tool left running (a group member, say); the caller stops it."""
        argv = tool_command(self.home, tool, *(a.replace(BOOTSTRAP, self.bootstrap) for a in args))
        env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "KAFKA_JVM_PERFORMANCE_OPTS": TOOL_JVM_OPTS}
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def literal_masks(self) -> list[tuple[str, str]]:
        """What this target is known to answer with, replaced by its name, longest first."""
        pairs = [(self.log_dir, "<log-dir>"), (self.cluster_id, "<cluster-id>"), (self.bootstrap, "<broker>")]
        return sorted(pairs, key=lambda p: -len(p[0]))


@dataclass(frozen=True)
class PairResult:
    kbroker: ToolResult
    kafka: ToolResult


Rule = Callable[[str], str]


def replace(pattern: str, replacement: str, flags: int = re.MULTILINE) -> Rule:
    compiled = re.compile(pattern, flags)
    return lambda text: compiled.sub(replacement, text)


def rename(pattern: str, label: str, group: int = 0, flags: int = re.MULTILINE) -> Rule:
    """Each distinct match (or its `group`) becomes <label-N>, numbered by first appearance."""
    compiled = re.compile(pattern, flags)

    def apply(text: str) -> str:
        seen: dict[str, str] = {}

        def name(match: re.Match[str]) -> str:
            value = match.group(group)
            seen.setdefault(value, f"<{label}-{len(seen) + 1}>")
            whole = match.group(0)
            start = match.start(group) - match.start(0)
            return whole[:start] + seen[value] + whole[start + len(value):]

        return compiled.sub(name, text)

    return apply


# What every tool's output may carry: log4j's line timestamp, Kafka UUIDs (topic ids, and the
# UUIDs in member ids), and the process-unique suffixes of generated group and client names.
LOG_TIME = replace(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]", "[<time>]")
TOPIC_ID = rename(r"TopicId: ([A-Za-z0-9_-]{22})\b", "topic-id", group=1)
MEMBER_UUID = rename(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "uuid")
CONSOLE_GROUP = rename(r"\bconsole-consumer-\d+\b", "console-group")
BASE_RULES: tuple[Rule, ...] = (LOG_TIME, TOPIC_ID, MEMBER_UUID, CONSOLE_GROUP)


def mask(text: str, target: ToolTarget, rules: Iterable[Rule] = ()) -> str:
    for literal, name in target.literal_masks():
        text = text.replace(literal, name)
    for rule in (*BASE_RULES, *rules):
        text = rule(text)
    return text


@dataclass
class ToolPair:
    """The two brokers under comparison; `run` runs one invocation against both at once."""

    kbroker: ToolTarget
    kafka: ToolTarget
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2))

    def run(self, tool: str, *args: str, input: str | None = None, timeout: float = TOOL_TIMEOUT_S) -> PairResult:
        futures = [self._pool.submit(t.run, tool, *args, input=input, timeout=timeout)
                   for t in (self.kbroker, self.kafka)]
        return PairResult(futures[0].result(), futures[1].result())

    def both(self, call: Callable[[ToolTarget], object]) -> None:
        """Run `call` (a setup step) for each target, in parallel."""
        for future in [self._pool.submit(call, t) for t in (self.kbroker, self.kafka)]:
            future.result()

    def masked(self, result: PairResult, rules: Iterable[Rule] = ()) -> tuple[ToolResult, ToolResult]:
        rules = list(rules)
        return (ToolResult(result.kbroker.returncode, mask(result.kbroker.stdout, self.kbroker, rules),
                           mask(result.kbroker.stderr, self.kbroker, rules)),
                ToolResult(result.kafka.returncode, mask(result.kafka.stdout, self.kafka, rules),
                           mask(result.kafka.stderr, self.kafka, rules)))

    def assert_same(self, tool: str, *args: str, input: str | None = None, rules: Iterable[Rule] = (),
                    stderr: bool = True, timeout: float = TOOL_TIMEOUT_S) -> tuple[ToolResult, ToolResult]:
        """Run on both and require the same exit code, stdout and (unless told) stderr, masked.
        Returns the masked results (kbroker, kafka) for further checks."""
        result = self.run(tool, *args, input=input, timeout=timeout)
        kbroker, kafka = self.masked(result, rules)
        assert_same_results(kbroker, kafka, f"{tool} {' '.join(args)}", stderr=stderr)
        return kbroker, kafka

    def close(self) -> None:
        self._pool.shutdown()


def assert_same_results(kbroker: ToolResult, kafka: ToolResult, what: str, stderr: bool = True) -> None:
    problems = []
    if kbroker.returncode != kafka.returncode:
        problems.append(f"exit code: kbroker {kbroker.returncode}, kafka {kafka.returncode}")
    for stream in ("stdout", "stderr") if stderr else ("stdout",):
        ours, theirs = getattr(kbroker, stream), getattr(kafka, stream)
        if ours != theirs:
            diff = difflib.unified_diff(theirs.splitlines(), ours.splitlines(), "kafka", "kbroker", lineterm="")
            problems.append(f"{stream} differs:\n" + "\n".join(diff))
    assert not problems, f"{what}\n" + "\n".join(problems) + (
        f"\n=== kbroker\n{kbroker.describe()}\n=== kafka\n{kafka.describe()}")


def rows(text: str) -> list[str]:
    """The non-blank lines, whitespace runs collapsed: for tables whose column widths or row
    order carry no meaning."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def rename_column(index: int, label: str, separator: str = "\t") -> Rule:
    """In a table of `separator`-separated cells (header first), each distinct value of column
    `index` becomes <label-N>, numbered by first appearance, padded to the header's width (the
    padding of the value itself depends on its length, e.g. a duration's number of digits)."""

    def apply(text: str) -> str:
        seen: dict[str, str] = {}
        lines = text.split("\n")
        header = lines[0].split(separator)
        width = len(header[index]) if len(header) > index else 0
        for number, line in enumerate(lines[1:], start=1):
            cells = line.split(separator)
            if len(cells) > index and cells[index].strip():
                value = cells[index].strip()
                seen.setdefault(value, f"<{label}-{len(seen) + 1}>")
                cells[index] = seen[value].ljust(width)
                lines[number] = separator.join(cells)
        return "\n".join(lines)

    return apply

"""The kill of `kbroker bench delayed --part lateness --kill broker|leader` (kbroker/bench/delayed.py).

A `Killer` runs beside the lateness run's workers, in a thread of the bench process (it needs the
broker processes, which are this process's children):

- **broker** (one broker): at `--kill-at-s` after the workers' release, kill -9 the broker and
  start it again on the same data at once;
- **leader** (a cluster, rf = brokers): at that time, kill -9 the broker leading most of the
  topic's partitions (the lowest id on a tie), wait until every partition serves again without
  it, then start it again and wait until it is back in every partition's ISR.

A partition **serves** when its leader and every replica of its ISR run: it can append and
commit again (a dead replica left in the ISR holds the high watermark, and with it the
deliveries, on partitions the killed broker did not even lead). The **outage window** of a
partition runs from the kill until it is first seen serving (metadata polled every `POLL_S` from
a running broker) plus `margin_s`, which covers the clients' reconnection and the backlog of
what fell due meanwhile. A record is **in** its partition's window when it was due before the
window's end and had not reached the consumer at the kill (a delivery the kill caught counts
in, though due before it); every other record is outside.

Times are wall-clock milliseconds, as the records' due times are.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from kbroker.bench.benchmarks import BenchError
from kbroker.bench.servers import KbrokerClusterServer, KbrokerServer, Server
from kbroker.client import Client
from protocol.errors import KafkaError

KILLS = ("none", "broker", "leader")
POLL_S = 0.05  # nothing pushes the cluster's state to the bench: it polls metadata
WATCH_S = 0.25  # after the recovery: slower polls that still see a later leadership move
LOAD_EVERY_S = 1.0
RECOVERY_TIMEOUT_S = 300.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class PartitionState:
    leader: int
    isr: tuple[int, ...]

    def serves(self, alive: set[int]) -> bool:
        return self.leader in alive and set(self.isr) <= alive


class _Brokers:
    """Kill, start and list the running brokers of a single broker or of a cluster."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.single_id = -1  # a single broker's id, learnt from its metadata before the kill

    def alive(self) -> dict[int, str]:
        server = self.server
        if isinstance(server, KbrokerClusterServer):
            return server.live_addresses()
        assert isinstance(server, KbrokerServer)
        return {self.single_id: server.bootstrap} if server.pid is not None else {}

    def kill(self, broker_id: int) -> None:
        if isinstance(self.server, KbrokerClusterServer):
            self.server.kill_broker(broker_id)
        else:
            assert isinstance(self.server, KbrokerServer)
            self.server.kill()

    def start(self, broker_id: int) -> float:
        if isinstance(self.server, KbrokerClusterServer):
            return self.server.start_broker(broker_id)
        assert isinstance(self.server, KbrokerServer)
        return self.server.start()


class _Metadata:
    """The topic's leaders and ISRs, asked of a running broker over one connection, opened again
    (to another running broker) when it fails."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._client: Client | None = None

    def states(self, addresses: dict[int, str]) -> dict[int, PartitionState] | None:
        """partition -> state, or None when no running broker answered."""
        for address in addresses.values():
            try:
                if self._client is None:
                    self._client = Client(address, client_id="kbroker-bench-kill", timeout=5)
                meta = self._client.metadata([self.topic], refresh=True).topic(self.topic)
                return {i: PartitionState(p.leader, tuple(sorted(set(p.isr))))
                        for i, p in meta.partitions.items()}
            except (KafkaError, OSError):
                self.close()
        return None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class Killer:
    """Kills a broker during a lateness run and records when its partitions came back.

    `release` (run_workers' before_start) starts the clock; `finish`, once the workers are done,
    ends the watch and returns what happened (raising what went wrong in the thread).
    """

    def __init__(self, server: Server, how: str, topic: str, kill_at_s: float, margin_s: float) -> None:
        if how == "broker" and not isinstance(server, KbrokerServer):
            raise BenchError("--kill broker kills a single broker: use --brokers 1")
        if how == "leader" and not isinstance(server, KbrokerClusterServer):
            raise BenchError("--kill leader kills a cluster's leader: use --brokers 3")
        self.how = how
        self.kill_at_s = kill_at_s
        self.margin_s = margin_s
        self._brokers = _Brokers(server)
        self._metadata = _Metadata(topic)
        self._released = threading.Event()
        self._finished = threading.Event()
        self._error: BaseException | None = None
        self._last: dict[int, PartitionState] = {}
        self._loads: list[float] = []
        self._next_load = 0.0
        self.result: dict[str, Any] = {"how": how, "kill_at_s": kill_at_s, "margin_s": margin_s}
        self._thread = threading.Thread(target=self._main, name="kbroker-bench-kill", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self.result["released_ms"] = now_ms()
        self._released.set()

    def finish(self) -> dict[str, Any]:
        self._finished.set()
        self._released.set()
        self._thread.join()
        self._metadata.close()
        if self._error is not None:
            raise BenchError(f"the kill went wrong: {self._error!r}") from self._error
        if "kill_ms" not in self.result:
            raise BenchError(f"the run ended before the kill, due at {self.kill_at_s:g} s: lower --kill-at-s")
        if self._loads:
            self.result["load_average"] = {"min": min(self._loads), "max": max(self._loads)}
        return self.result

    def windows(self) -> dict[int, tuple[int, int]]:
        """partition -> its outage window (start, end) in wall ms."""
        kill = self.result["kill_ms"]
        margin = round(self.margin_s * 1000)
        return {p: (kill, at + margin) for p, at in self.result["serving_ms"].items()}

    # -- the thread ---------------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._released.wait()
            if self._wait(self.kill_at_s):
                return  # the run ended (or failed) before the kill was due
            self._kill_and_recover()
            while not self._wait(WATCH_S):
                self._poll()
        except BaseException as e:  # handed to the main thread by finish()
            self._error = e

    def _wait(self, seconds: float) -> bool:
        """Wait `seconds` unless the run finishes first (True then), sampling the load meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._sample_load()
            if self._finished.wait(min(left, LOAD_EVERY_S)):
                return True
        self._sample_load()
        return self._finished.is_set()

    def _sample_load(self) -> None:
        if time.monotonic() >= self._next_load:
            self._next_load = time.monotonic() + LOAD_EVERY_S
            self._loads.append(round(os.getloadavg()[0], 2))

    def _kill_and_recover(self) -> None:
        before = self._states_now()
        victim = self._victim(before)
        r = self.result
        r.update({"victim": victim, "before": _jsonable(before),
                  "led": sorted(p for p, s in before.items() if s.leader == victim)})
        r["kill_ms"] = kill_ms = now_ms()
        self._brokers.kill(victim)
        if self.how == "broker":
            r["ready_s"] = round(self._brokers.start(victim), 3)  # started again at once, same data
            r["ready_after_kill_s"] = _since(kill_ms)
        serving = self._until_serving()
        r["serving_ms"] = serving
        r["serving_after_kill_s"] = {p: round((at - kill_ms) / 1000, 3) for p, at in serving.items()}
        if self.how == "leader":
            restarted_ms = now_ms()
            r["restarted_after_kill_s"] = _since(kill_ms)
            r["ready_s"] = round(self._brokers.start(victim), 3)
            r["rejoined_after_kill_s"] = self._until_rejoined(victim, kill_ms)
            r["rejoin_s"] = _since(restarted_ms)

    def _victim(self, states: dict[int, PartitionState]) -> int:
        """The broker leading most partitions (the lowest id on a tie); a single broker is itself."""
        counts: dict[int, int] = {}
        for state in states.values():
            counts[state.leader] = counts.get(state.leader, 0) + 1
        victim = min(counts, key=lambda b: (-counts[b], b))
        if self.how == "broker":
            self._brokers.single_id = victim
        return victim

    def _states_now(self) -> dict[int, PartitionState]:
        states = self._metadata.states(self._brokers.alive())
        if states is None or any(s.leader < 0 for s in states.values()):
            raise BenchError(f"no leaders to kill: {states}")
        self._last = states
        return states

    def _poll(self) -> dict[int, PartitionState] | None:
        """The states now (None: no answer), with each partition's change logged."""
        states = self._metadata.states(self._brokers.alive())
        if states is None:
            return None
        kill_ms = self.result.get("kill_ms")
        for p, state in sorted(states.items()):
            if self._last.get(p) != state and kill_ms is not None:
                change = {"after_kill_s": _since(kill_ms), "partition": p, "leader": state.leader,
                          "isr": list(state.isr)}
                self.result.setdefault("changes", []).append(change)
        self._last = states
        return states

    def _until_serving(self) -> dict[int, int]:
        """partition -> the wall ms it was first seen serving after the kill."""
        serving: dict[int, int] = {}
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            states = self._poll()
            alive = set(self._brokers.alive())
            for p, state in (states or {}).items():
                if p not in serving and state.serves(alive):
                    serving[p] = now_ms()
            if states is not None and len(serving) == len(states):
                return serving
            if time.monotonic() > deadline:
                raise BenchError(f"partitions not serving {RECOVERY_TIMEOUT_S:g} s after the kill: {states}")
            self._sample_load()
            time.sleep(POLL_S)

    def _until_rejoined(self, victim: int, kill_ms: int) -> float:
        """Seconds from the kill until the restarted broker is in every partition's ISR."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            states = self._poll()
            if states is not None and all(victim in s.isr for s in states.values()):
                return _since(kill_ms)
            if time.monotonic() > deadline:
                raise BenchError(f"broker {victim} not back in the ISRs after {RECOVERY_TIMEOUT_S:g} s")
            self._sample_load()
            time.sleep(POLL_S)


def _since(start_ms: int) -> float:
    return round((now_ms() - start_ms) / 1000, 3)


def _jsonable(states: dict[int, PartitionState]) -> dict[str, Any]:
    return {str(p): {"leader": s.leader, "isr": list(s.isr)} for p, s in sorted(states.items())}


@contextmanager
def killing(killer: Killer | None) -> Iterator[None]:
    """The killer stopped whatever happens to the run it watches."""
    try:
        yield
    except BaseException:
        if killer is not None:
            with suppress(BenchError):  # the run's own failure says more
                killer.finish()
        raise

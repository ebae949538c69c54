"""The seeded driver: one cluster of simulated nodes, a manual clock, random events.

Everything runs in one event loop per seed. The driver advances the shared
:class:`ManualClock` by ``step_s``, expires leases, lets the loop run a bounded number of
turns (``await asyncio.sleep(0)``) and checks the invariants (:mod:`sim._check`). Before each
step it may inject one event, drawn from ``random.Random(seed)``:

* join: a new node (id ``n{k}``), or a crashed or departed id coming back as a new process,
  with a wall-clock skew of up to ``max_skew_ms`` (well inside the ownership limit);
* crash: the gate closes for good; nothing is released, the lease expires on the clock;
* pause: the gate closes for 0.5..3 TTLs, then opens again (a zombie when past its lease);
* cut off: for 0.5..3 TTLs every call of the node fails (sent or not) and its watches break,
  while the node runs on;
* leave: ``release_all``, then membership and session close;
* faults: ``kv.faults = FaultPlan(...)`` with random chances of failing writes before and
  after they apply and failing reads, for 1..2 TTLs.

After ``steps`` the faults stop, paused nodes resume, cut-off nodes reconnect, a node joins
if none is up, and the cluster runs ``quiet_ttls`` session TTLs without events; then the
ownership part of the liveness invariant is checked, and three work intervals later that every
fire due by then is done. The trace (events and what nodes reported, with clock time
and store revision) and a digest of the store's revisions and owners at every step make a
seed's run comparable.

What is not simulated: partial partitions (a node reaching some store members but not
others; MemoryKV is one linearizable store), message delay beyond one loop turn, watches
that lag (they break, with the store faults), compaction, and clock drift (skew is fixed
per process); per-node skew stays within the ownership limit unless ``max_skew_ms`` says
otherwise. The node's partition runners are reduced to the
ledger workload of :mod:`sim._node` and the model of claiming and re-tokening of
:mod:`sim._fires`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from dataclasses import dataclass, field

from schedd._clock import ManualClock
from schedd.store import FaultPlan, MemoryKV
from sim._check import Checker, Violation
from sim._node import NodeParams, SimNode


@dataclass(frozen=True)
class SimConfig:
    """Shape of one simulated run."""

    min_nodes: int = 3
    max_nodes: int = 5
    partitions: int = 8
    steps: int = 60
    step_s: float = 0.5
    quiet_ttls: int = 4
    loop_turns: int = 10
    max_skew_ms: int = 100
    p_join: float = 0.03
    p_crash: float = 0.012
    p_pause: float = 0.02
    p_leave: float = 0.012
    p_faults: float = 0.03
    p_cut: float = 0.03
    ttl_s: int = 3


@dataclass
class SimResult:
    """What one seed did: its trace, digest, and the violation that stopped it (if any)."""

    seed: int
    trace: list[str] = field(default_factory=list)
    digest: str = ""
    violation: str = ""
    ledger_writes: int = 0
    fenced_out: int = 0
    slowest_learn_s: float = 0.0

    def report(self) -> str:
        lines = [
            f"simulation seed {self.seed} failed: {self.violation}",
            f"replay: SCHEDD_SIM_SEED={self.seed} pytest tests/sim -k replay -s",
            "trace:",
            *(f"  {line}" for line in self.trace),
        ]
        return "\n".join(lines)


class Simulation:
    """One seed's cluster and driver (see the module docstring)."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.clock = ManualClock(1_700_000_000_000)
        self._t0 = self.clock.monotonic()
        self.params = NodeParams(config.partitions, ttl_s=config.ttl_s, start_s=self._t0)
        self.kv = MemoryKV(clock=self.clock)
        # A fenced-out belief is dropped at the session's next keep-alive at the latest.
        self.checker = Checker(self.kv, config.partitions, learn_bound_s=config.ttl_s / 3)
        self.nodes: dict[str, SimNode] = {}
        self._gone: list[SimNode] = []  # replaced by a new process of the same id, halted last
        self.result = SimResult(seed)
        self._digest = hashlib.sha256()
        self._faults_until = 0.0
        self.errors: list[str] = []  # ERROR records of the schedd loggers (see run_seed)
        self._next_id = 0

    def trace(self, what: str) -> None:
        self.result.trace.append(
            f"{self.clock.monotonic() - self._t0:7.2f}s r{self.kv.revision:<5} {what}"
        )

    async def run(self) -> SimResult:
        c = self.config
        try:
            for _ in range(c.min_nodes):
                self._join()
            for _ in range(c.steps):
                self._maybe_event()
                await self._step()
            self._settle()
            for _ in range(round(c.quiet_ttls * c.ttl_s / c.step_s)):
                await self._step()
            self.checker.check_settled(list(self.nodes.values()))
            # Settled owners re-token within a work interval, claim within the next and
            # see results within the one after: every fire due by now is done by then.
            fires_due = self._fires_due()
            for _ in range(round(3 * self.params.work_interval_s / c.step_s) + 2):
                await self._step()
            self.checker.check_fires_done(fires_due)
        except Violation as exc:
            self.result.violation = str(exc)
        except Exception as exc:  # a bug of the harness (or one it provoked): report the seed
            self.result.violation = f"unexpected {type(exc).__name__}: {exc}"
        if died := self._died():  # the root cause, when there is one
            then = f" (then: {self.result.violation})" if self.result.violation else ""
            self.result.violation = died + then
        if self.result.violation:
            self.trace(f"VIOLATION {self.result.violation}")
        await self._halt()
        self.result.digest = self._digest.hexdigest()
        self.result.ledger_writes = self.checker.ledger_writes
        self.result.fenced_out = sum(n.stats.fenced_out for n in self.nodes.values())
        self.result.slowest_learn_s = self.checker.slowest_learn_s
        return self.result

    async def _step(self) -> None:
        c = self.config
        now = self.clock.monotonic()
        for node in self.nodes.values():
            if node.gate.is_open():
                node.running_s += c.step_s
            if node.status == "paused" and node.paused_until <= now:
                node.resume()
                self.trace(f"resume {node.node_id}")
            if node.kv.cut_off and node.cut_until <= now:
                node.kv.cut_off = False
                self.trace(f"reconnect {node.node_id}")
        if self.kv.faults is not None and self._faults_until <= now:
            self.kv.faults = None
            self.trace("faults off")
        self.clock.advance(c.step_s)
        self.kv.expire_leases()
        for _ in range(c.loop_turns):
            await asyncio.sleep(0)
        self.checker.observe()
        self.checker.check_beliefs(list(self.nodes.values()))
        owners = sorted((p, kv.create_revision) for p, kv in self.checker.owners.items())
        self._digest.update(f"{self.kv.revision}{owners}".encode())

    def _died(self) -> str:
        """A node process that ended by an exception, or an error the coordination logged."""
        for node in [*self._gone, *self.nodes.values()]:
            for task in (node.task, node.work):
                if task and task.done() and not task.cancelled() and task.exception():
                    return f"{node.node_id} died: {task.exception()!r}"
        if self.errors:
            return f"the coordination logged an error: {self.errors[0]}"
        return ""

    def _fires_due(self) -> int:
        """How many fires per partition are due by now."""
        return int((self.clock.monotonic() - self._t0) // self.params.fire_every_s) + 1

    async def _halt(self) -> None:
        """Ends every node's tasks (so the loop closes cleanly): gates halt, tasks cancel."""
        for node in [*self._gone, *self.nodes.values()]:
            node.gate.halt()
        me = asyncio.current_task()
        for _ in range(3):
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- events ---------------------------------------------------------------------------------

    def _maybe_event(self) -> None:
        c, rng = self.config, self.rng
        draw = rng.random()
        for chance, event in (
            (c.p_join, self._join),
            (c.p_crash, self._crash),
            (c.p_pause, self._pause),
            (c.p_leave, self._leave),
            (c.p_faults, self._faults),
            (c.p_cut, self._cut),
        ):
            if draw < chance:
                event()
                return
            draw -= chance

    def _running(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.status in ("joining", "up")]

    def _join(self) -> None:
        if len(self._running()) >= self.config.max_nodes:
            return
        gone = [i for i, n in self.nodes.items() if n.status in ("crashed", "left")]
        if gone and self.rng.random() < 0.5:
            node_id = self.rng.choice(gone)
        else:
            node_id = f"n{self._next_id}"
            self._next_id += 1
        skew = self.rng.randint(-self.config.max_skew_ms, self.config.max_skew_ms)
        self.trace(f"join {node_id} skew={skew:+d}ms")
        if node_id in self.nodes:
            self._gone.append(self.nodes[node_id])
        self.nodes[node_id] = SimNode(
            node_id, self.kv, self.clock, self.params, skew_ms=skew, trace=self.trace
        )

    def _pick(self) -> SimNode | None:
        up = [n for n in self.nodes.values() if n.status == "up"]
        return self.rng.choice(up) if up else None

    def _crash(self) -> None:
        if node := self._pick():
            self.trace(f"crash {node.node_id}")
            node.crash()

    def _pause(self) -> None:
        if node := self._pick():
            pause_s = self.rng.uniform(0.5, 3.0) * self.config.ttl_s
            self.trace(f"pause {node.node_id} for {pause_s:.2f}s")
            node.pause(self.clock.monotonic() + pause_s)

    def _cut(self) -> None:
        if node := self._pick():
            cut_s = self.rng.uniform(0.5, 3.0) * self.config.ttl_s
            self.trace(f"cut off {node.node_id} for {cut_s:.2f}s")
            node.kv.cut_off, node.cut_until = True, self.clock.monotonic() + cut_s

    def _leave(self) -> None:
        if node := self._pick():
            self.trace(f"leave {node.node_id}")
            node.leave()

    def _faults(self) -> None:
        if self.kv.faults is not None:
            return
        rng = self.rng
        plan = FaultPlan(
            random.Random(rng.getrandbits(32)),
            fail_before=rng.choice((0.0, 0.1, 0.3)),
            fail_after=rng.choice((0.0, 0.1, 0.3)),
            fail_reads=rng.choice((0.0, 0.1, 0.3)),
            break_watches=rng.choice((0.0, 0.1, 0.3)),
        )
        span = rng.uniform(1.0, 2.0) * self.config.ttl_s
        self._faults_until = self.clock.monotonic() + span
        self.kv.faults = plan
        self.trace(
            f"faults before={plan.fail_before} after={plan.fail_after} "
            f"reads={plan.fail_reads} watches={plan.break_watches} for {span:.2f}s"
        )

    def _settle(self) -> None:
        self.trace("quiet: faults off, paused nodes resume, no more events")
        self.kv.faults = None
        for node in self.nodes.values():
            if node.status == "paused":
                node.resume()
            node.kv.cut_off = False
        if not self._running():
            self._join()


class _Errors(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


def run_seed(seed: int, config: SimConfig | None = None) -> SimResult:
    """Runs one seed in a fresh event loop. The coordination's logs below ERROR are silenced
    (faults make them chatty); an ERROR (a failed callback, a dead loop) fails the seed."""
    sim = Simulation(seed, config or SimConfig())
    schedd_log = logging.getLogger("schedd")
    level = schedd_log.level
    handler = _Errors(sim.errors)
    schedd_log.setLevel(logging.ERROR)
    schedd_log.addHandler(handler)
    try:
        return asyncio.run(sim.run())
    finally:
        schedd_log.removeHandler(handler)
        schedd_log.setLevel(level)


__all__ = ["SimConfig", "SimResult", "Simulation", "run_seed"]


def failing_seeds(first: int, end: int) -> list[SimResult]:
    """Runs seeds ``first..end-1``; returns the failing ones (for a worker process)."""
    return [r for r in (run_seed(s) for s in range(first, end)) if r.violation]

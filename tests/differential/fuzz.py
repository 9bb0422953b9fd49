"""A differential fuzzer: seeded random steps on two targets, compared after every step.

The named traces (`differential.traces`) find what someone thought of; this finds the rest.
A *step* is one thing the outside world does to a switch, as a small JSON object:

- ``{"do": "frame", "port": 2, "frame": "<hex>", "what": "..."}``: a frame comes in on a port
  (an INA contribution, JOIN, retransmission, a parent's reply, a malformed or plain L2 frame,
  the replay of an earlier one; ``what`` is for people);
- ``{"do": "group", "update": "INSERT" | "MODIFY" | "DELETE", "group": 10,
  "replicas": [[port, rid], ...]}``: a multicast group written over P4Runtime;
- ``{"do": "parent", "update": "INSERT" | "DELETE", "job": 6, "worker_id": 1, "port": 5}``:
  a ``parent_table`` entry (to the parent on that port, the topology's host 5);
- ``{"do": "install", "job": 1}`` / ``{"do": "remove", "job": 1}``: the topology's job, with
  ``ina.control.jobs.install_job`` / ``remove_job``;
- ``{"do": "read"}``: a wide read, every ``worker_contributions`` cell and every slot register
  cell of the installed pools (the per-step comparison reads a sample).

`Differential` runs steps on a clean switch of two targets (the reference is the switch model
in this process) and, after every step, compares what it saw on each: the step's status
(``OK`` or the P4Runtime codes of a failed write), the frames each egress port sent, in order,
byte for byte, ``ina_stats`` and the ``worker_contributions`` cells of the step's job, and the
registers that matter (`REGISTERS_OF_RUNS` and ``join_nonce`` of the step's job, and
`SLOT_REGISTERS` at the cells the step touched and one more cell per step in turn; see
`Differential._observe`). The other target is read over P4Runtime (registers over Thrift on
BMv2, which has no P4Runtime register reads), the reference from its pipeline.

`Generator` makes the steps from a seed, one at a time: it reads the reference model's state
(installed jobs, groups, parent entries, each job's run epoch and a leaf's ``up_nonce``) so
that most packets are the ones a switch meets (data of the current run near a moving window,
JOIN rounds that complete runs, a parent's answer with the right nonce) and the rest is wrong
on purpose. A seeded generator rather than hypothesis's stateful testing, because a step here
costs a packet or a Write on a real switch: one long sequence per seed (the issue asks for
2,000 steps per seed; hypothesis's stateful examples are short, 50 steps by default),
steps that are data (a saved difference replays without the generator, unchanged when the
generator changes), and a deterministic run per seed; `shrink` (delta debugging) does what
hypothesis's shrinker would.

`fuzz` runs one seed and, at the first difference, `shrink` cuts the steps to a minimal list
that still differs in the same way; `save` writes it under ``regressions/`` as JSON and
`replay` runs such a file. docs/testing.md, "The fuzzer", has the commands.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from ina.control.jobs import _parent_entity, install_job, remove_job, run_thrift_cli
from ina.control.p4rt import DELETE, INSERT, MODIFY, P4RuntimeError
from ina.p4.entities import REGISTERS
from ina.protocol import MAX_WORKERS, P4_LANES, UDP_PORT, Counter, Flag, Op
from ina.scapy_layer import INA
from ina.switch_model.tables import JobEntry, ParentEntry, WorkerAddress

from .targets import ModelTarget, Replay, Target, VethTarget, differences, install_topology
from .traces import Topology, TraceBuilder

REGRESSIONS = Path(__file__).parent / "regressions"
UPDATES = {"INSERT": INSERT, "MODIFY": MODIFY, "DELETE": DELETE}
REGISTERS_OF_RUNS = ("job_epoch", "join_bitmap", "join_count", "up_nonce", "up_joined")
SLOT_REGISTERS = (  # the slot registers compared; lanes, exp and level show in the results too
    "slot_count",  # first: the others matter only where it is not 0 (`_mask_unused_copies`)
    "slot_seq",
    "slot_bitmap",
    "slot_epoch",
    "slot_down",
    "slot_exp",
    "slot_lane_0",
)
SPARE_GROUP = 12  # a group no job uses
SPARE_POOLS = (40, 64, 100)  # pool bases no job of the topology uses (each fits all)
SEQ_MASK = (1 << 32) - 1
NONCES = (0x11, 0x22, 0x33, 0x44)
UNKNOWN_JOB = 77
BMV2_REGISTER_EVERY = 25  # BMv2 reads registers over Thrift, a process each: every 25 steps


Step = dict  # one step, JSON (module docstring)


# -- observing a target ------------------------------------------------------------------------


@dataclass
class Observation:
    """What one step did on one target."""

    status: str  # "OK", or the sorted P4Runtime codes (or exception) of a failed step
    outputs: dict[int, list[bytes]]  # egress port -> frames, in order
    counters: dict[str, tuple[int, int]] = field(default_factory=dict)
    # "name[index]" -> value; None: not read after this step (BMv2, `BMV2_REGISTER_EVERY`)
    registers: dict[str, int] | None = field(default_factory=dict)


def _status(fn: Callable[[], object]) -> str:
    try:
        fn()
    except P4RuntimeError as e:
        return "/".join(sorted(c.name for c in e.codes)) or "P4RuntimeError"
    except (RuntimeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return "OK"


def run_frames(target: Target, frames: list[tuple[int, bytes]], topo: Topology):
    """Frames one at a time; on veths, each followed by a probe per port (`run_flushed`), so
    that no quiet wait is needed to know that every output is out."""
    if isinstance(target, VethTarget):
        return target.run_flushed(frames, {h.port: h.mac for h in topo.hosts})
    return target.run(frames)


Cell = tuple[str, int | None]  # (counter or register, index); None: every cell (counters)


def read_state(
    target: Target, counters: list[Cell], registers: list[Cell], in_process: bool = False
) -> dict:
    """Counter and register cells in one P4Runtime Read: ``{"name[index]": value}``, a
    counter's value (packets, bytes) and ``ina_stats`` cells by their `Counter` name; cells
    at zero are left out. On BMv2, whose P4Runtime server has no register reads
    (UNIMPLEMENTED), the registers come over Thrift (``register_read``, one
    ``simple_switch_CLI`` session; wildcards are not supported there). ``in_process``: a
    `ModelTarget` read from its pipeline (`_read_in_process`)."""
    if in_process:
        return _read_in_process(target, counters, registers)
    conn = target.conn
    queries = [conn.counter_entry(n, i) for n, i in counters]
    thrift = target.thrift_port is not None
    if not thrift:
        queries += [conn.register_entry(n, i) for n, i in registers]
    p4 = conn.p4
    counter_names = {p4.counters[n].preamble.id: n for n, _ in counters}
    register_names = {p4.registers[n].preamble.id: n for n, _ in registers}
    out: dict = {}
    for e in conn.read(queries) if queries else ():
        if e.HasField("counter_entry"):
            ce = e.counter_entry
            value = (ce.data.packet_count, ce.data.byte_count)
            if value != (0, 0):
                out[_counter_key(counter_names[ce.counter_id], ce.index.index)] = value
        else:
            r = e.register_entry
            value = int.from_bytes(r.data.bitstring, "big")
            if value:
                out[f"{register_names[r.register_id]}[{r.index.index}]"] = value
    if thrift and registers:
        cmds = [f"register_read {n} {i}" for n, i in registers if i is not None]
        text = run_thrift_cli(cmds, target.thrift_port)
        for n, i, v in re.findall(r"(\w+)\[(\d+)\]\s*=\s*(\d+)", text):
            if int(v):
                out[f"{n}[{i}]"] = int(v)
    return out


def _counter_key(name: str, index: int) -> str:
    if name == "ina_stats" and index < len(Counter):
        return Counter(index).name.lower()
    return f"{name}[{index}]"


_REGISTER_BITS = {r.name: r.bits for r in REGISTERS}


def _read_in_process(target: ModelTarget, counters: list[Cell], registers: list[Cell]) -> dict:
    """`read_state` of the model in this process, from its pipeline: what its P4Runtime
    service would answer (the same cells, unsigned, at the register's width) in 0.1 ms
    instead of ~20 ms (the service encodes every queried cell on its own). The other target
    is read over P4Runtime, so the model's P4Runtime reads are compared too."""
    p = target.frames.pipeline
    out: dict = {}
    with target.lock:
        for name, i in counters:
            lo, hi = (0, p.counters.size(name)) if i is None else (i, i + 1)
            for k, (packets, nbytes) in enumerate(p.counters.read(name, lo, hi).tolist(), lo):
                if packets or nbytes:
                    out[_counter_key(name, k)] = (packets, nbytes)
        for name, i in registers:
            if name.startswith("slot_lane_"):
                lane = int(name.removeprefix("slot_lane_"))
                value = int(p.registers.values[i, lane]) if lane < p.registers.lanes else 0
            else:
                value = int(p.register_cells(name)[i])
            value &= (1 << _REGISTER_BITS[name]) - 1
            if value:
                out[f"{name}[{i}]"] = value
    return out


def clean(target: Target) -> None:
    """A clean switch: every multicast group deleted (BMv2 keeps its replication engine's
    groups across a pipeline push, docs/testing.md), then the target's own reset. The model
    in this process needs only the push, which clears everything there."""
    conn = target.conn
    if isinstance(target, ModelTarget):
        conn.push_pipeline()
        return
    groups = conn.read([conn.multicast_group(0)])
    conn.write([conn.update(DELETE, g) for g in groups])
    target.reset()


# -- running steps on two targets --------------------------------------------------------------


class Differential:
    """The ``reference`` and the ``other`` target, driven by the same steps from a clean
    switch with the topology installed, compared after every step (module docstring)."""

    def __init__(
        self,
        topo: Topology,
        reference: ModelTarget,
        other: Target,
        other_in_process: bool = False,
    ) -> None:
        """``other_in_process``: read ``other`` (a `ModelTarget`) from its pipeline, as the
        reference always is, rather than over P4Runtime (20 ms a step)."""
        self.topo = topo
        self.in_process = (True, other_in_process)
        self.targets = (reference, other)
        self.reference = reference
        self.other = other
        self.jobs = {j.job_id: j for j in topo.jobs}
        self.steps_done = 0
        self.frames_compared = 0  # frames that left the reference, all steps

    def start(self) -> None:
        for t in self.targets:
            clean(t)
            install_topology(t.conn, self.topo)  # right after a reset: pools are zero
        self.steps_done = 0

    def step(self, step: Step) -> list[str]:
        """Run ``step`` on both targets; the differences seen after it."""
        seen = [self._do(t, step) for t in self.targets]
        self._observe(step, seen)
        self.steps_done += 1
        self.frames_compared += sum(len(f) for f in seen[0].outputs.values())
        return compare(*seen, self.other.name)

    def run(self, steps: list[Step]) -> tuple[int, list[str]] | None:
        """From a clean switch: the index of the first step after which the targets differ,
        and the differences; None if they never do."""
        self.start()
        for i, s in enumerate(steps):
            diffs = self.step(s)
            if diffs:
                return i, diffs
        return None

    # -- one step --------------------------------------------------------------------------

    def _do(self, target: Target, step: Step) -> Observation:
        conn = target.conn
        kind = step["do"]
        if kind == "frame":
            frame = (int(step["port"]), bytes.fromhex(step["frame"]))
            return Observation("OK", run_frames(target, [frame], self.topo))
        if kind == "group":
            replicas = [tuple(r) for r in step.get("replicas", ())]
            entity = conn.multicast_group(step["group"], replicas)
            update = conn.update(UPDATES[step["update"]], entity)
            return Observation(_status(lambda: conn.write([update])), {})
        if kind == "parent":
            spec = self.jobs[step["job"]]
            host = next(h for h in self.topo.hosts if h.port == step["port"])
            entry = ParentEntry(
                spec.job_id, step["worker_id"], host.ip, UDP_PORT, host.mac, host.port
            )
            update = conn.update(UPDATES[step["update"]], _parent_entity(conn, entry))
            return Observation(_status(lambda: conn.write([update])), {})
        if kind == "install":  # the topology's job, maybe on another pool
            spec = self.jobs[step["job"]]
            spec = replace(spec, pool_base=step.get("pool_base", spec.pool_base))
            return Observation(
                _status(lambda: install_job(conn, spec, thrift_port=target.thrift_port)), {}
            )
        if kind == "remove":
            return Observation(_status(lambda: remove_job(conn, step["job"])), {})
        if kind == "read":
            return Observation("OK", {})
        raise ValueError(f"unknown step {step!r}")

    # -- what is compared after it ---------------------------------------------------------
    #
    # A step changes only the cells of the job it concerns: worker_contributions[job_index]
    # [worker], the job's run registers and its workers' join_nonce, the slot copies its
    # frame names (both copies: a contribution clears its bit in the other). So those are
    # read after it, with all of ina_stats and one more slot copy in turn (every cell of the
    # installed pools, round and round); a "read" step reads every cell. Each cell is
    # compared only while it matters (`_installed`, `_mask_unused_copies`).

    def _observe(self, step: Step, seen: list[Observation]) -> None:
        """Counters and registers of both targets, into their observations."""
        installed = self._installed()
        pools = sorted(c for j in installed for c in self._pool(j))
        if step["do"] == "read":
            counters: list[Cell] = [("ina_stats", None), ("worker_contributions", None)]
            jobs, cells = installed, pools
        else:
            job, slot = self._concerns(step)
            counters = [("ina_stats", None)]
            counters += [("worker_contributions", c) for c in self._worker_cells(job, step)]
            jobs = [j for j in installed if job is not None and j.job_id == job]
            near = {2 * slot, 2 * slot + 1} if slot is not None else set()
            if pools:
                near.add(pools[self.steps_done % len(pools)])
            cells = sorted(near & set(pools))
        registers: list[Cell] = [(n, j.job_index) for j in jobs for n in REGISTERS_OF_RUNS]
        registers += [
            ("join_nonce", j.job_index * MAX_WORKERS + w)
            for j in jobs
            for w in range(j.num_workers)
        ]
        registers += [(n, c) for n in SLOT_REGISTERS for c in cells]
        for t, obs, local in zip(self.targets, seen, self.in_process, strict=True):
            thrift_skip = (
                t.thrift_port is not None
                and step["do"] != "read"
                and self.steps_done % BMV2_REGISTER_EVERY
            )
            state = read_state(t, counters, [] if thrift_skip else registers, local)
            obs.counters = {k: v for k, v in state.items() if isinstance(v, tuple)}
            obs.registers = {k: v for k, v in state.items() if not isinstance(v, tuple)}
            _mask_unused_copies(obs.registers, cells)
            if thrift_skip:
                obs.registers = None  # not read on BMv2 after this step: not compared
        for obs in seen:  # run registers: only of installed jobs (the model zeroes them on
            if obs.registers is not None:  # remove, BMv2 on the next install)
                keep = {f"{n}[{j.job_index}]" for j in installed for n in REGISTERS_OF_RUNS}
                keep |= {
                    f"join_nonce[{j.job_index * MAX_WORKERS + w}]"
                    for j in installed
                    for w in range(j.num_workers)
                }
                obs.registers = {
                    k: v
                    for k, v in obs.registers.items()
                    if k in keep or not k.startswith(("join_", "job_", "up_"))
                }

    def _pool(self, spec) -> range:
        return range(2 * spec.pool_base, 2 * (spec.pool_base + spec.pool_size))

    def _installed(self) -> list[JobEntry]:
        """The topology's jobs installed on the reference model, as installed (install and
        remove steps compare their status, so the other target has the same ones)."""
        jobs = self.reference.frames.pipeline.tables.jobs
        return [jobs[j.job_id] for j in self.topo.jobs if j.job_id in jobs]

    def _concerns(self, step: Step) -> tuple[int | None, int | None]:
        """The job a step concerns, and the pool slot its frame names (None: none)."""
        if step["do"] in ("install", "remove"):
            return step["job"], None
        if step["do"] != "frame":
            return None, None
        try:
            ina = Ether(bytes.fromhex(step["frame"])).getlayer(INA)
        except Exception:  # a frame scapy cannot parse concerns no job
            return None, None
        if ina is None or ina.job_id not in self.jobs:
            return None, None
        job = next((j for j in self._installed() if j.job_id == ina.job_id), None)
        if job is None or ina.slot >= job.pool_size:
            return ina.job_id, None
        return ina.job_id, job.pool_base + ina.slot

    def _worker_cells(self, job: int | None, step: Step) -> list[int]:
        """worker_contributions cells of ``job``: its workers, and the frame's worker id."""
        if job is None:
            return []
        spec = self.jobs[job]
        workers = set(range(spec.num_workers))
        if step["do"] == "frame":
            ina = Ether(bytes.fromhex(step["frame"])).getlayer(INA)
            if ina is not None and ina.worker_id < MAX_WORKERS:
                workers.add(ina.worker_id)
        return sorted(spec.job_index * MAX_WORKERS + w for w in workers)


def _mask_unused_copies(registers: dict[str, int], slot_cells: list[int]) -> None:
    """A slot copy with ``slot_count`` 0 is unused: its other registers are whatever an
    earlier job left (BMv2: `install_job` zeroes only ``slot_count``; the model zeroes the
    pool), so they are left out."""
    for c in slot_cells:
        if registers.get(f"slot_count[{c}]", 0) == 0:
            for n in SLOT_REGISTERS[1:]:
                registers.pop(f"{n}[{c}]", None)


def compare(ref: Observation, got: Observation, who: str) -> list[str]:
    """What ``got`` (target ``who``) saw differently from the reference model's ``ref``.
    Statuses: against BMv2 success or failure only (its P4Runtime server, PI, answers other
    codes than the specification's in places: docs/control-plane.md, "Where the targets
    differ"); against the model elsewhere, the codes too."""
    out = []
    if ref.status != got.status and (who != "bmv2" or "OK" in (ref.status, got.status)):
        out.append(f"status: {who} {got.status}, model {ref.status}")
    out += differences(Replay(got.outputs, got.counters), Replay(ref.outputs, ref.counters), who)
    if ref.registers is not None and got.registers is not None:
        for key in sorted(set(ref.registers) | set(got.registers)):
            a, b = got.registers.get(key), ref.registers.get(key)
            if a != b:
                out.append(f"register {key}: {who} {a}, model {b}")
    return out


def summary(step: Step) -> str:
    """One line for people: a frame's ``what``, else the step's fields."""
    if step["do"] == "frame":
        return f"frame on port {step['port']}: {step.get('what', '')}"
    return " ".join(f"{k}={v}" if k != "do" else v for k, v in step.items())


def kind_of(difference: str) -> str:
    """What a difference is about, for `shrink`: ``status``, ``port 2`` (its frames),
    ``counter ina_stats[4]``, ``register up_nonce`` (any cell)."""
    head = difference.split(":", 1)[0]
    if head.startswith("port "):
        return head.split(",", 1)[0]  # "port 2, frame 3": any frame of the port
    return re.sub(r"\[\d+\]$", "", head) if head.startswith("register") else head


# -- making steps ------------------------------------------------------------------------------


class Generator:
    """Steps from a seed, one at a time, most of them what a switch meets and the rest wrong
    on purpose (module docstring). ``model``: the reference `ModelTarget`, whose state it reads
    (never writes) to aim the next step; the same seed and model give the same steps."""

    def __init__(self, topo: Topology, seed: int, model: ModelTarget) -> None:
        self.topo = topo
        self.rng = random.Random(f"fuzz:{seed}")
        # JOINs of workers configured otherwise draw from a stream of their own: every seed's
        # other steps stay the ones they were before these were added
        self.misfit_rng = random.Random(f"fuzz-misfit:{seed}")
        self.b = TraceBuilder(topo, self.rng)
        self.pipeline = model.frames.pipeline
        # each job's window (seqs near it); one job's wraps around 2**32 soon, one starts
        # from the middle
        self.base = {j.job_id: 0 for j in topo.jobs}
        self.base[topo.jobs[1].job_id] = SEQ_MASK - 5
        self.base[topo.jobs[2].job_id] = 1 << 31
        self.queue: list[Callable[[], Step | None]] = []  # steps to come (rounds, answers)
        self.history: list[Step] = []  # frames sent, for replays

    def __iter__(self) -> Iterator[Step]:
        while True:
            yield self.next()

    def next(self) -> Step:
        while self.queue:
            step = self.queue.pop(0)()
            if step is not None:
                return self._keep(step)
        r = self.rng.random()
        if r < 0.03:
            return {"do": "read"}
        if r < 0.16:
            return self._control()
        if r < 0.22 and self.history:
            again = self.rng.choice(self.history)
            return dict(again, what=f"again: {again['what']}")
        return self._keep(self._packet())

    def _keep(self, step: Step) -> Step:
        if step["do"] == "frame":
            self.history.append(step)
        return step

    # -- what the model holds ----------------------------------------------------------

    def _installed(self) -> list:
        return [j for j in self.topo.jobs if j.job_id in self.pipeline.tables.jobs]

    def _epoch(self, spec) -> int:
        return self.pipeline.runs.job_epoch[spec.job_index]

    def _parent(self, spec) -> ParentEntry | None:
        return self.pipeline.tables.parents.get(spec.job_id)

    # -- control plane -----------------------------------------------------------------

    def _control(self) -> Step:
        r = self.rng
        installed = {j.job_id for j in self._installed()}
        jobs = [j.job_id for j in self.topo.jobs]
        k = r.random()
        if k < 0.25:  # remove, install; or reinstall (both)
            job = r.choice(jobs)
            if job in installed and r.random() < 0.5:
                self.queue.append(lambda: self._install(job))
                return {"do": "remove", "job": job}
            if r.random() < 0.1:  # the failure path: ALREADY_EXISTS, NOT_FOUND
                return {"do": "install" if job in installed else "remove", "job": job}
            return {"do": "remove", "job": job} if job in installed else self._install(job)
        if k < 0.7:
            return self._group()
        return self._parent_step()

    def _install(self, job: int) -> Step:
        """Install the topology's job, now and then on another pool: one that another job
        of the topology had, or slots none uses; never over an installed job's pool (the
        model refuses that, BMv2 does not check)."""
        size = self.topo.job(job).pool_size
        taken = [
            (j.pool_base, j.pool_base + j.pool_size)
            for j in self.pipeline.tables.jobs.values()
            if j.job_id != job
        ]
        bases = [self.topo.job(job).pool_base]
        if self.rng.random() < 0.3:
            bases = sorted({j.pool_base for j in self.topo.jobs} | set(SPARE_POOLS))
            self.rng.shuffle(bases)
        bases += SPARE_POOLS  # free whatever moved where
        base = next(b for b in bases if all(b + size <= lo or hi <= b for lo, hi in taken))
        if base == self.topo.job(job).pool_base:
            return {"do": "install", "job": job}
        return {"do": "install", "job": job, "pool_base": base}

    def _group(self) -> Step:
        r = self.rng
        spec = r.choice(self.topo.jobs)
        group = spec.mcast_grp if r.random() < 0.85 else SPARE_GROUP
        exists = group in self.pipeline.tables.mcast_groups
        replicas = [[w.port, w.worker_id] for w in spec.workers]
        r.shuffle(replicas)
        if r.random() < 0.3:  # some replicas left out
            replicas = replicas[: r.randrange(len(replicas) + 1)]
        if r.random() < 0.2:  # a copy to another port, or a rid with no worker_table entry
            extra = [r.choice(self.topo.ports), r.randrange(5)]
            if extra not in replicas:
                replicas.insert(r.randrange(len(replicas) + 1), extra)
        if exists:
            update = r.choice(
                ("MODIFY", "MODIFY", "DELETE", "INSERT" if r.random() < 0.2 else "MODIFY")
            )
        else:
            update = "INSERT" if r.random() < 0.85 else r.choice(("MODIFY", "DELETE"))
        if update == "DELETE":
            replicas = []
        return {"do": "group", "update": update, "group": group, "replicas": replicas}

    def _parent_step(self) -> Step:
        r = self.rng
        spec = self.topo.job(6) if r.random() < 0.7 else self.topo.job(1)  # job 1: a leaf too
        has = spec.job_id in self.pipeline.tables.parents
        update = "DELETE" if has else "INSERT"
        if r.random() < 0.1:
            update = "INSERT" if has else "DELETE"  # ALREADY_EXISTS / NOT_FOUND
        worker = spec.parent.worker_id if spec.parent else 2
        return {
            "do": "parent",
            "update": update,
            "job": spec.job_id,
            "worker_id": worker,
            "port": 5,
        }

    # -- packets -----------------------------------------------------------------------

    def _frame(self, what: str) -> Step:
        port, data = self.b.frames[-1]
        self.b.frames.clear()
        return {"do": "frame", "port": port, "frame": data.hex(), "what": what}

    def _packet(self) -> Step:
        r = self.rng
        installed = self._installed()
        if not installed or r.random() < 0.02:
            return self._odd_frame()
        spec = r.choice(installed)
        k = r.random()
        if k < 0.25:
            self._queue_round(spec)
            return self.queue.pop(0)()
        if k < 0.35:
            self._queue_join_round(spec)
            return self.queue.pop(0)()
        if k < 0.45:
            return self._join(spec, r.randrange(spec.num_workers), r.choice(NONCES))
        if k < 0.6 and self._parent(spec) is not None:
            return self._from_parent(spec)
        if k < 0.7:
            return self._malformed(spec)
        return self._data(spec)

    def _seq(self, spec) -> int:
        off = self.rng.randrange(-spec.pool_size, 2 * spec.pool_size)
        return (self.base[spec.job_id] + off) & SEQ_MASK

    def _data(
        self,
        spec,
        worker: int | None = None,
        seq: int | None = None,
        epoch: int | None = None,
        retx: bool | None = None,
    ) -> Step:
        r = self.rng
        w = r.randrange(spec.num_workers) if worker is None else worker
        q = self._seq(spec) if seq is None else seq
        if epoch is None:
            epoch = self._epoch(spec) + r.choice((0, 0, 0, 0, 0, 0, 0, -1, 1))
        retx = r.random() < 0.2 if retx is None else retx
        op = r.choice((Op.SUM, Op.SUM, Op.OR, Op.MAX))
        self.b.ina(
            spec.job_id,
            w,
            q,
            self.b.lanes(r.choice(("random", "extreme", "bits", "small"))),
            op=op,
            retx=retx,
            epoch=epoch & 0xFFFFFFFF,
            exp=r.randrange(256),
            level=r.randrange(256),
        )
        return self._frame(
            f"job {spec.job_id} worker {w} seq {q} epoch {epoch} {op.name}{' retx' if retx else ''}"
        )

    def _queue_round(self, spec) -> None:
        """Every worker of the job contributes the window's seq (current run), in a random
        order; on a leaf, now and then the parent's RESULT for it after."""
        seq = self.base[spec.job_id]
        workers = [w.worker_id for w in spec.workers]
        self.rng.shuffle(workers)
        for w in workers:
            self.queue.append(lambda w=w: self._data(spec, w, seq, self._epoch(spec), False))
        if self.rng.random() < 0.7:
            self.queue.append(lambda: self._parent_result(spec, seq))
        if self.rng.random() < 0.6:
            self.base[spec.job_id] = (seq + 1) & SEQ_MASK

    def _queue_join_round(self, spec) -> None:
        """Every worker JOINs (a new run); on a leaf, the parent's answer after."""
        for w in range(spec.num_workers):
            nonce = self.rng.choice(NONCES)
            self.queue.append(lambda w=w, n=nonce: self._join(spec, w, n))
        self.queue.append(lambda: self._parent_join(spec))

    def _join(self, spec, w: int, nonce: int) -> Step:
        retx = self.rng.random() < 0.2
        flags = Flag.RETX if retx else 0
        fields, what = {}, ""
        r = self.misfit_rng
        if r.random() < 0.1:  # the SHADOW bit, meaningless on a JOIN: replies keep or drop it
            flags |= Flag.SHADOW
            what = " shadow"
        if r.random() < 0.05:  # a worker configured otherwise: REJECT (or MALFORMED)
            fields = r.choice(
                (
                    {"slot": r.randrange(1 << 16)},
                    {"num_lanes": r.randrange(P4_LANES)},
                    {"lanes": [0] * (k := r.randrange(2 * P4_LANES)), "num_lanes": k},
                    {"lanes": [0] * r.randrange(2 * P4_LANES), "num_lanes": r.randrange(64)},
                )
            )
            what += " " + ",".join(
                f"{k}={len(v) if k == 'lanes' else v}" for k, v in fields.items()
            )
        self.b.ina(spec.job_id, w, nonce, op=Op.JOIN, flags=flags, **fields)
        return self._frame(
            f"job {spec.job_id} worker {w} JOIN {nonce:#x}{' retx' if retx else ''}{what}"
        )

    def _parent_address(self, spec) -> WorkerAddress | None:
        p = self._parent(spec)
        if p is None:
            return None
        return WorkerAddress(spec.job_id, p.worker_id, p.ip, p.udp_port, p.mac, p.port)

    def _parent_result(self, spec, seq: int) -> Step | None:
        sender = self._parent_address(spec)
        if sender is None:
            return None
        shadow = Flag.SHADOW if seq & spec.pool_size else 0
        epoch = self._epoch(spec)
        self.b.ina(
            spec.job_id,
            sender.worker_id,
            seq,
            sender=sender,
            flags=Flag.RESULT | shadow,
            epoch=epoch,
        )
        return self._frame(f"job {spec.job_id} parent RESULT seq {seq} epoch {epoch}")

    def _parent_join(self, spec) -> Step | None:
        sender = self._parent_address(spec)
        if sender is None:
            return None
        nonce = self.pipeline.runs.up_nonce[spec.job_index]
        epoch = self.rng.randrange(1, 50)
        self.b.ina(
            spec.job_id,
            sender.worker_id,
            nonce,
            op=Op.JOIN,
            slot=0,
            sender=sender,
            flags=Flag.RESULT,
            epoch=epoch,
        )
        return self._frame(f"job {spec.job_id} parent JOIN RESULT {nonce:#x} epoch {epoch}")

    def _from_parent(self, spec) -> Step:
        """The parent's reply, right or wrong: RESULT or PENDING, data or JOIN."""
        r = self.rng
        sender = self._parent_address(spec)
        flags = r.choice((Flag.RESULT, Flag.RESULT, Flag.PENDING))
        w = r.randrange(4)
        epoch = self._epoch(spec) + r.choice((0, 0, 0, 1, -1))
        if r.random() < 0.3:
            nonce = r.choice((self.pipeline.runs.up_nonce[spec.job_index], *NONCES))
            self.b.ina(
                spec.job_id,
                w,
                nonce,
                op=Op.JOIN,
                slot=0,
                sender=sender,
                flags=flags,
                epoch=epoch & 0xFFFFFFFF,
            )
            return self._frame(f"job {spec.job_id} parent JOIN {flags!r} {nonce:#x}")
        seq = self._seq(spec)
        shadow = Flag.SHADOW if seq & spec.pool_size else 0
        self.b.ina(
            spec.job_id, w, seq, sender=sender, flags=flags | shadow, epoch=epoch & 0xFFFFFFFF
        )
        return self._frame(f"job {spec.job_id} parent {flags!r} seq {seq} epoch {epoch}")

    def _malformed(self, spec) -> Step:
        """A packet wrong in one way: header fields, lengths, slot or worker."""
        r, b = self.rng, self.b
        w = r.randrange(spec.num_workers)
        seq = self._seq(spec)
        epoch = self._epoch(spec)
        kind = r.choice(
            (
                "version",
                "op",
                "flags",
                "num_lanes",
                "cut",
                "long",
                "udp_len",
                "padded",
                "slot",
                "shadow",
                "worker",
            )
        )
        if kind == "version":
            b.ina(spec.job_id, w, seq, version=r.choice((0, 2, 255)), epoch=epoch)
        elif kind == "op":
            b.ina(spec.job_id, w, seq, op=r.choice((0, max(Op) + 1, 255)), epoch=epoch)
        elif kind == "flags":
            b.ina(
                spec.job_id,
                w,
                seq,
                flags=r.choice((Flag.RESULT, Flag.PENDING, Flag.RESULT | Flag.PENDING)),
                epoch=epoch,
            )
        elif kind == "num_lanes":
            b.ina(spec.job_id, w, seq, num_lanes=r.choice((0, P4_LANES + 1, 0xFFFF)), epoch=epoch)
        elif kind == "slot":
            b.ina(
                spec.job_id,
                w,
                seq,
                slot=r.choice(((seq + 1) % spec.pool_size, spec.pool_size, 0xFFFF)),
                epoch=epoch,
            )
        elif kind == "shadow":
            b.ina(
                spec.job_id, w, seq, flags=0 if seq & spec.pool_size else Flag.SHADOW, epoch=epoch
            )
        elif kind == "worker":
            b.ina(spec.job_id, r.choice((spec.num_workers, 31, 255)), seq, epoch=epoch)
        else:
            sender = spec.workers[w]
            whole = bytes(
                INA(
                    worker_id=w,
                    job_id=spec.job_id,
                    seq=seq,
                    epoch=epoch,
                    slot=seq % spec.pool_size,
                    flags=Flag.SHADOW if seq & spec.pool_size else 0,
                    lanes=b.lanes(),
                )
            )
            if kind == "cut":
                b.frame(sender.port, b.to_switch(sender, Raw(whole[: r.randrange(len(whole))])))
            elif kind == "long":
                b.frame(sender.port, b.to_switch(sender, Raw(whole + bytes(r.choice((1, 4, 64))))))
            elif kind == "udp_len":
                b.frame(
                    sender.port,
                    b.to_switch(sender, Raw(whole), len=r.choice((8, len(whole) + 4, 0xFFFF))),
                )
            else:
                b.frame(
                    sender.port, bytes(b.to_switch(sender, Raw(whole))) + bytes(r.randrange(1, 20))
                )
        return self._frame(f"job {spec.job_id} {kind}")

    def _odd_frame(self) -> Step:
        """A job that is not installed, or plain L2 traffic."""
        r, b = self.rng, self.b
        hosts = list(self.topo.hosts)
        if r.random() < 0.5:
            spec = r.choice(self.topo.jobs)
            job = UNKNOWN_JOB if r.random() < 0.5 else spec.job_id
            b.ina(job, 0, self._seq(spec), sender=spec.workers[0])
            return self._frame(f"job {job} (maybe not installed)")
        src, dst = r.choice(hosts), r.choice(hosts)
        if r.random() < 0.5:
            b.frame(
                src.port,
                Ether(src=src.mac, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=src.ip, pdst=dst.ip),
            )
        else:
            b.frame(src.port, Ether(src=src.mac, dst=dst.mac) / Raw(bytes(r.randrange(46, 80))))
        return self._frame("l2")


# -- fuzzing, shrinking, saving ----------------------------------------------------------------


@dataclass
class Failure:
    """A difference: the steps up to it (shrunk), and what differed after the last one."""

    steps: list[Step]
    differences: list[str]
    seed: int | None = None
    found_after: int = 0  # steps run before shrinking
    shrink_runs: int = 0
    seconds: float = 0.0


def fuzz(pair: Differential, seed: int, steps: int, shrink_it: bool = True) -> Failure | None:
    """``steps`` steps of ``seed`` on ``pair``; at the first difference, the steps up to it,
    shrunk (`shrink`). None if the targets never differed."""
    t0 = time.monotonic()
    gen = Generator(pair.topo, seed, pair.reference)
    pair.start()
    done: list[Step] = []
    for step in gen:
        if len(done) >= steps:
            return None
        done.append(step)
        diffs = pair.step(step)
        if diffs:
            found = len(done)
            runs = 0
            if shrink_it:
                done, diffs, runs = shrink(pair, done, diffs)
            return Failure(done, diffs, seed, found, runs, time.monotonic() - t0)
    return None


def shrink(pair: Differential, steps: list[Step], diffs: list[str], budget: int = 400):
    """Delta debugging (Zeller's ddmin, complements only): remove chunks of steps, halving
    the chunk size, while the rest still differs in the same way (a difference of the same
    `kind_of`), keeping it cut at its first difference; at most ``budget`` replays.
    Returns (steps, differences, replays)."""
    want = {kind_of(d) for d in diffs}
    runs = 0

    def fails(cand: list[Step]):
        nonlocal runs
        runs += 1
        got = pair.run(cand)
        if got is None or not want & {kind_of(d) for d in got[1]}:
            return None
        return cand[: got[0] + 1], got[1]

    n = 2
    while len(steps) >= 2 and runs < budget:
        size = -(-len(steps) // n)
        for lo in range(0, len(steps), size):
            got = fails(steps[:lo] + steps[lo + size :])
            if got is not None:
                steps, diffs = got
                n = max(n - 1, 2)
                break
            if runs >= budget:
                break
        else:
            if n >= len(steps):
                break
            n = min(2 * n, len(steps))
    return steps, diffs, runs


def save(failure: Failure, who: str, where: Path = REGRESSIONS) -> Path:
    """Write ``failure`` as ``<who>-seed<seed>-<n>steps.json`` under ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{who}-seed{failure.seed}-{len(failure.steps)}steps.json"
    data = {
        "found": f"fuzz seed {failure.seed} against {who}, after {failure.found_after} steps",
        "differences": failure.differences,
        "steps": failure.steps,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def load(path: Path) -> list[Step]:
    data = json.loads(Path(path).read_text())
    return data["steps"] if isinstance(data, dict) else data


def replay(pair: Differential, path: Path) -> list[str]:
    """The differences a saved list of steps shows on ``pair`` ([] if none)."""
    got = pair.run(load(path))
    return [] if got is None else [f"after step {got[0]}:", *got[1]]


__all__ = [
    "REGRESSIONS",
    "Differential",
    "Failure",
    "Generator",
    "Observation",
    "clean",
    "compare",
    "fuzz",
    "load",
    "replay",
    "save",
    "shrink",
    "summary",
]

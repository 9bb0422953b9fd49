"""Control-plane state of the switch: the match-action tables and multicast groups.

These mirror the P4 program's tables one to one (same names): the control plane fills them,
the pipeline only reads them. Entries come from data (a jobs file, P4Runtime writes), never
from code.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ina.errors import UsageError
from ina.p4.entities import MAX_JOBS, MAX_MCAST_GROUP
from ina.protocol import MAX_WORKERS
from ina.switch_model.replica_order import McastGroup, insert_group, modify_group, send_order


@dataclass(frozen=True)
class JobEntry:
    """``job_table`` action ``set_job``: what the switch knows about one job."""

    job_id: int
    job_index: int  # dense index for per-job counters, < MAX_JOBS
    num_workers: int
    pool_base: int  # first slot of the job's pool in the switch's registers
    pool_size: int  # slots in the pool (each with two shadow copies)
    mcast_grp: int  # multicast group that reaches every worker of the job

    def __post_init__(self) -> None:
        if not 1 <= self.num_workers <= MAX_WORKERS:
            raise ValueError(f"job {self.job_id}: num_workers must be 1..{MAX_WORKERS}")
        if not 0 <= self.job_index < MAX_JOBS:
            raise ValueError(f"job {self.job_id}: job_index must be 0..{MAX_JOBS - 1}")
        if self.pool_base < 0 or self.pool_size < 1 or self.pool_size & (self.pool_size - 1):
            raise ValueError(
                f"job {self.job_id}: pool_base >= 0 and a power-of-two pool_size required "
                f"(got {self.pool_base}, {self.pool_size}): slot = seq % pool_size is a mask"
            )
        if not 0 <= self.job_id < 1 << 16:
            raise ValueError(f"job_id {self.job_id} does not fit 16 bits")


@dataclass(frozen=True)
class WorkerAddress:
    """``worker_table`` action ``set_worker``: where one worker of a job is reached.

    ``ip``/``udp_port`` address the worker; ``mac`` and ``port`` (the switch port) matter
    only when the switch sees Ethernet frames (BMv2, the model on veths).
    """

    job_id: int
    worker_id: int
    ip: str
    udp_port: int
    mac: str = "00:00:00:00:00:00"
    port: int = 0


@dataclass(frozen=True)
class ParentEntry:
    """``parent_table`` action ``set_parent``: this switch is a leaf of job ``job_id``.

    Its completed slots (and run joins) go up to the parent switch as the parent's worker
    ``worker_id`` of the same job; ``ip``/``udp_port`` address the parent, ``mac`` and
    ``port`` (this switch's port towards it) matter only on Ethernet frames.
    """

    job_id: int
    worker_id: int
    ip: str
    udp_port: int
    mac: str = "00:00:00:00:00:00"
    port: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.worker_id < MAX_WORKERS:
            raise ValueError(f"job {self.job_id}: parent worker_id must be 0..{MAX_WORKERS - 1}")
        if not 0 <= self.port < 1 << 9:
            raise ValueError(f"job {self.job_id}: parent port {self.port} does not fit 9 bits")


@dataclass
class Tables:
    """All control-plane entries of one switch."""

    jobs: dict[int, JobEntry] = field(default_factory=dict)
    workers: dict[tuple[int, int], WorkerAddress] = field(default_factory=dict)
    parents: dict[int, ParentEntry] = field(default_factory=dict)  # job_id -> parent
    # multicast group -> replicas (egress port, rid) as last written; rid is the worker id.
    # `write_group` keeps BMv2's attach order with them (a `McastGroup`); a plain list
    # written here counts as one INSERT in its order.
    mcast_groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def add_job(self, job: JobEntry, pool_total: int) -> None:
        if job.pool_base + job.pool_size > pool_total:
            raise ValueError(
                f"job {job.job_id}: pool {job.pool_base}+{job.pool_size} exceeds the "
                f"switch's {pool_total} slots"
            )
        for other in self.jobs.values():
            if other.job_id == job.job_id:
                continue
            overlap = (
                job.pool_base < other.pool_base + other.pool_size
                and other.pool_base < job.pool_base + job.pool_size
            )
            if overlap:
                raise ValueError(f"job {job.job_id}: pool overlaps job {other.job_id}'s")
            if other.job_index == job.job_index:
                raise ValueError(f"job {job.job_id}: job_index used by job {other.job_id}")
        self.jobs[job.job_id] = job

    def add_worker(self, w: WorkerAddress) -> None:
        self.workers[(w.job_id, w.worker_id)] = w

    def write_group(self, group: int, replicas: list[tuple[int, int]]) -> McastGroup:
        """Write multicast ``group`` as BMv2 (behind PI's P4Runtime server) does: an INSERT
        if the group is new, else a MODIFY, which keeps the order of the replicas it keeps
        and sends new ones last (`ina.switch_model.replica_order`). Delete a group with
        ``del mcast_groups[group]``; writing it again is then an INSERT."""
        old = self.mcast_groups.get(group)
        new = insert_group(replicas) if old is None else modify_group(old, replicas)
        self.mcast_groups[group] = new
        return new

    def replicas(self, group: int) -> list[tuple[int, int]]:
        """The copies a multicast to ``group`` makes, (egress port, rid), in the order they
        leave BMv2 (issue 32): its replicas' nodes in the order they were attached, which
        libstdc++'s hash map and the group's INSERT and MODIFY history decide, each node's
        ports ascending (`ina.switch_model.replica_order`). It shows when two workers share
        a port, as who hears first (tests/test_replica_order.py)."""
        return send_order(self.mcast_groups.get(group, ()))


@dataclass(frozen=True)
class JobSpec:
    """One job as written in a jobs file: the job entry plus its workers' addresses."""

    job_id: int
    num_workers: int
    pool_base: int
    pool_size: int
    workers: tuple[WorkerAddress, ...]
    job_index: int = 0
    mcast_grp: int = 0
    parent: ParentEntry | None = None  # a leaf of a hierarchical job: its parent switch

    def entry(self) -> JobEntry:
        """The ``job_table`` entry; the multicast group is ``mcast_grp``, or job_id + 1 when
        it is 0. Raises ValueError for a group BMv2 would refuse (above `MAX_MCAST_GROUP`)."""
        group = self.mcast_grp or self.job_id + 1
        if not 1 <= group <= MAX_MCAST_GROUP:
            which = f"mcast_grp {group}" if self.mcast_grp else f"the default {group} (job_id + 1)"
            raise ValueError(
                f"job {self.job_id}: {which} is not a multicast group id BMv2 accepts "
                f"(1..{MAX_MCAST_GROUP}): give the job a mcast_grp in that range"
            )
        return JobEntry(
            job_id=self.job_id,
            job_index=self.job_index,
            num_workers=self.num_workers,
            pool_base=self.pool_base,
            pool_size=self.pool_size,
            mcast_grp=group,
        )

    def to_json(self) -> dict:
        d = asdict(self)
        d["workers"] = [asdict(w) for w in self.workers]
        if self.parent is None:
            del d["parent"]
        else:
            d["parent"] = {k: v for k, v in asdict(self.parent).items() if k != "job_id"}
        return d

    @classmethod
    def from_json(cls, d: dict) -> JobSpec:
        workers = tuple(
            WorkerAddress(job_id=d["job_id"], **{k: v for k, v in w.items() if k != "job_id"})
            for w in d["workers"]
        )
        if len(workers) != d["num_workers"]:
            raise ValueError(
                f"job {d['job_id']}: {len(workers)} worker addresses for "
                f"num_workers={d['num_workers']}"
            )
        ids = sorted(w.worker_id for w in workers)
        if ids != list(range(d["num_workers"])):
            raise ValueError(f"job {d['job_id']}: worker ids must be 0..num_workers-1")
        rest = {k: v for k, v in d.items() if k not in ("workers", "parent")}
        parent = d.get("parent")
        if parent is not None:
            parent = ParentEntry(job_id=d["job_id"], **parent)
        return cls(workers=workers, parent=parent, **rest)


class JobsFileError(UsageError):
    """A jobs file that cannot be used: missing, not JSON, or not the shape `load_jobs` reads.
    The message names the file and, where it can, the job and the worker."""


def _fields(cls, d: object, where: str, ignore: tuple[str, ...] = ()) -> dict:
    """``d``'s keys checked against dataclass ``cls``: an object, every field without a
    default present, no unknown key, integers where the field is an int."""
    if not isinstance(d, dict):
        raise JobsFileError(f"{where}: expected a JSON object, got {type(d).__name__}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    required = [
        n
        for n, f in known.items()
        if n not in ignore
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    missing = [n for n in required if n not in d]
    if missing:
        raise JobsFileError(f"{where}: missing {', '.join(repr(n) for n in missing)}")
    unknown = sorted(k for k in d if k not in known)
    if unknown:
        raise JobsFileError(
            f"{where}: unknown key {', '.join(repr(k) for k in unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    for name, value in d.items():
        kind = known[name].type
        if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            raise JobsFileError(f"{where}: {name!r} must be an integer, got {value!r}")
        if kind == "str" and not isinstance(value, str):
            raise JobsFileError(f"{where}: {name!r} must be a string, got {value!r}")
    return d


def _check_ipv4(text: str, where: str) -> None:
    """The worker_table holds an IPv4 address (32 bits): a name or an IPv6 address is not one."""
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        raise JobsFileError(f"{where}: 'ip' {text!r} is not an IPv4 address (a.b.c.d)") from None


_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
SWITCH_PORTS = 1 << 9  # egress_spec is 9 bits in v1model


def _check_address(d: dict, where: str) -> None:
    """A worker's or a parent's address as the tables hold it: an IPv4 address, a UDP port,
    a MAC written aa:bb:cc:dd:ee:ff, a switch port that fits v1model's 9 bits."""
    _check_ipv4(d["ip"], where)
    if not 0 <= d["udp_port"] < 1 << 16:
        raise JobsFileError(f"{where}: 'udp_port' {d['udp_port']} is not a UDP port (0..65535)")
    mac = d.get("mac", WorkerAddress.mac)
    if not _MAC.fullmatch(mac):
        raise JobsFileError(f"{where}: 'mac' {mac!r} is not a MAC address (aa:bb:cc:dd:ee:ff)")
    if not 0 <= d.get("port", 0) < SWITCH_PORTS:
        raise JobsFileError(
            f"{where}: 'port' {d['port']} is not a switch port (0..{SWITCH_PORTS - 1}: "
            "v1model's egress port is 9 bits)"
        )


def parse_jobs(data: object, where: str = "jobs file") -> list[JobSpec]:
    """The jobs of a parsed jobs file; `JobsFileError` says what is wrong and where."""
    shape = '{"jobs": [{job_id, num_workers, pool_base, pool_size, workers: [...]}]}'
    if not isinstance(data, dict):
        raise JobsFileError(f"{where}: expected a JSON object {shape}")
    if "jobs" not in data:
        raise JobsFileError(f"{where}: no 'jobs' key; a jobs file holds {shape}")
    if not isinstance(data["jobs"], list):
        raise JobsFileError(f"{where}: 'jobs' must be a list")
    specs = []
    for i, job in enumerate(data["jobs"]):
        at = f"{where}: jobs[{i}]"
        _fields(JobSpec, job, at)
        if not isinstance(job["workers"], list):
            raise JobsFileError(f"{at}: 'workers' must be a list")
        at = f"{where}: job {job['job_id']}"
        for k, w in enumerate(job["workers"]):
            _fields(WorkerAddress, w, f"{at}: workers[{k}]", ignore=("job_id",))
            _check_address(w, f"{at}: workers[{k}]")
        if job.get("parent") is not None:
            _fields(ParentEntry, job["parent"], f"{at}: parent", ignore=("job_id",))
            _check_address(job["parent"], f"{at}: parent")
        if any(s.job_id == job["job_id"] for s in specs):
            raise JobsFileError(f"{at}: given twice (each job once, with all its workers)")
        try:
            spec = JobSpec.from_json(job)
            spec.entry()  # the job_table entry's checks: worker count, pool, ids
        except ValueError as e:
            raise JobsFileError(f"{where}: {e}") from None
        specs.append(spec)
    return specs


def load_jobs(path: str | Path) -> list[JobSpec]:
    """Read a jobs file: ``{"jobs": [{job_id, num_workers, pool_base, pool_size, workers}]}``
    (``examples/jobs.json`` is one). Raises `JobsFileError` (one line) if it cannot."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise JobsFileError(f"jobs file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise JobsFileError(f"jobs file {path}: not a text file (JSON in UTF-8)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise JobsFileError(f"jobs file {path}: not valid JSON: {e}") from None
    return parse_jobs(data, f"jobs file {path}")


def save_jobs(path: str | Path, jobs: list[JobSpec]) -> None:
    Path(path).write_text(json.dumps({"jobs": [j.to_json() for j in jobs]}, indent=2) + "\n")


def local_job(
    job_id: int = 1,
    num_workers: int = 2,
    pool_size: int = 64,
    pool_base: int = 0,
    host: str = "127.0.0.1",
    base_port: int = 50000,
    job_index: int = 0,
) -> JobSpec:
    """A job whose workers listen on ``host:base_port + worker_id`` (loopback runs)."""
    workers = tuple(
        WorkerAddress(job_id=job_id, worker_id=w, ip=host, udp_port=base_port + w, port=w)
        for w in range(num_workers)
    )
    return JobSpec(
        job_id=job_id,
        num_workers=num_workers,
        pool_base=pool_base,
        pool_size=pool_size,
        workers=workers,
        job_index=job_index,
    )

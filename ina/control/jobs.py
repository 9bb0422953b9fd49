"""Install and remove aggregation jobs on a switch over P4Runtime.

A job is three kinds of entries (`ina.switch_model.tables.JobSpec` holds them as data):

1. a multicast group (``mcast_grp``) with one replica per worker: (worker's switch port,
   instance = worker id); results leave through it and the egress tells the copies apart by
   the instance (``egress_rid``);
2. one ``worker_table`` entry per worker, key (job_id, worker_id), action
   ``set_worker(mac, ip, udp_port)``: how the egress addresses that worker's copy;
3. on a leaf switch of a hierarchical job (``spec.parent``), the ``parent_table`` entry, key
   job_id, action ``set_parent(worker_id, port, mac, ip, udp_port)``: the job's completed
   slots go up to that switch as its worker ``worker_id`` (docs/protocol.md, "Hierarchical
   aggregation");
4. the ``job_table`` entry, key job_id, action
   ``set_job(job_index, num_workers, pool_base, pool_size, mcast_grp)``.

They go in that order, one Write batch each, and come out in the reverse order: the job entry
is what makes the switch accept the job's packets, so it appears only once the group and the
addresses it needs exist, and disappears first (P4Runtime orders dependent updates only
across batches). A failed install removes what it had written.

Before the job entry goes in, the pool is reset (`reset_pool`): a pool may hold a previous
job's slots, which the switch would take for live ones of a run with the same epoch, so
``slot_count`` of the pool's cells (0 marks an unused copy) and the job's run registers
(``job_epoch``, ``join_bitmap``, ``join_count`` and its workers' ``join_nonce`` cells: no run
yet) are zeroed. How depends on the target, which one probe write tells apart:

- the switch model serves register writes over P4Runtime: the cells are zeroed in one Write
  batch (the model also resets the pool and the runs itself on install);
- BMv2's P4Runtime server has no register writes at all (the probe comes back UNIMPLEMENTED;
  one failed update, never one per cell: thousands of failed updates make an error reply
  whose details exceed gRPC's 16 KiB metadata limit, RESOURCE_EXHAUSTED). With
  ``thrift_port``, the reset goes through BMv2's Thrift runtime CLI (``simple_switch_CLI``,
  one process): ``register_reset`` of every register when no other job is installed
  (a clean slate, as after a pipeline push), else ``register_write`` of the job's cells
  only, because ``register_reset`` would also clear other jobs' live slots and runs.
  Without ``thrift_port`` the reset is skipped with a warning: right after a pipeline push
  (which zeroes every register) that is harmless.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
import sys

import grpc

from ina.control.p4rt import DELETE, INSERT, MODIFY, P4RuntimeError, SwitchConnection
from ina.p4.entities import REGISTERS
from ina.protocol import MAX_WORKERS
from ina.switch_model.tables import JobEntry, JobSpec, ParentEntry

log = logging.getLogger(__name__)

SIMPLE_SWITCH_CLI = "simple_switch_CLI"
COUNT_REGISTER = "slot_count"  # count 0 marks an unused slot copy


def job_cells(job: JobEntry) -> list[tuple[str, int]]:
    """(register, index) of every cell `reset_pool` zeroes for ``job``."""
    i = job.job_index
    cells = [
        (COUNT_REGISTER, c) for c in range(job.pool_base * 2, (job.pool_base + job.pool_size) * 2)
    ]
    cells += [
        (name, i) for name in ("job_epoch", "join_bitmap", "join_count", "up_nonce", "up_joined")
    ]
    cells += [("join_nonce", i * MAX_WORKERS + w) for w in range(MAX_WORKERS)]
    return cells


def _group_entity(conn: SwitchConnection, spec: JobSpec, group: int):
    replicas = sorted((w.port, w.worker_id) for w in spec.workers)
    return conn.multicast_group(group, replicas)


def _worker_entities(conn: SwitchConnection, spec: JobSpec):
    return [
        conn.table_entry(
            "worker_table",
            {"job_id": spec.job_id, "worker_id": w.worker_id},
            "set_worker",
            {"mac": w.mac, "ip": w.ip, "udp_port": w.udp_port},
        )
        for w in sorted(spec.workers, key=lambda w: w.worker_id)
    ]


def _parent_entity(conn: SwitchConnection, parent: ParentEntry):
    return conn.table_entry(
        "parent_table",
        {"job_id": parent.job_id},
        "set_parent",
        {
            "worker_id": parent.worker_id,
            "port": parent.port,
            "mac": parent.mac,
            "ip": parent.ip,
            "udp_port": parent.udp_port,
        },
    )


def _job_entity(conn: SwitchConnection, job: JobEntry):
    return conn.table_entry(
        "job_table",
        {"job_id": job.job_id},
        "set_job",
        {
            "job_index": job.job_index,
            "num_workers": job.num_workers,
            "pool_base": job.pool_base,
            "pool_size": job.pool_size,
            "mcast_grp": job.mcast_grp,
        },
    )


def reset_pool(conn: SwitchConnection, job: JobEntry, thrift_port: int | None = None) -> bool:
    """Zero ``slot_count`` of the job's pool (both shadow copies of each slot), so that its
    chunks start fresh, and the job's run registers, so that its first JOIN starts a run;
    the other slot registers are rewritten by a slot's first packet. (BMv2 over Thrift with
    no other job installed: every register, whole.) See the module docstring for how each
    target does it.

    Returns False if the target could not do it (BMv2 without ``thrift_port``; logged).
    """
    cells = job_cells(job)
    try:  # the probe: one cell, so that a target without register writes fails once
        conn.write([conn.update(MODIFY, conn.register_entry(*cells[0], 0))])
    except P4RuntimeError as e:
        if e.codes != {grpc.StatusCode.UNIMPLEMENTED}:
            raise
    else:
        conn.write([conn.update(MODIFY, conn.register_entry(name, i, 0)) for name, i in cells[1:]])
        return True
    if thrift_port is None:
        log.warning(
            "job %d: the switch has no P4Runtime register writes (BMv2) and no thrift_port "
            "was given: its pool (slots %d..%d) was NOT reset. This relies on a fresh "
            "pipeline push, which zeroes every register; if the pool was used since, the "
            "job's first chunks meet old slot state (STALE drops, or an old result answered "
            "as a duplicate): pass thrift_port or push the pipeline again.",
            job.job_id,
            job.pool_base,
            job.pool_base + job.pool_size - 1,
        )
        return False
    others = [j for j in list_jobs(conn).values() if j.job_id != job.job_id]
    if others:  # only this job's cells: the other jobs' slots and runs are live
        commands = [f"register_write {name} {i} 0" for name, i in cells]
    else:
        commands = [f"register_reset {r.name}" for r in REGISTERS]
    run_thrift_cli(commands, thrift_port)
    return True


def thrift_cli_command(thrift_port: int) -> list[str]:
    """The command line of BMv2's ``simple_switch_CLI`` for ``thrift_port``.

    The CLI is a Python script that needs the ``thrift`` module, which a virtualenv rarely
    has (Debian ships it as python3-thrift for /usr/bin/python3): run it with the first of
    this interpreter, /usr/bin/python3 and the script's own ``python3`` that can import it.
    """
    cli = shutil.which(SIMPLE_SWITCH_CLI)
    if cli is None:
        raise RuntimeError(f"{SIMPLE_SWITCH_CLI} (BMv2's Thrift runtime CLI) is not on PATH")
    python = _python_with_thrift()
    if python is None:
        raise RuntimeError(
            f"{SIMPLE_SWITCH_CLI} needs the Python module 'thrift', which none of "
            f"{', '.join(_PYTHONS)} has (Debian: apt-get install python3-thrift)"
        )
    return [python, cli, "--thrift-port", str(thrift_port)]


_PYTHONS = (sys.executable, "/usr/bin/python3", "python3")


@functools.lru_cache(maxsize=1)
def _python_with_thrift() -> str | None:
    for python in _PYTHONS:
        path = shutil.which(python)
        if path is None:
            continue
        probe = subprocess.run([path, "-c", "import thrift"], capture_output=True, check=False)
        if probe.returncode == 0:
            return path
    return None


def run_thrift_cli(commands: list[str], thrift_port: int, timeout: float = 60.0) -> str:
    """Run ``commands`` in one ``simple_switch_CLI`` session; returns its output. Raises
    `RuntimeError` if the CLI fails or reports an error for any command."""
    cmd = thrift_cli_command(thrift_port)
    done = subprocess.run(
        cmd,
        input="".join(c + "\n" for c in commands),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    errors = [
        line
        for line in done.stdout.splitlines()
        if "Error" in line or "Invalid" in line or "Exception" in line
    ]
    if done.returncode or errors:
        detail = "\n".join(errors[:5]) or (done.stdout + done.stderr)[-500:]
        raise RuntimeError(
            f"{SIMPLE_SWITCH_CLI} --thrift-port {thrift_port} failed "
            f"({len(commands)} commands, first {commands[0]!r}): {detail}"
        )
    return done.stdout


def install_job(
    conn: SwitchConnection,
    spec: JobSpec,
    replace: bool = False,
    thrift_port: int | None = None,
) -> JobEntry:
    """Install ``spec`` (group, worker addresses, pool reset, then the job entry); returns
    its entry.

    ``replace`` removes an installed job with the same id first. ``thrift_port``: BMv2's
    Thrift port, for the pool reset (see the module docstring). Raises `P4RuntimeError`
    (e.g. ALREADY_EXISTS for a job or group that exists) after undoing a partial install.
    """
    job = spec.entry()  # validates the spec (ValueError says why)
    if len({w.worker_id for w in spec.workers}) != len(spec.workers):
        raise ValueError(f"job {spec.job_id}: worker ids repeat")
    if replace:
        remove_job(conn, spec.job_id, missing_ok=True)
    steps = [
        [_group_entity(conn, spec, job.mcast_grp)],
        _worker_entities(conn, spec),
        *([[_parent_entity(conn, spec.parent)]] if spec.parent is not None else []),
        [_job_entity(conn, job)],
    ]
    done: list[list] = []
    try:
        for i, batch in enumerate(steps):
            if i == len(steps) - 1:  # the pool is quiet until the job entry exists
                reset_pool(conn, job, thrift_port)
            conn.write([conn.update(INSERT, e) for e in batch])
            done.append(batch)
    except (P4RuntimeError, RuntimeError):
        for batch in reversed(done):  # best effort: leave the switch as we found it
            try:
                conn.write([conn.update(DELETE, e) for e in batch])
            except P4RuntimeError:
                pass
        raise
    return job


def list_jobs(conn: SwitchConnection) -> dict[int, JobEntry]:
    """The jobs installed on the switch, by job id (read from ``job_table``)."""
    out = {}
    for e in conn.read([conn.table_entry("job_table")]):
        _, match, action, p = conn.decode_table_entry(e)
        if action != "set_job":
            continue
        out[match["job_id"]] = JobEntry(
            job_id=match["job_id"],
            job_index=p["job_index"],
            num_workers=p["num_workers"],
            pool_base=p["pool_base"],
            pool_size=p["pool_size"],
            mcast_grp=p["mcast_grp"],
        )
    return out


def remove_job(conn: SwitchConnection, job_id: int, missing_ok: bool = False) -> JobEntry | None:
    """Remove a job: its ``job_table`` entry, its workers' and parent entries, then its
    multicast group
    (unless another job still uses the group). Returns the removed entry, None if absent."""
    jobs = list_jobs(conn)
    job = jobs.get(job_id)
    if job is None:
        if missing_ok:
            return None
        raise P4RuntimeError(grpc.StatusCode.NOT_FOUND, f"job {job_id} is not installed")
    conn.write([conn.update(DELETE, conn.table_entry("job_table", {"job_id": job_id}))])
    workers = []
    for e in conn.read([conn.table_entry("worker_table")]):
        _, match, _, _ = conn.decode_table_entry(e)
        if match["job_id"] == job_id:
            workers.append(e)
    conn.write([conn.update(DELETE, e) for e in workers])
    parents = [
        e
        for e in conn.read([conn.table_entry("parent_table")])
        if conn.decode_table_entry(e)[1]["job_id"] == job_id
    ]
    conn.write([conn.update(DELETE, e) for e in parents])
    if not any(j.mcast_grp == job.mcast_grp for j in jobs.values() if j.job_id != job_id):
        try:
            conn.write([conn.update(DELETE, conn.multicast_group(job.mcast_grp))])
        except P4RuntimeError as e:
            if grpc.StatusCode.NOT_FOUND not in e.codes:
                raise
    return job


__all__ = [
    "install_job",
    "list_jobs",
    "remove_job",
    "reset_pool",
    "run_thrift_cli",
    "thrift_cli_command",
]

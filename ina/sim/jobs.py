"""Several jobs on one switch (ATP's setting), in simulated time: `ina sim allreduce --jobs K`.

K jobs, each with its own N workers, job id, pool of slots and multicast group, run their
allreduces at the same time through one switch (`ina.sim.network`: the pools share the
switch's slot memory; with ``placement="shared"`` worker w of every job sits on host w and
their traffic shares that host's link both ways). Each job is then run alone on the same
network, so that what one job's traffic does to another's is the ratio of the two times.

Every job's sums are checked against its own workers' int32 sum, and against every other
job's (they must differ: the jobs' tensors differ, so a job that decoded another's sums is
caught), under any loss: no job ever sees another's sums (the design's invariant 6).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ina.sim.backends import build
from ina.sim.network import NetworkSpec, OrderedLink, workers_for
from ina.sim.options import describe
from ina.units import plural


def run_together(spec: NetworkSpec, size: int, iters: int, seed: int = 0) -> dict:
    """``spec.jobs`` jobs allreduce ``iters`` tensors of ``size`` float32 each, at once."""
    net = build(spec)
    workers = workers_for(net)
    # each job's tensors from its own seed: the same tensors alone and together
    tensors = []
    for k in range(spec.jobs):
        rng = np.random.default_rng([seed, k])
        per_job = net.job_of.count(k)
        tensors += [rng.standard_normal(size).astype(np.float32) for _ in range(per_job)]

    def program(i: int):
        calls = []
        for _ in range(iters):
            t0 = net.now
            yield from workers[i].allreduce_steps(tensors[i], key="tensor")
            calls.append(net.now - t0)
        return calls

    wall0 = time.perf_counter()
    per_worker = net.run([program(i) for i in range(len(workers))])
    wall = time.perf_counter() - wall0
    jobs = []
    expected = []
    for k in range(spec.jobs):
        mine = [i for i, j in enumerate(net.job_of) if j == k]
        expected.append(np.add.reduce([workers[i].last_ints for i in mine], dtype=np.int32))
    for k in range(spec.jobs):
        mine = [i for i, j in enumerate(net.job_of) if j == k]
        sums = [workers[i].last_int_sums for i in mine]
        jobs.append(
            {
                "job_id": workers[mine[0]].cfg.job_id,
                "call_seconds": [max(per_worker[i][c] for i in mine) for c in range(iters)],
                "finished_at": max(net.workers[i].finished_at for i in mine),
                "exact": all(np.array_equal(s, expected[k]) for s in sums),
                "saw_another_jobs_sums": any(
                    np.array_equal(s, expected[o]) for s in sums for o in range(spec.jobs) if o != k
                ),
                "retransmissions": sum(workers[i].stats.retransmissions for i in mine),
            }
        )
    links = net.links()
    return {
        "jobs": jobs,
        # pairwise different, so that "saw another job's sums" can tell
        "distinct_sums": all(
            not np.array_equal(expected[a], expected[b])
            for a in range(spec.jobs)
            for b in range(a + 1, spec.jobs)
        ),
        "sim_seconds": net.now,
        "packets_on_links": sum(link.packets for link in links),
        "late_packets": sum(link.late for link in links if isinstance(link, OrderedLink)),
        "counters": {k: v[0] for k, v in net.pipeline.counters.snapshot().items()},
        "events": net.engine.events,
        "wall_seconds": wall,
    }


def run(spec: NetworkSpec, size: int, iters: int, seed: int = 0) -> dict:
    """The jobs together, then each alone on the same network; per job, the time of its
    calls both ways and the slowdown (together / alone, over all its calls)."""
    together = run_together(spec, size, iters, seed)
    alone = run_together(replace(spec, jobs=1), size, iters, seed)["jobs"][0]
    # alike jobs on alike links: alone, every job is job 1 (with loss: job 1's draws)
    for job in together["jobs"]:
        job["alone_call_seconds"] = alone["call_seconds"]
        job["alone_seconds"] = alone["finished_at"]
        job["slowdown"] = job["finished_at"] / alone["finished_at"]
    return {
        "model": describe(spec),
        "jobs_count": spec.jobs,
        "placement": spec.placement,
        "switch_slots": spec.switch_slots,
        "size": size,
        "iters": iters,
        "timing_only": spec.timing_only,
        "exact": all(j["exact"] and not j["saw_another_jobs_sums"] for j in together["jobs"]),
        **together,
    }


def print_result(r: dict) -> None:
    print(
        f"model: {r['model']}"
        + (" (timing only: one worker stands for all)" if r["timing_only"] else "")
    )
    hosts = (
        "share hosts: a host's link carries every job"
        if r["placement"] == "shared"
        else "on hosts of their own"
    )
    print(
        f"{r['jobs_count']} jobs on one switch ({r['switch_slots']} slots; workers {hosts}), "
        f"{r['size']:,} float32 values per worker, {plural(r['iters'], 'call')} each"
    )
    print(
        "| job | alone ms | together ms | slowdown | retransmissions | exact "
        "| saw another job's sums |"
    )
    print("|---:|---:|---:|---:|---:|---|---|")
    for j in r["jobs"]:
        print(
            f"| {j['job_id']} | {1e3 * j['alone_seconds']:.4f} | "
            f"{1e3 * j['finished_at']:.4f} | {j['slowdown']:.2f}x | {j['retransmissions']} | "
            f"{'yes' if j['exact'] else 'NO'} | {'YES' if j['saw_another_jobs_sums'] else 'no'} |"
        )
    print(
        f"simulator: {r['sim_seconds'] * 1e3:.3f} ms simulated in {r['wall_seconds']:.2f} s of "
        f"wall time (together), {r['packets_on_links']} packets on links, {r['events']} events"
    )

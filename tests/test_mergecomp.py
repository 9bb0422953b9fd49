"""MergeComp's scheduler: the search, the partition's coverage, the hook in simulation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ina.workload.mergecomp import (
    TensorInfo,
    brute_force,
    by_size,
    check_partition,
    contiguous_partitions,
    iteration_end,
    per_tensor,
    search,
)


def synthetic(m: int, seed: int) -> list[TensorInfo]:
    rng = np.random.default_rng(seed)
    numel = rng.integers(1, 50_000, m)
    ready = np.cumsum(rng.exponential(1e-3, m))
    return [TensorInfo(f"t{i}", int(numel[i]), float(ready[i])) for i in range(m)]


def affine(per_call_s: float, per_value_s: float):
    return lambda n: per_call_s + per_value_s * n


@pytest.mark.parametrize("seed", range(12))
def test_search_finds_the_brute_force_optimum(seed):
    m = 4 + seed % 6  # up to 2^8 = 256 partitions
    tensors = synthetic(m, seed)
    rng = np.random.default_rng(100 + seed)
    cost = affine(rng.uniform(0, 2e-3), rng.uniform(0, 1e-7))
    if seed % 3 == 2:  # a concave, non-affine cost (a codec table's shape)
        cost = lambda n, c=cost: c(n) + 3e-4 * np.sqrt(n)  # noqa: E731
    best, brute = search(tensors, cost), brute_force(tensors, cost)
    assert best.end_s == pytest.approx(brute.end_s, rel=1e-12)
    assert iteration_end(best.groups, tensors, cost) == pytest.approx(best.end_s, rel=1e-12)
    check_partition(best.groups, m)  # every tensor exactly once, in order


def test_the_optimum_of_cases_checked_by_hand():
    # everything ready at once: one call beats several (the per-call cost is paid once)
    same = [TensorInfo(f"t{i}", 10, 0.0) for i in range(5)]
    assert search(same, affine(1.0, 0.01)).groups == ((0, 1, 2, 3, 4),)
    # no per-call cost and gradients far apart: send each as soon as it exists
    apart = [TensorInfo(f"t{i}", 10, float(i)) for i in range(5)]
    best = search(apart, affine(0.0, 0.01))
    assert best.groups == per_tensor(5) and best.end_s == pytest.approx(4.1)
    # two bursts: merge within a burst, not across
    bursts = [TensorInfo(f"t{i}", 10, t) for i, t in enumerate((0, 0, 0, 5, 5, 5))]
    assert search(bursts, affine(1.0, 0.1)).groups == ((0, 1, 2), (3, 4, 5))  # 9, not 12


def test_partitions_cover_every_tensor_exactly_once():
    tensors = synthetic(7, 0)
    assert len(list(contiguous_partitions(7))) == 2**6
    for groups in contiguous_partitions(7):
        check_partition(groups, 7)
    for groups in (per_tensor(7), by_size(tensors, [40_000, 100_000])):
        assert sorted(i for g in groups for i in g) == list(range(7))
    for bad in (((0, 1), (1, 2, 3, 4, 5, 6)), ((0, 1), (3, 4, 5, 6)), ((1, 0), (2, 3, 4, 5, 6))):
        with pytest.raises(ValueError, match="once each"):
            check_partition(bad, 7)
    with pytest.raises(ValueError, match="order backward"):
        search(list(reversed(tensors)), affine(1, 0))


def test_ddp_rule_fills_buckets_up_to_the_cap():
    tensors = [TensorInfo(f"t{i}", n, 0.0) for i, n in enumerate((10, 300_000, 10, 10))]
    # first cap 1 MiB (262,144 values): closed after the tensor that crosses it
    assert by_size(tensors, [1 << 20, 25 << 20]) == ((0, 1), (2, 3))


def test_merged_hook_reduces_each_group_once_and_writes_the_means_back():
    """Two simulated workers, MergedHookState as the DDP hook runs it: each bucket's buffer
    ends up holding the mean of both workers' gradients (int32 fixed point: to ~1e-6)."""
    from ina.compressors import make_communicator
    from ina.host.allreduce import Worker
    from ina.sim.backends import build
    from ina.sim.network import NetworkSpec, SimTransport
    from ina.workload.buckets import SimBucket
    from ina.workload.hook import INAHookState, MergedHookState

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    params = list(model.parameters())[::-1]  # backward order
    groups = [[params[0], params[1]], [params[2]], [params[3]]]
    net = build(NetworkSpec(workers=2, pool_size=8))
    rng = np.random.default_rng(0)
    grads = [[rng.standard_normal(p.numel()) for p in params] for _ in range(2)]
    out: dict[int, list] = {}
    calls: dict[int, int] = {}

    def program(w: int):
        node = net.workers[w]
        comm = make_communicator("none", 2, w, 0)
        worker = Worker(node.core.cfg, transport=SimTransport(node.core), communicator=comm)
        state = MergedHookState(INAHookState(worker, "compressor", start_compress_iter=0), groups)
        buckets = [SimBucket(j, [p], j == len(params) - 1) for j, p in enumerate(params)]
        for j, b in enumerate(buckets):
            b.flat = torch.from_numpy(grads[w][j].copy())
            for k, flat in state.add(b):
                yield from state.group_steps(k, flat)
            state.end_bucket(b, 0.0)
        out[w] = [b.flat.numpy() for b in buckets]
        calls[w] = state.group_calls

    net.run([program(0), program(1)])
    assert calls == {0: 3, 1: 3}  # one call per group
    for j in range(len(params)):
        mean = (grads[0][j] + grads[1][j]) / 2
        for w in range(2):
            np.testing.assert_allclose(out[w][j], mean, atol=1e-6)


def test_the_chosen_partition_is_fastest_in_simulation_and_the_model_predicts_it():
    """A synthetic codec table (250 us per call, gradients 200 us apart) and the simulated network: the searched
    partition's simulated iteration is no slower than per tensor or DDP's buckets, and the
    cost model predicts the simulation."""
    from ina.sim.mergecomp import comm_seconds, simulate
    from ina.sim.network import NetworkSpec
    from ina.workload.mergecomp import TableCost, grid
    from ina.workload.models import build_model

    torch.manual_seed(0)
    model = build_model("cnn1d", (1, 40), 10)
    named = list(model.named_parameters())[::-1]
    spec = NetworkSpec(workers=2, pool_size=16)
    tensors = [TensorInfo(n, p.numel(), 2e-4 * (i + 1)) for i, (n, p) in enumerate(named)]
    total = sum(t.numel for t in tensors)
    sizes = grid(total, 6)
    comm = [comm_seconds(spec, "qsgd", {}, n) for n in sizes]
    cost = TableCost(tuple(sizes), tuple(250e-6 + 1e-8 * n for n in sizes), tuple(comm))
    best = search(tensors, cost)
    parts = {"best": best.groups, "per": per_tensor(len(tensors)), "ddp": ((*range(8),),)}
    sim = {}
    for k, groups in parts.items():
        times = simulate(spec, groups, tensors, model, "qsgd", {}, cost, 1e-3, 1.6e-3, iters=2)
        sim[k] = times[-1]
        predicted = 1e-3 + max(iteration_end(groups, tensors, cost), 1.6e-3)
        assert sim[k] == pytest.approx(predicted, rel=0.02)
    assert sim["best"] <= sim["per"] and sim["best"] <= sim["ddp"]
    assert len(best.groups) not in (1, len(tensors))  # neither extreme wins here


def test_mergecomp_hook_in_real_ddp_through_the_udp_switch(tmp_path):
    """PyTorch's DDP (gloo, one rank) with a bucket per tensor, the hook merging them into
    groups, every group one call through the switch model process over UDP: the gradients
    DDP leaves are the rank's own (the mean over one worker) and each group went once."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ina.compressors import make_communicator
    from ina.host.allreduce import Worker
    from ina.host.launch import LocalSwitch, local_jobs
    from ina.host.transport import WorkerConfig
    from ina.workload.hook import INAHookState, MergedHookState, mergecomp_hook

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Linear(16, 3)
    )
    params = list(model.parameters())[::-1]
    groups = [params[0:3], params[3:4], params[4:6]]  # merged neighbours, nothing split
    jobs = local_jobs(1, pool_size=16)
    spec = jobs[0]
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with LocalSwitch(jobs, lanes=64, grpc=False) as sw:
            addr = spec.workers[0]
            cfg = WorkerConfig(
                job_id=spec.job_id, worker_id=0, num_workers=1, switch=sw.address,
                bind=(addr.ip, addr.udp_port), pool_size=spec.pool_size, lanes=64, timeout=20,
            )  # fmt: skip
            comm = make_communicator("none", 1, 0, 0)
            with Worker(cfg, communicator=comm) as worker:
                inner = INAHookState(worker, "compressor", start_compress_iter=0)
                state = MergedHookState(inner, groups)
                ddp = DistributedDataParallel(model, bucket_cap_mb=1e-6)
                ddp.register_comm_hook(state, mergecomp_hook)
                x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
                for step in range(3):
                    ddp.zero_grad(set_to_none=True)
                    local = torch.autograd.grad(
                        torch.nn.functional.cross_entropy(model(x), y), list(model.parameters())
                    )
                    torch.nn.functional.cross_entropy(ddp(x), y).backward()
                    for p, g in zip(model.parameters(), local, strict=True):
                        torch.testing.assert_close(p.grad, g, atol=1e-6, rtol=0)
                    assert state.group_calls == 3 * (step + 1)
                    assert state.reducer.pending() == []
    finally:
        dist.destroy_process_group()

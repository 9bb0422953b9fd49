"""A DDP communication hook that allreduces gradient buckets through the INA switch.

Shaped like PyTorch's ``torch/distributed/algorithms/ddp_comm_hooks``: a plain function
``ina_allreduce_hook(state, bucket) -> Future`` and a small state object, registered with
``ddp_model.register_comm_hook(state, ina_allreduce_hook)``. DDP keeps doing everything else
(bucketing, overlapping backward with communication, copying results into ``.grad``); the hook
replaces only the gloo/NCCL allreduce of each bucket with `ina.host.allreduce.Worker.allreduce`.

The INA allreduce is synchronous (it returns when the switch has answered every chunk), so the
hook returns an already-completed future; DDP accepts that. DDP launches buckets in index
order on every rank, which is what the switch needs: all workers of a job make the same
sequence of calls, so they agree on every sequence number without talking to each other.
"""

# No ``from __future__ import annotations`` here: DDP's register_comm_hook checks the hook's
# annotations at run time (``bucket: dist.GradBucket``, the Future return type).
import inspect
import time
import warnings

import torch
import torch.distributed as dist

from ina.host.allreduce import Worker
from ina.workload.catalog import MODES


class INAHookState:
    """State of `ina_allreduce_hook` on one rank.

    Args:
        worker: this rank's `Worker` (``worker_id`` = rank); the state does not close it.
        compression: ``dense`` (one SUM round of int32 lanes), ``homomorphic`` (top-k at
            ``density`` with error feedback, OR-aggregated bitmap + count sketch; the Worker
            must be built for it), ``dc2`` (the density follows the level all workers agree
            on through the switch; ``controller`` proposes this worker's level) or
            ``compressor`` (the Worker's GRACE communicator, `ina.compressors`: its method,
            its error feedback, its path through the switch).
        density: fraction of entries sent in ``homomorphic`` mode, in (0, 1).
        start_compress_iter: steps that run dense before compression starts (warm-up, as
            PowerSGD's ``start_powerSGD_iter``). DDP rebuilds its buckets after the first
            step, so a warm-up of at least one step never compresses a bucket whose layout
            is about to change.
        controller: a `ina.control.dc2.DC2Controller` (``dc2`` only); it must also be the
            Worker's RTT listener, so that it sees the delays.
        keep_error_bounds: keep the quantization error bound of each bucket's last result
            (`error_bounds`), for tests that compare against an exact allreduce.
    """

    def __init__(
        self,
        worker: Worker,
        compression: str = "dense",
        density: float = 1.0,
        start_compress_iter: int = 1,
        controller=None,
        keep_error_bounds: bool = False,
    ) -> None:
        if compression not in MODES:
            raise ValueError(f"compression must be one of {MODES}, got {compression!r}")
        if compression == "compressor" and getattr(worker, "communicator", None) is None:
            raise ValueError("compression='compressor' needs a Worker built with a communicator")
        if compression == "homomorphic" and not 0.0 < density < 1.0:
            raise ValueError(f"homomorphic compression needs 0 < density < 1, got {density}")
        if compression == "dense" and density != 1.0:
            raise ValueError("dense mode sends every entry: density must be 1.0")
        if compression == "dc2" and controller is None:
            raise ValueError("dc2 needs a controller (ina.control.dc2.DC2Controller)")
        if compression != "dc2" and controller is not None:
            raise ValueError("a DC2 controller only makes sense with compression='dc2'")
        if start_compress_iter < 0:
            raise ValueError(f"start_compress_iter must be >= 0, got {start_compress_iter}")
        params = inspect.signature(worker.allreduce).parameters
        per_call_density = "density" in params
        if compression == "dense" and not per_call_density and worker.density() < 1.0:
            raise ValueError(f"dense mode, but this Worker compresses at {worker.density()}")
        if compression == "dc2" and getattr(worker, "ladder", None) is None:
            raise ValueError("dc2 needs a Worker built with a level ladder (ladder=...)")
        if compression == "homomorphic" and not per_call_density:
            # Older Worker API: the density is fixed at construction (CompressionConfig).
            if abs(worker.density() - density) > 1e-12:
                raise ValueError(
                    f"this Worker compresses at density {worker.density()}, not {density}: "
                    "build it with compression=CompressionConfig(density=...)"
                )
            if start_compress_iter:
                warnings.warn(
                    "Worker.allreduce takes no per-call density: no dense warm-up",
                    stacklevel=2,
                )
                start_compress_iter = 0
        # Hyperparameters.
        self.worker = worker
        self.compression = compression
        self.density = density
        self.start_compress_iter = start_compress_iter
        self.controller = controller
        self.keep_error_bounds = keep_error_bounds
        # Internal state.
        self.iter = 0  # completed training steps (counted at each step's last bucket)
        self._per_call_density = per_call_density
        self._layouts: dict[int, tuple] = {}  # bucket index -> (parameter id, shape) tuple
        self._generations: dict[int, int] = {}  # bucket index -> layout changes seen
        # Stats.
        self.calls = 0
        self.compressed_calls = 0
        self.values = 0  # gradient values allreduced
        self.seconds = 0.0  # wall time inside Worker.allreduce
        self.layout_changes = 0
        self.error_bounds: dict[int, tuple[list[torch.Tensor], torch.Tensor]] = {}
        self.error: BaseException | None = None  # the first failure, for a clean report
        self._compressed_now = False  # the bucket being reduced is compressed

    def compressing(self) -> bool:
        """Whether this step compresses (after the warm-up, in a compressed mode)."""
        return self.compression != "dense" and self.iter >= self.start_compress_iter

    def residual_key(self, bucket: dist.GradBucket) -> tuple[int, int]:
        """The error-feedback key of a bucket: its index and a layout generation.

        DDP may rebuild its buckets after the first step: a bucket index then holds other
        parameters, or the same ones in another order, possibly with the same total size.
        A residual belongs to positions, so a new layout (parameter identities and shapes)
        starts a new generation, i.e. a fresh residual (the Worker also separates keys by
        size).
        """
        i = bucket.index()
        layout = tuple((id(p), tuple(p.shape)) for p in bucket.parameters())
        old = self._layouts.get(i)
        if old != layout:
            if old is not None:
                self.layout_changes += 1
            self._layouts[i] = layout
            self._generations[i] = self._generations.get(i, -1) + 1
        return (i, self._generations[i])

    def prepare(self, bucket: dist.GradBucket) -> dict:
        """The keyword arguments of this bucket's `Worker.allreduce` call (steps 2-3 of the
        hook): the error-feedback key and density when compressing, a dense call otherwise."""
        kwargs: dict = {"average": True}
        compress = self.compressing()
        if compress:
            kwargs["key"] = self.residual_key(bucket)
            if self.compression == "compressor":
                kwargs["compressor"] = True
            elif self.compression == "homomorphic" and self._per_call_density:
                kwargs["density"] = self.density
        elif self._per_call_density:
            kwargs["density"] = 1.0
        self._compressed_now = compress
        return kwargs

    def finish(self, bucket: dist.GradBucket, seconds: float) -> None:
        """Statistics of the call that just returned; after a step's last bucket, count the
        step and let DC2 propose the next level."""
        self.seconds += seconds
        self.calls += 1
        self.compressed_calls += int(self._compressed_now)
        self.values += bucket.buffer().numel()
        worker = self.worker
        if self.keep_error_bounds and worker.last.error_bound is not None:
            bound = torch.from_numpy(worker.last.error_bound / worker.cfg.num_workers)
            self.error_bounds[bucket.index()] = (list(bucket.parameters()), bound)
        if not bucket.is_last():
            return
        self.iter += 1
        if self.controller is not None:
            level = self.controller.step(worker.clock(), agreed_index=worker.level)
            worker.propose_level(level)


def ina_allreduce_hook(
    state: INAHookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Average a gradient bucket over all workers through the INA switch.

    1. Take the bucket's flat gradient buffer.
    2. During the warm-up (``state.start_compress_iter`` steps), or in ``dense`` mode, call
       ``Worker.allreduce(buffer, average=True)`` dense: a MAX round agrees on one exponent
       per packet-sized block, a SUM round adds the int32-encoded values in the switch, every
       worker decodes the same exact integer sums and divides by N.
    3. Otherwise pass the bucket's error-feedback key (index and layout generation, see
       `INAHookState.residual_key`), and in ``homomorphic`` mode the density: the Worker
       adds the residual, sparsifies, agrees on the union support (OR round) and sums the
       sketched values (SUM round); in ``dc2`` mode the density is the level all workers
       agreed on in the previous call; in ``compressor`` mode the Worker's GRACE
       communicator runs its method's rounds (`ina.compressors`).
    4. Copy the mean into the bucket buffer and return it in a completed future; after the
       step's last bucket, count the step and (DC2) propose the next compression level.

    Every rank decodes the same integers, so all replicas stay bit-identical.

    Example::

        >>> # xdoctest: +SKIP
        >>> worker = Worker(WorkerConfig(job_id=1, worker_id=rank, num_workers=world, ...))
        >>> state = INAHookState(worker)
        >>> ddp_model.register_comm_hook(state, ina_allreduce_hook)
    """
    buffer = bucket.buffer()
    kwargs = state.prepare(bucket)
    t0 = time.perf_counter()
    try:
        mean = state.worker.allreduce(buffer, **kwargs)
    except Exception as e:
        if state.error is None:
            state.error = e
        raise
    buffer.copy_(mean)
    state.finish(bucket, time.perf_counter() - t0)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return fut


class MergedHookState:
    """State of `mergecomp_hook`: a partition of the parameters into groups (MergeComp,
    `ina.workload.mergecomp`), each group reduced as one call once all its gradients are in.

    Args:
        inner: the `INAHookState` whose worker, mode, warm-up and DC2 steps apply; its
            per-call arguments are used with the key ``("group", k)`` per group.
        groups: lists of parameters, each parameter in exactly one group, in the order the
            groups are sent (`ina.workload.mergecomp.search` picks them). Register DDP with a
            small ``bucket_cap_mb`` so that it hands over each gradient as soon as it exists.
    """

    def __init__(self, inner: INAHookState, groups) -> None:
        from ina.workload.mergecomp import GroupReducer

        # Hyperparameters.
        self.inner = inner
        self.reducer = GroupReducer(groups)
        # Internal state: buckets handed over whose groups are not all reduced yet, and where
        # each parameter's gradient lives (its bucket's buffer, offset, size).
        self._waiting: list[tuple[object, set[int], torch.futures.Future]] = []
        self._where: dict[int, tuple[torch.Tensor, int, int]] = {}
        # Stats.
        self.group_calls = 0

    def add(self, bucket, future=None) -> list[tuple[int, torch.Tensor]]:
        """Take a bucket's gradients; the groups it completes, each with its flat gradient."""
        buffer, params = bucket.buffer(), list(bucket.parameters())
        offset, grads = 0, []
        for p in params:
            n = p.numel()
            self._where[id(p)] = (buffer, offset, n)
            grads.append(buffer[offset : offset + n])
            offset += n
        groups = {self.reducer.group_of[id(p)] for p in params}
        self._waiting.append((bucket, groups, future))
        return [(k, torch.cat(parts)) for k, parts in self.reducer.add(params, grads)]

    def kwargs(self, k: int) -> dict:
        """The Worker call's arguments for group ``k`` (the inner state's mode and warm-up)."""
        inner = self.inner
        kwargs: dict = {"average": True}
        compress = inner.compressing()
        if compress:
            kwargs["key"] = ("group", k)
            if inner.compression == "compressor":
                kwargs["compressor"] = True
            elif inner.compression == "homomorphic" and inner._per_call_density:
                kwargs["density"] = inner.density
        elif inner._per_call_density:
            kwargs["density"] = 1.0
        inner._compressed_now = compress
        return kwargs

    def group_steps(self, k: int, flat: torch.Tensor):
        """Reduce group ``k`` (rounds: `ina.host.rounds`), write the mean into its
        parameters' bucket buffers and complete every bucket now fully reduced."""
        mean = yield from self.inner.worker.allreduce_steps(flat, **self.kwargs(k))
        self.group_calls += 1
        offset = 0
        for p in self.reducer.groups[k]:
            buffer, at, n = self._where.pop(id(p))
            buffer[at : at + n].copy_(mean[offset : offset + n])
            offset += n
        still = []
        for bucket, groups, fut in self._waiting:
            groups.discard(k)
            if groups:
                still.append((bucket, groups, fut))
            elif fut is not None:
                fut.set_result(bucket.buffer())
        self._waiting = still
        return mean

    def end_bucket(self, bucket, seconds: float) -> None:
        """After a bucket's groups ran: the inner state's statistics and step counting."""
        if bucket.is_last() and self.reducer.pending():
            raise RuntimeError(f"groups {self.reducer.pending()} incomplete at the last bucket")
        self.inner.finish(bucket, seconds)


def mergecomp_hook(
    state: MergedHookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Reduce gradients in MergeComp's groups instead of DDP's buckets.

    1. Note where the bucket's gradients are and which groups they belong to.
    2. For every group this bucket completes, in order: one `Worker.allreduce` of the
       group's gradients concatenated (compressed as the inner state says, with the group's
       own error-feedback key), and the mean written back into each gradient's bucket.
    3. Return a future that completes once every group touching this bucket is reduced
       (at once, if this bucket completed them all).

    Example::

        >>> # xdoctest: +SKIP
        >>> ddp = DistributedDataParallel(model, bucket_cap_mb=1e-6)   # a bucket per tensor
        >>> groups = [[params[i] for i in g] for g in schedule.groups]  # mergecomp.search
        >>> ddp.register_comm_hook(MergedHookState(INAHookState(worker), groups), mergecomp_hook)
    """
    from ina.host.rounds import run_blocking

    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    t0 = time.perf_counter()
    worker = state.inner.worker
    try:
        for k, flat in state.add(bucket, fut):
            run_blocking(state.group_steps(k, flat), worker.transport.reduce_round)
    except Exception as e:
        if state.inner.error is None:
            state.inner.error = e
        raise
    state.end_bucket(bucket, time.perf_counter() - t0)
    return fut

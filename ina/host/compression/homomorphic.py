"""Lossless homomorphic compression of one bucket's allreduce (after Li et al., ICML'24).

The switch can only OR, add (int32, wrapping) and take the max of integer lanes, so a
compressed allreduce must be built from exactly those. For one bucket of ``n`` int32 values
per worker (zero almost everywhere after sparsification), every worker runs:

1. **Round 1, OR.** Send the bitmap of its non-zero positions (``n / 32`` int32 words,
   ``ina.host.compression.bitmap``); get back the union bitmap. The header's MAX-combined
   ``exp`` and ``level`` fields ride along, so the scale (exponent) and the compression level
   are agreed in the same round: the caller quantizes with the agreed exponent only now.
2. **Size the sketch** from the union's non-zero count ``nnz``, identically on every worker:
   ``ceil(cells_per_nnz * nnz + cells_slack * sqrt(nnz))`` cells, 3 hash partitions, shared seeds
   (``ina.host.compression.sketch``).
3. **Round 2, SUM.** Send the count sketch of its values at the union positions; the switch adds
   the sketches, which is the sketch of the sum (the sketch is linear in int32 arithmetic).
4. **Peel** the summed sketch with cell counts computed locally from the union bitmap. Every
   worker runs the same deterministic decoder on the same inputs, so all of them decode the same
   positions and, if peeling stalls, agree on the same undecoded ones.
5. **Repair** (only if peeling stalled): one dense SUM round of the worker's values at just
   the undecoded positions. The result is exact; a failure is counted, never estimated.

The result equals the dense wrap-around int32 sum of every worker's values, bit for bit.

Value codings for round 2 (``HomomorphicConfig.coding``): ``"sketch"`` as above (Li et al.),
and ``"support"``, which sends the ``nnz`` values at the union positions as plain lanes. Once
the union is known (two rounds), ``"support"`` is smaller than any sketch (``nnz`` lanes against
``~1.23 nnz``) and needs no peeling. Li et al.'s public code (lihy0529/
lossless_homomorphic_compression, benchmark.py) also does two all-reduces, the index and then
the sketch; a sketch sized before the union is known could share a round with the index, which
neither does. Both codings are exact. ``"sketch"`` falls back to ``"support"`` when the sketch would not be
smaller than the dense bucket (union density above ~80 %).

The transport is a ``reduce`` callable (``ina.host.transport``)::

    reduce(values: int32[k], op: Op, exp: int = 0, level: int = 0) -> (int32[k], exp, level)

an exact allreduce through the switch with ``exp`` and ``level`` MAX-combined. ``LocalGroup``
below is an in-process model of the switch's arithmetic for N workers (tests, benchmarks).

Example::

    hc = HomomorphicAllreduce(HomomorphicConfig(cells_per_nnz=1.23, seed=7))
    support = hc.agree_support(grad != 0, reduce, exp=my_exp)   # round 1
    q = quantize(grad, support.exp)                              # int32, zero off the support
    out = hc.reduce_values(q, support, reduce)                   # round 2 (+ repair)
    total = dequantize(out.values, support.exp)

Arrays: the values may be numpy arrays or torch tensors on any device (`ina.host.arrays`);
the codec runs there, and only the lanes of each round (bitmap words, sketch cells, repair
values) go to the host for the transport. Results come back in the values' library and device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ina.host.arrays import Array, as_array, ops
from ina.host.compression import bitmap, sketch
from ina.host.rounds import Reduce, Round, Steps, plain, run_blocking
from ina.protocol import LANE_BYTES, Op


@dataclass(frozen=True)
class HomomorphicConfig:
    """Hyperparameters; every worker of a job must use the same ones."""

    cells_per_nnz: float = sketch.DEFAULT_CELLS_PER_NNZ  # sketch cells per union non-zero
    cells_slack: float = sketch.DEFAULT_CELLS_SLACK  # + this x sqrt(nnz) cells; 0: none
    num_hashes: int = sketch.DEFAULT_NUM_HASHES
    seed: int = 0  # shared hash seed
    coding: str = "sketch"  # round-2 value coding: a key of CODINGS

    def __post_init__(self) -> None:
        if not self.cells_per_nnz > 0:
            raise ValueError(f"cells_per_nnz must be > 0, got {self.cells_per_nnz}")
        if not self.cells_slack >= 0:
            raise ValueError(f"cells_slack must be >= 0, got {self.cells_slack}")
        if not 1 <= self.num_hashes <= 8:
            raise ValueError(f"num_hashes must be in 1..8, got {self.num_hashes}")
        if self.coding not in CODINGS:
            raise ValueError(f"unknown coding {self.coding!r}; known: {sorted(CODINGS)}")

    def sketch_spec(self, nnz: int, salt: int = 0) -> sketch.SketchSpec:
        """The sketch every worker builds for a union of ``nnz`` positions."""
        seed = (self.seed * 0x9E3779B1 + salt) & 0xFFFFFFFFFFFFFFFF
        return sketch.SketchSpec.for_nnz(
            nnz, self.cells_per_nnz, self.num_hashes, seed, self.cells_slack
        )


@dataclass(frozen=True)
class Support:
    """Outcome of round 1: the union support and the agreed header values."""

    n: int  # bucket length
    words: np.ndarray  # union bitmap, int32 words (host: as the switch returned them)
    positions: Array  # sorted int64 indices of the union's set bits (the codec's device)
    exp: int  # MAX over workers
    level: int  # MAX over workers

    @property
    def nnz(self) -> int:
        return ops(self.positions).size(self.positions)

    def mask(self) -> np.ndarray:
        """The union as a bool mask (host)."""
        return bitmap.unpack(self.words, self.n)


@dataclass(frozen=True)
class AllreduceResult:
    """Outcome of one compressed allreduce on one worker."""

    values: Array  # dense int32 sum over workers (length n, zero off the support)
    support: Support
    coding: str  # what round 2 actually sent: "sketch", "support" or "none" (empty union)
    lanes: int  # int32 lanes this worker sent in round 2
    repaired: int  # positions repaired by a dense SUM round (0 if peeling finished)
    passes: int  # peeling passes (0 if no sketch)
    bytes_round1: int  # payload bytes this worker sent per round (lanes only, no headers)
    bytes_round2: int
    bytes_repair: int

    @property
    def exp(self) -> int:
        return self.support.exp

    @property
    def level(self) -> int:
        return self.support.level

    @property
    def bytes_sent(self) -> int:
        return self.bytes_round1 + self.bytes_round2 + self.bytes_repair


@dataclass
class HomomorphicStats:
    """Running totals over the allreduces of one ``HomomorphicAllreduce``."""

    calls: int = 0
    elements: int = 0  # bucket positions reduced (dense int32 would send 4 bytes each)
    union_nnz: int = 0
    bytes_round1: int = 0
    bytes_round2: int = 0
    bytes_repair: int = 0
    peel_failures: int = 0  # calls whose peeling stalled and needed a repair round
    repaired_positions: int = 0
    fallbacks: int = 0  # calls where "sketch" sent the support instead (sketch not smaller)

    @property
    def bytes_sent(self) -> int:
        return self.bytes_round1 + self.bytes_round2 + self.bytes_repair

    @property
    def compression_ratio(self) -> float:
        """Dense int32 bytes over bytes actually sent (higher is better)."""
        return LANE_BYTES * self.elements / self.bytes_sent if self.bytes_sent else float("inf")

    def add(self, result: AllreduceResult) -> None:
        self.calls += 1
        self.elements += result.support.n
        self.union_nnz += result.support.nnz
        self.bytes_round1 += result.bytes_round1
        self.bytes_round2 += result.bytes_round2
        self.bytes_repair += result.bytes_repair
        self.peel_failures += result.repaired > 0
        self.repaired_positions += result.repaired


def repair_steps(values: Array, positions: Array, exp: int = 0, level: int = 0) -> Steps[Array]:
    """Exact sums at ``positions`` by one dense SUM round of this worker's ``values`` there.

    Every worker must call it with the same ``positions`` (they do: peeling is deterministic).
    """
    xp = ops(values)
    lanes = xp.to_host(xp.astype(xp.gather(values, positions), xp.int32))
    summed = yield Round(lanes, Op.SUM, exp, level)
    return xp.asarray(summed.values)


def repair(values: Array, positions: Array, reduce: Reduce, exp: int = 0, level: int = 0) -> Array:
    """`repair_steps` with a blocking ``reduce`` callable."""
    return run_blocking(repair_steps(values, positions, exp, level), plain(reduce))


@dataclass(frozen=True)
class _Round2:
    """What a value coding returns: sums at the support positions and what it cost."""

    sums: Array  # int32, one per support position
    coding: str
    lanes: int
    repaired: int = 0
    passes: int = 0


def _code_support(cfg: HomomorphicConfig, vals, support, salt) -> Steps[_Round2]:
    """Round 2 as plain lanes: this worker's values at the union positions, summed."""
    xp = ops(vals)
    sums = yield Round(xp.to_host(vals), Op.SUM, support.exp, support.level)
    return _Round2(xp.asarray(sums.values), "support", xp.size(vals))


def _code_sketch(cfg: HomomorphicConfig, vals, support, salt) -> Steps[_Round2]:
    """Round 2 as a count sketch, peeled, with a repair round for whatever does not peel."""
    spec = cfg.sketch_spec(support.nnz, salt)
    if spec.cells >= support.n:  # no smaller than dense: the support lanes are cheaper still
        return (yield from _code_support(cfg, vals, support, salt))
    xp = ops(vals)
    table = sketch.Table(support.positions, spec)
    lanes = table.encode(vals)
    if not table.fits:  # a cell of 32 positions, or over ~4M of them: plain lanes
        return (yield from _code_support(cfg, vals, support, salt))
    summed = yield Round(xp.to_host(lanes), Op.SUM, support.exp, support.level)
    peeled = table.peel(xp.asarray(summed.values))
    if not peeled.consistent:
        raise RuntimeError(
            "summed sketch is inconsistent with the union support: a worker used other "
            "seeds/sizes or sent values outside the union; refusing to return its decode"
        )
    sums = peeled.values
    undecoded = peeled.undecoded
    repaired = xp.size(undecoded)
    if repaired:
        fixed = yield from repair_steps(vals, undecoded, support.exp, support.level)
        xp.scatter(sums, undecoded, fixed)
    return _Round2(sums, "sketch", spec.cells, repaired, peeled.passes)


CODINGS: dict[str, Callable[..., Steps[_Round2]]] = {
    "sketch": _code_sketch,
    "support": _code_support,
}


class HomomorphicAllreduce:
    """Two-round exact compressed allreduce of int32 buckets (see the module docstring).

    One instance per worker (or per worker and bucket stream); ``stats`` accumulates. Each
    protocol step exists as a generator of rounds (``*_steps``, `ina.host.rounds`) and as a
    blocking call taking a ``reduce`` callable.
    """

    def __init__(self, config: HomomorphicConfig | None = None) -> None:
        # hyperparameters
        self.config = config or HomomorphicConfig()
        # stats
        self.stats = HomomorphicStats()

    def agree_support_steps(self, mask: Array, exp: int = 0, level: int = 0) -> Steps[Support]:
        """Round 1: OR the workers' non-zero bitmaps; MAX-combine ``exp`` and ``level``."""
        mask = as_array(mask)
        return (yield from _agree_words_steps(bitmap.pack(mask), mask.shape[0], exp, level))

    def agree_support(self, mask: Array, reduce: Reduce, exp: int = 0, level: int = 0) -> Support:
        """`agree_support_steps` with a blocking ``reduce`` callable."""
        return run_blocking(self.agree_support_steps(mask, exp, level), plain(reduce))

    def agree_indices_steps(
        self, indices: Array, n: int, exp: int = 0, level: int = 0
    ) -> Steps[Support]:
        """`agree_support_steps` for the mask of ``n`` positions that is True exactly at
        ``indices`` (distinct): a sparsifier's output, without building the mask."""
        words = bitmap.pack_indices(as_array(indices), n)
        return (yield from _agree_words_steps(words, n, exp, level))

    def reduce_values_steps(
        self, values: Array, support: Support, salt: int = 0
    ) -> Steps[AllreduceResult]:
        """Round 2 (and the repair round if needed): the exact int32 sum on the support.

        ``values`` is this worker's dense int32 bucket; it must be zero off ``support``.
        ``salt`` varies the hash seeds (all workers must pass the same one).
        """
        return (yield from self._reduce_values_steps(values, support, salt, None))

    def _reduce_values_steps(
        self, values: Array, support: Support, salt: int, nonzeros: int | None
    ) -> Steps[AllreduceResult]:
        """`reduce_values_steps`; ``nonzeros``: the count of non-zero ``values`` if known
        (saves a pass over the dense bucket)."""
        values = as_array(values)
        xp = ops(values)
        if values.dtype != xp.int32 or tuple(values.shape) != (support.n,):
            raise ValueError(
                f"values must be int32 of shape ({support.n},), got {values.dtype} "
                f"{tuple(values.shape)}"
            )
        positions = xp.asarray(support.positions)  # a no-op unless the caller mixed devices
        vals = xp.gather(values, positions)
        if nonzeros is None:
            nonzeros = xp.count_nonzero(values)
        if xp.count_nonzero(vals) != nonzeros:
            raise ValueError("values has non-zeros outside the agreed support (round-1 mask)")
        out = xp.zeros(support.n, xp.int32)
        if support.nnz:
            r2 = yield from CODINGS[self.config.coding](self.config, vals, support, salt)
            xp.scatter(out, positions, r2.sums)
        else:  # every worker sees the empty union: nothing to send
            r2 = _Round2(xp.zeros(0, xp.int32), "none", 0)
        result = AllreduceResult(
            values=out,
            support=support,
            coding=r2.coding,
            lanes=r2.lanes,
            repaired=r2.repaired,
            passes=r2.passes,
            bytes_round1=LANE_BYTES * support.words.size,
            bytes_round2=LANE_BYTES * r2.lanes,
            bytes_repair=LANE_BYTES * r2.repaired,
        )
        self.stats.add(result)
        self.stats.fallbacks += r2.coding != self.config.coding and r2.coding != "none"
        return result

    def reduce_values(
        self, values: Array, support: Support, reduce: Reduce, salt: int = 0
    ) -> AllreduceResult:
        """`reduce_values_steps` with a blocking ``reduce`` callable."""
        return run_blocking(self.reduce_values_steps(values, support, salt), plain(reduce))

    def allreduce_int_steps(
        self, values: Array, exp: int = 0, level: int = 0, salt: int = 0
    ) -> Steps[AllreduceResult]:
        """Both rounds for values already in int32: support = ``values != 0``."""
        values = as_array(values)
        if values.dtype != ops(values).int32 or values.ndim != 1:
            raise ValueError(f"values must be 1-D int32, got {values.dtype} {tuple(values.shape)}")
        mask = values != 0
        support = yield from self.agree_support_steps(mask, exp, level)
        nonzeros = ops(mask).count_nonzero(mask)  # a quarter of the bytes of the values
        return (yield from self._reduce_values_steps(values, support, salt, nonzeros))

    def allreduce_int(
        self,
        values: Array,
        reduce: Reduce,
        exp: int = 0,
        level: int = 0,
        salt: int = 0,
    ) -> AllreduceResult:
        """`allreduce_int_steps` with a blocking ``reduce`` callable."""
        return run_blocking(self.allreduce_int_steps(values, exp, level, salt), plain(reduce))


def _agree_words_steps(words: Array, n: int, exp: int, level: int) -> Steps[Support]:
    """Round 1 on packed words: send them (host lanes), get the union, list its positions."""
    xp = ops(words)
    union = yield Round(xp.to_host(words), Op.OR, exp, level)
    positions = bitmap.positions(xp.asarray(union.values), n)
    return Support(n, union.values, positions, union.exp, union.level)


# --- an in-process model of the switch, for tests and benchmarks ---------------------------


def combine(op: Op, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """What the switch computes from the workers' lanes: int32 wrap-around SUM, OR or MAX."""
    stacked = np.stack([np.asarray(a, np.int32) for a in arrays])
    if op == Op.SUM:
        return np.add.reduce(stacked, axis=0, dtype=np.int32)  # wraps modulo 2**32
    if op == Op.OR:
        return np.bitwise_or.reduce(stacked, axis=0)
    if op == Op.MAX:
        return np.max(stacked, axis=0)
    raise ValueError(f"unknown op {op!r}")


@dataclass
class LocalGroup:
    """N workers in one process, each with a blocking ``reduce`` that combines like the switch.

    ``run(fn)`` calls ``fn(worker, reduce)`` in one thread per worker and returns the results
    in worker order. Each reduce call waits for all workers (``timeout`` seconds at most), then
    returns ``combine(op, lanes)`` and the MAX of ``exp`` and ``level``. ``lanes_sent[w]``
    counts the int32 lanes worker ``w`` contributed.
    """

    num_workers: int
    timeout: float = 30.0
    lanes_sent: list[int] = field(init=False)
    calls: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")
        self.lanes_sent = [0] * self.num_workers
        self._rounds = [0] * self.num_workers  # reduce calls made by each worker
        self._inbox: list = [None] * self.num_workers
        self._result: tuple = ()
        self._barrier = threading.Barrier(self.num_workers, action=self._combine)

    def _combine(self) -> None:
        ops = {(op, a.size) for a, op, _, _ in self._inbox}
        if len(ops) != 1:
            raise ValueError(f"workers disagree on the op or length of a round: {sorted(ops)}")
        ((op, _),) = ops
        lanes = combine(op, [a for a, _, _, _ in self._inbox])
        self._result = (
            lanes,
            max(e for _, _, e, _ in self._inbox),
            max(lv for _, _, _, lv in self._inbox),
        )
        self.calls += 1

    def reducer(self, worker: int) -> Reduce:
        """The ``reduce`` callable of ``worker``."""

        def reduce(values: np.ndarray, op: Op, exp: int = 0, level: int = 0):
            values = np.asarray(values, np.int32)
            self._inbox[worker] = (values.copy(), Op(op), int(exp), int(level))
            self.lanes_sent[worker] += values.size
            self._rounds[worker] += 1
            try:
                self._barrier.wait(self.timeout)
            except threading.BrokenBarrierError:
                mine = self._rounds[worker]
                missing = [w for w, r in enumerate(self._rounds) if r < mine]
                raise TimeoutError(
                    f"worker {worker}: round {mine} incomplete, workers missing: {missing}"
                ) from None
            lanes, e, lv = self._result
            return lanes.copy(), e, lv

        return reduce

    def run(self, fn: Callable[[int, Reduce], object]) -> list:
        """Run ``fn(worker, reduce)`` on every worker concurrently; re-raise the first error."""
        results: list = [None] * self.num_workers
        errors: list = []

        def body(w: int) -> None:
            try:
                results[w] = fn(w, self.reducer(w))
            except BaseException as exc:  # report it and release the other workers
                errors.append(exc)
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(w,)) for w in range(self.num_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self._barrier.reset()
            raise min(errors, key=lambda e: isinstance(e, TimeoutError))  # the cause first
        return results

"""GRACE's compressor contract in `ina`, and the integer rounds every method is built from.

GRACE (Xu et al., ICDCS'21) splits gradient compression into a **compressor**
(``compress(tensor) -> payload, context`` and ``decompress``), a **memory** (error feedback:
``compensate`` before compressing, ``update`` after; `ina.compressors.memory`) and a
**communicator** that fixes the order of the steps (`ina.compressors.communicator`). Here the
context is a frozen dataclass per method, methods are found in a registry by name
(`COMPRESSORS`, `make_compressor`), and the communication is not an MPI collective but a
conversation with a switch that can only add int32 lanes (wrapping), OR them, and take their
signed MAX. So each compressor also says how the switch aggregates it (`Aggregation`) and
implements it as a generator of rounds (`ina.host.rounds`):

``SUM``
    the payload is integers whose sum *is* the aggregate: shared-parameter quantizers (a norm,
    scale or exponent agreed in a MAX round first), packed several to a lane with headroom
    (`ina.compressors.packing`), random-k with a shared seed, PowerSGD's factors;
``UNION``
    sparse payloads with different supports per worker: the lossless two-round union path of
    `ina.host.compression.homomorphic` (OR of bitmaps, then SUM of the values);
``ALLGATHER``
    what no sum can aggregate (natural compression's exponents): each worker writes its payload
    into its own slice of one SUM round, zeros elsewhere, so the switch's sum is the
    concatenation of all N payloads, and every worker pays for all N of them.

``Compressor.reduce_steps(x, key)`` runs a method's rounds and returns a `Reduction`: the
aggregate, what this worker contributed (for error feedback), and the exact integers this
worker encoded and the switch summed, per SUM stage (tests compare them with a host-side sum).
"""

from __future__ import annotations

import abc
import enum
import inspect
import zlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ina.compressors.packing import Packing
from ina.host.quantize import mantissa_bits
from ina.host.rounds import Round, Steps
from ina.protocol import LANE_BYTES, MAX_WORKERS, Op
from ina.registry import registrar


class Aggregation(enum.Enum):
    """How the switch aggregates a method's payload."""

    SUM = "sum"  # integer sums in the switch
    UNION = "union"  # OR of supports, then SUM of values (lossless union path)
    ALLGATHER = "allgather"  # N disjoint slices in one SUM round: N payloads on the wire


@dataclass(frozen=True)
class Context:
    """What ``decompress`` needs besides the payload; methods extend it."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Field:
    """Integers one worker sends in a SUM round, each in ``[lo, hi]`` (packed with headroom)."""

    values: np.ndarray
    lo: int
    hi: int


@dataclass(frozen=True)
class Outcome:
    """What a method's rounds produce on one worker (flat float64 arrays)."""

    total: np.ndarray  # sum over workers of their decoded contributions
    sent: np.ndarray  # this worker's own decoded contribution
    encoded: tuple[np.ndarray, ...] = ()  # this worker's integers, per SUM stage
    summed: tuple[np.ndarray, ...] = ()  # the switch's exact sums of them, per SUM stage


@dataclass(frozen=True)
class Reduction:
    """Outcome of one bucket's in-network aggregation on one worker."""

    grad: np.ndarray  # what the optimizer applies: mean over workers, or the method's vote
    total: np.ndarray  # sum over workers of their decoded contributions
    sent: np.ndarray  # this worker's decoded contribution (error feedback subtracts it)
    encoded: tuple[np.ndarray, ...]  # this worker's integers per SUM stage (unpacked)
    summed: tuple[np.ndarray, ...]  # the exact integer sums per SUM stage (unpacked)
    rounds: tuple[tuple[Op, int], ...]  # (op, lanes this worker sent) per round

    @property
    def lanes(self) -> int:
        return sum(n for _, n in self.rounds)

    @property
    def bytes_sent(self) -> int:
        """Lane payload bytes this worker sent (packet headers not included)."""
        return LANE_BYTES * self.lanes

    def bits_per_value(self) -> float:
        """Lane bits sent per value of the tensor (dense int32: 32 plus an exponent share)."""
        return 8 * self.bytes_sent / max(self.grad.size, 1)


# --- the compressor contract --------------------------------------------------------------


class Compressor(abc.ABC):
    """One gradient compression method (GRACE's ``Compressor``) and its switch aggregation.

    Every worker of a job builds its compressor with the same hyperparameters, the job's
    ``num_workers``, its own ``worker`` id and a shared ``seed``; it must call
    ``reduce_steps`` for the same bucket keys in the same order as the other workers (per key
    step counters keep shared random choices in step).
    """

    name: ClassVar[str]
    aggregation: ClassVar[Aggregation]
    memory: ClassVar[str] = "none"  # the error feedback of the method's paper
    summary: ClassVar[str] = ""  # one line for tables

    def __init__(self, num_workers: int = 1, worker: int = 0, seed: int = 0) -> None:
        if not 1 <= num_workers <= MAX_WORKERS:
            raise ValueError(f"num_workers must be in 1..{MAX_WORKERS}, got {num_workers}")
        if not 0 <= worker < num_workers:
            raise ValueError(f"worker must be in 0..{num_workers - 1}, got {worker}")
        # hyperparameters
        self.num_workers = num_workers
        self.worker = worker
        self.seed = seed
        # internal state: how often each bucket key was compressed (same on every worker)
        self._steps: dict[Hashable, int] = {}

    # GRACE's contract, one worker on its own --------------------------------------------

    @abc.abstractmethod
    def compress(self, tensor: np.ndarray, key: Hashable = "") -> tuple[object, Context]:
        """This worker's payload and context, with its own (not agreed) parameters."""

    @abc.abstractmethod
    def decompress(self, payload: object, ctx: Context) -> np.ndarray:
        """The tensor a payload stands for (shape and dtype of the input)."""

    # in the network ------------------------------------------------------------------

    def reduce_steps(self, tensor: np.ndarray, key: Hashable = "") -> Steps[Reduction]:
        """Aggregate ``tensor`` over all workers through the switch: yields the rounds."""
        x, flat = float_input(tensor)
        step = self._next_step(key)
        rounds: list[tuple[Op, int]] = []
        out = yield from _tally(self._reduce_steps(flat, key, step, x.shape), rounds)
        return Reduction(
            grad=_like(self.finish(out.total), x),
            total=_like(out.total, x),
            sent=_like(out.sent, x),
            encoded=out.encoded,
            summed=out.summed,
            rounds=tuple(rounds),
        )

    @abc.abstractmethod
    def _reduce_steps(
        self, flat: np.ndarray, key: Hashable, step: int, shape: tuple[int, ...]
    ) -> Steps[Outcome]:
        """The method's rounds for the flat float64 copy of a tensor of ``shape``; ``step``
        counts the calls for ``key`` (the same on every worker)."""

    def finish(self, total: np.ndarray) -> np.ndarray:
        """The gradient to apply from the sum of contributions: the mean by default."""
        return total / self.num_workers

    # helpers -----------------------------------------------------------------------

    def _next_step(self, key: Hashable) -> int:
        step = self._steps.get(key, 0)
        self._steps[key] = step + 1
        return step

    def rng(self, key: Hashable, step: int, shared: bool = False) -> np.random.Generator:
        """Random numbers for one call: per worker, or ``shared`` (the same on every worker)."""
        entropy = [self.seed & 0xFFFFFFFF, key_hash(key), step]
        if not shared:
            entropy.append(self.worker)
        return np.random.default_rng(entropy)

    def params(self) -> dict[str, object]:
        """The hyperparameters (keyword arguments of the class) and their values."""
        return {p: getattr(self, p) for p in hyperparameters(type(self))}


COMPRESSORS: dict[str, type[Compressor]] = {}

register = registrar(COMPRESSORS, "compressor")
"""Class decorator: ``@register("name")`` makes a compressor available under ``name``."""


def hyperparameters(cls: type) -> dict[str, object]:
    """A class's keyword-only constructor parameters and their defaults."""
    sig = inspect.signature(cls.__init__)
    return {
        p.name: p.default
        for p in sig.parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def coerce(owner: str, name: str, value: object, default: object) -> object:
    """``value`` (a string from the command line, or already typed) as the type of
    ``default``; ValueError in one line if it is not one."""
    if not isinstance(value, str) or isinstance(default, str) or default is None:
        return value
    text = value.strip()
    try:
        if isinstance(default, bool):
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}.get(
            type(default), type(default).__name__
        )
        raise ValueError(f"{owner}: {name}={value!r} is not {kind}") from None
    return value


def compressor_class(name: str) -> type[Compressor]:
    """The class registered as ``name`` (ValueError in one line naming the known ones)."""
    try:
        return COMPRESSORS[name]
    except KeyError:
        known = ", ".join(sorted(COMPRESSORS))
        raise ValueError(f"unknown compressor {name!r}; known: {known}") from None


def make_compressor(
    name: str, num_workers: int = 1, worker: int = 0, seed: int = 0, **params: object
) -> Compressor:
    """The compressor registered as ``name``; string ``params`` are converted to the type of
    each parameter's default. Unknown names and arguments are one-line ValueErrors."""
    cls = compressor_class(name)
    known = hyperparameters(cls)
    for p in params:
        if p not in known:
            raise ValueError(f"{name}: unknown argument {p!r}; known: {', '.join(known) or 'none'}")
    typed = {p: coerce(name, p, v, known[p]) for p, v in params.items()}
    return cls(num_workers, worker, seed, **typed)


# --- building blocks: rounds ----------------------------------------------------------------


def key_hash(key: Hashable) -> int:
    """A stable 32-bit hash of a bucket key (``hash`` is salted per process)."""
    return zlib.crc32(repr(key).encode())


def _tally(steps: Steps, rounds: list[tuple[Op, int]]) -> Steps:
    """Run ``steps``, noting the op and lane count of every round it yields."""
    try:
        rnd = next(steps)
        while True:
            rounds.append((Op(rnd.op), int(np.size(rnd.values))))
            rnd = steps.send((yield rnd))
    except StopIteration as stop:
        return stop.value


def length_lanes(n: int) -> np.ndarray:
    """Two MAX lanes that reveal a length disagreement: ``n`` and ``-n``."""
    return np.array([n, -n], np.int32)


def length_check(n: int):
    """A round ``check`` for `length_lanes` at the front of a MAX round."""

    def check(lanes: np.ndarray) -> None:
        if np.size(lanes) < 2:  # a first chunk of one lane: checked with the whole round
            return
        hi, lo = int(lanes[0]), -int(lanes[1])
        if hi != n or lo != n:
            raise ValueError(f"workers disagree on the tensor length (between {lo} and {hi})")

    return check


def agree_max_steps(stats: np.ndarray, n: int) -> Steps[np.ndarray]:
    """One MAX round of int32 ``stats`` (behind two length lanes); the agreed values."""
    lanes = np.concatenate([length_lanes(n), np.asarray(stats, np.int32).reshape(-1)])
    res = yield Round(lanes, Op.MAX, check=length_check(n))
    return res.values[2:]


def sum_fields_steps(fields: Sequence[Field], num_workers: int) -> Steps[tuple[np.ndarray, ...]]:
    """One SUM round of several integer fields, each packed with headroom for ``num_workers``;
    the exact sums (int64), one array per field. Every worker must send the same sizes and
    ranges. No round at all if there is nothing to send."""
    packs = [Packing.for_range(f.lo, f.hi, num_workers) for f in fields]
    lanes = [p.pack(f.values) for p, f in zip(packs, fields, strict=True)]
    sizes = [a.size for a in lanes]
    if not sum(sizes):
        return tuple(np.zeros(0, np.int64) for _ in fields)
    summed = yield Round(np.concatenate(lanes), Op.SUM)
    parts = np.split(summed.values, np.cumsum(sizes)[:-1])
    return tuple(
        p.unpack(s, np.size(f.values)) for p, s, f in zip(packs, parts, fields, strict=True)
    )


def allgather_steps(lanes: np.ndarray, num_workers: int, worker: int) -> Steps[np.ndarray]:
    """Every worker's int32 ``lanes`` (all the same length), as rows of an (N, len) array.

    One SUM round of ``N * len`` lanes; worker ``w`` fills slice ``w`` and sends zeros
    elsewhere, so the sum is the concatenation: all N payloads travel, to and from every
    worker.
    """
    lanes = np.asarray(lanes, np.int32).reshape(-1)
    out = np.zeros((num_workers, lanes.size), np.int32)
    if not lanes.size:
        return out
    out[worker] = lanes
    res = yield Round(out.reshape(-1), Op.SUM)
    return res.values.reshape(num_workers, lanes.size)


# --- building blocks: encodings -------------------------------------------------------------


def float_bits(a: np.ndarray) -> np.ndarray:
    """Non-negative floats as int32 lanes whose signed MAX is the MAX of the floats (float32
    bit patterns, rounded up so that the agreed value is never below a worker's own)."""
    a = np.asarray(a, np.float64)
    f = a.astype(np.float32)
    f = np.where(f < a, np.nextafter(f, np.float32(np.inf)), f).astype(np.float32)
    return f.view(np.int32)


def bits_float(lanes: np.ndarray) -> np.ndarray:
    """Inverse of `float_bits`: float64 values of agreed int32 lanes."""
    return np.asarray(lanes, np.int32).view(np.float32).astype(np.float64)


def fixed_bits(num_workers: int) -> int:
    """Bits of a fixed-point value in [-1, 1] whose sum over N workers fits in int32."""
    return mantissa_bits(num_workers)  # 30 - ceil(log2 N)


def to_fixed(x: np.ndarray, scale: np.ndarray, num_workers: int) -> np.ndarray:
    """``x / scale`` (|x| <= scale) as integers in ``[-2^B, 2^B]``, B = `fixed_bits`."""
    one = float(1 << fixed_bits(num_workers))
    safe = np.where(scale > 0, scale, 1.0)
    return np.clip(np.rint(np.asarray(x) / safe * one), -one, one).astype(np.int64)


def from_fixed(q: np.ndarray, scale: np.ndarray, num_workers: int) -> np.ndarray:
    """Inverse of `to_fixed` (on one worker's integers or on their sum)."""
    return np.asarray(q, np.float64) * (np.asarray(scale) / float(1 << fixed_bits(num_workers)))


def fixed_field(x: np.ndarray, scale: np.ndarray, num_workers: int) -> Field:
    """A `Field` of `to_fixed` values."""
    one = 1 << fixed_bits(num_workers)
    return Field(to_fixed(x, scale, num_workers), -one, one)


def blocks(n: int, block: int) -> tuple[int, int]:
    """``(block size, number of blocks)`` covering ``n`` values; ``block=0``: one block."""
    size = n if block <= 0 else block
    size = max(size, 1)
    return size, -(-n // size)


def block_reduce(x: np.ndarray, block: int, fn) -> np.ndarray:
    """``fn(rows, axis=1)`` over zero-padded blocks of flat ``x``."""
    size, nb = blocks(x.size, block)
    padded = np.zeros(nb * size, np.float64)
    padded[: x.size] = x
    return fn(padded.reshape(nb, size), axis=1)


def per_value(per_block: np.ndarray, n: int, block: int) -> np.ndarray:
    """Expand one value per block to one per element."""
    size, _ = blocks(n, block)
    return np.repeat(per_block, size)[:n]


def float_input(tensor) -> tuple[np.ndarray, np.ndarray]:
    """The tensor as a numpy array and its flat float64 copy; non-finite values refused."""
    x = np.asarray(tensor)
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"a compressor takes floating-point tensors, got {x.dtype}")
    flat = x.reshape(-1).astype(np.float64)
    if not np.isfinite(flat).all():
        i = int(np.flatnonzero(~np.isfinite(flat))[0])
        raise ValueError(f"tensor has a non-finite value ({flat[i]}) at index {i}")
    return x, flat


def _like(flat: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``flat`` in the shape and dtype of ``x``."""
    return np.asarray(flat).astype(x.dtype, copy=False).reshape(x.shape)


def context(x: np.ndarray) -> dict[str, object]:
    """The base `Context` fields of a tensor."""
    return {"shape": tuple(np.shape(x)), "dtype": np.asarray(x).dtype.str}


def restore(flat: np.ndarray, ctx: Context) -> np.ndarray:
    """A flat decode in the context's shape and dtype."""
    return np.asarray(flat).astype(np.dtype(ctx.dtype), copy=False).reshape(ctx.shape)

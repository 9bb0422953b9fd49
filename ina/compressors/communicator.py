"""GRACE's communicator: the one place that fixes the order of a compressed step.

For one bucket on one worker::

    x = memory.compensate(grad, key)             # gradient + what error feedback carried over
    red = yield from compressor.reduce_steps(x)  # agree, encode, aggregate in the switch, decode
    memory.update(key, x, red.sent)              # keep what was not sent
    return red                                   # red.grad: what the optimizer applies

`Communicator.step_steps` is that, as a generator of rounds (`ina.host.rounds`), so that a
blocking transport (`Communicator.step`), `LocalGroup` in tests, or a simulator drive the
same code. `make_communicator` builds one from a method name and ``key=value`` arguments
(the command line's ``--compressor NAME --compressor-arg key=value``), with the method's own
error feedback unless ``memory=`` says otherwise.

Example::

    comm = make_communicator("qsgd", num_workers=4, worker=rank, seed=7, levels="7")
    red = comm.step(grad, key="bucket0", reduce=transport_reduce)   # blocking
    grad[:] = red.grad
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from ina.compressors.base import (
    Compressor,
    Reduction,
    coerce,
    compressor_class,
    hyperparameters,
    make_compressor,
)
from ina.compressors.memory import MEMORIES, Memory
from ina.host.rounds import Reduce, Steps, plain, run_blocking


class Communicator:
    """A compressor with its memory; ``step_steps`` runs one bucket's compressed step."""

    def __init__(self, compressor: Compressor, memory: Memory) -> None:
        self.compressor = compressor
        self.memory = memory

    @property
    def name(self) -> str:
        return self.compressor.name

    def step_steps(self, grad: np.ndarray, key: Hashable = "") -> Steps[Reduction]:
        """Compensate, aggregate through the switch, update the memory: the rounds."""
        x = self.memory.compensate(np.asarray(grad), key)
        red = yield from self.compressor.reduce_steps(x, key)
        self.memory.update(key, x, red.sent)
        return red

    def step(self, grad: np.ndarray, key: Hashable, reduce: Reduce) -> Reduction:
        """`step_steps` with a blocking ``reduce(values, op, exp, level)`` callable."""
        return run_blocking(self.step_steps(grad, key), plain(reduce))


def parse_args(pairs: Sequence[str]) -> dict[str, str]:
    """``["key=value", ...]`` as a dict; ValueError in one line for a malformed pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        key = key.strip()
        if not eq or not key or not key.isidentifier():
            raise ValueError(f"compressor argument {pair!r} is not key=value")
        if key in out:
            raise ValueError(f"compressor argument {key!r} given twice")
        out[key] = value
    return out


def make_communicator(
    name: str,
    num_workers: int = 1,
    worker: int = 0,
    seed: int = 0,
    args: Mapping[str, object] | Sequence[str] = (),
    **kwargs: object,
) -> Communicator:
    """The communicator for compressor ``name``.

    ``args`` (a mapping, or ``key=value`` strings) and ``kwargs`` set the compressor's
    hyperparameters and its memory's; ``memory=NAME`` replaces the method's own error feedback
    (``none``, ``residual``, ``dgc``, ``momentum``). Strings are converted to each parameter's
    type. Unknown names, unknown arguments and bad values are one-line ValueErrors.
    """
    if isinstance(args, str):
        args = [args]
    params: dict[str, object] = dict(parse_args(args) if _is_pairs(args) else args)
    for k, v in kwargs.items():
        if k in params:
            raise ValueError(f"compressor argument {k!r} given twice")
        params[k] = v
    cls = compressor_class(name)
    mem_name = str(params.pop("memory", cls.memory))
    try:
        mem_cls = MEMORIES[mem_name]
    except KeyError:
        raise ValueError(
            f"{name}: unknown memory {mem_name!r}; known: {', '.join(sorted(MEMORIES))}"
        ) from None
    comp_known, mem_known = hyperparameters(cls), hyperparameters(mem_cls)
    comp_args: dict[str, object] = {}
    mem_args: dict[str, object] = {}
    for k, v in params.items():
        if k in comp_known:
            comp_args[k] = v
        elif k in mem_known:
            mem_args[k] = coerce(f"{name} ({mem_name} memory)", k, v, mem_known[k])
        else:
            known = [*comp_known, *mem_known, "memory"]
            raise ValueError(f"{name}: unknown argument {k!r}; known: {', '.join(known)}")
    compressor = make_compressor(name, num_workers, worker, seed, **comp_args)
    return Communicator(compressor, mem_cls(**mem_args))


def _is_pairs(args: object) -> bool:
    return not isinstance(args, Mapping)

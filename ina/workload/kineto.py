"""torch.profiler traces: one data-parallel training step as a `Workload`.

`torch.profiler.profile(record_shapes=True)` over one DDP step, then
``prof.export_chrome_trace(path)``, writes Kineto's Chrome trace JSON: an object whose
``traceEvents`` holds complete events (``"ph": "X"``) with ``name``, ``cat``, ``tid``, ``ts``
and ``dur`` in microseconds, and ``args``; ``record_shapes`` adds ``"Input Dims"`` and
``"Input type"`` to each operator's ``args``. What this reader takes from it (names as torch
2.13 writes them, checked on a CPU trace made by `ina.workload.examples`):

- gradient ready times: each ``autograd::engine::evaluate_function:
  torch::autograd::AccumulateGrad`` event is one parameter's gradient being stored (DDP's
  hook, which marks it ready for its bucket, runs inside it), so its end is when the gradient
  is ready; the ``torch::autograd::AccumulateGrad`` event nested in it has the gradient's
  shape (``Input Dims``) and dtype (``Input type``);
- the backward span: from the first to the last ``autograd::engine::evaluate_function:``
  event (on a GPU these run on the autograd engine's device thread, not the main one);
- the forward span: from the start of ``DistributedDataParallel.forward`` (else of the first
  operator that is not the optimizer's) to the start of backward, so the loss is forward;
- the optimizer: the ``Optimizer.step#...`` annotations' durations;
- DDP's buckets: its allreduces between the start of backward and the optimizer step, in
  time order, by element count: the ``c10d::allreduce_`` operator's ``Input Dims`` (what
  every process group goes through, gloo and NCCL alike), else ``record_param_comms`` events
  with ``"Collective name"`` allreduce and ``"In msg nelems"`` (NCCL's), else the backends'
  own ``gloo:all_reduce`` / ``nccl:all_reduce`` annotations.

The workload. Gradients ready one after another with no other backward function between them
come from one autograd node (a convolution's weight and bias, a batch norm's scale and shift)
and make one layer, named for that node; layers are in forward order (backward's reversed),
each layer's tensors in the order they became ready. A layer's ``bwd_s`` is the time from the
previous layer's last gradient (the start of backward, for the first) to its own last
gradient; work after the last gradient is left out (noted). The trace does not say which
forward operators belong to which layer, so the forward span is spread over the layers in
proportion to their backward times (backward costs about twice forward, layer by layer).
Bucket boundaries come from matching consecutive gradients, greedily in backward order, to
each allreduce's element count; when they do not add up exactly the buckets are left None
(DDP's own assignment is then used) and a note says why. The precision is the gradients'
dtype. The batch size is not in a Kineto trace: `load` takes it, or reads the ``"ina"``
object that `ina.workload.examples` adds to the traces it makes (else 1, noted).

Limits. All times are the host's: on a GPU, operator events mark kernel launches, so a trace
of an asynchronous step gives launch times, not kernel times (the GPU's kernel events are not
mapped to layers here). The NCCL names above are from torch's source; only CPU traces on gloo
were checked. One step per trace: with a profiler schedule's several steps, the last is read.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ina.workload.layers import Layer, Workload, check_precision

US = 1e-6  # Chrome trace times are microseconds
EVALUATE = "autograd::engine::evaluate_function: "
ACCUMULATE_OUTER = EVALUATE + "torch::autograd::AccumulateGrad"
ACCUMULATE_INNER = "torch::autograd::AccumulateGrad"
FORWARD = "DistributedDataParallel.forward"
OPTIMIZER_STEP = "Optimizer.step#"
OPTIMIZER = "Optimizer."
ALLREDUCE_OP = "c10d::allreduce_"
PARAM_COMMS = "record_param_comms"
BACKEND_ALLREDUCE = ("gloo:all_reduce", "nccl:all_reduce")
# the dtype names of record_shapes' "Input type" and the precision each is
DTYPES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16"}
# the events a Workload is made of: `trim` keeps these and drops the rest
KEPT = (EVALUATE, ACCUMULATE_INNER, FORWARD, OPTIMIZER, ALLREDUCE_OP, PARAM_COMMS, "ProfilerStep#")
KEPT_ARGS = ("Input Dims", "Input type", "Collective name", "In msg nelems", "dtype")


@dataclass(frozen=True)
class Event:
    name: str
    tid: object
    start: float  # microseconds
    end: float
    args: dict

    def contains(self, other: Event) -> bool:
        return self.tid == other.tid and self.start <= other.start and other.end <= self.end


def _events(trace: dict, path: str) -> list[Event]:
    raw = trace.get("traceEvents")
    if not isinstance(raw, list):
        raise ValueError(f"{path}: field traceEvents: missing or not a list: not a Kineto trace")
    out = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            start, dur = float(e["ts"]), float(e.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: field traceEvents[{i}].ts: not a number") from None
        out.append(
            Event(str(e.get("name", "")), e.get("tid"), start, start + dur, e.get("args") or {})
        )
    out.sort(key=lambda e: (e.start, -e.end))
    return out


def _numel(dims: object) -> int:
    """Elements of a tensor's dims (``[2, 3]``) or a tensor list's (``[[2, 3], [4]]``)."""
    if isinstance(dims, list) and dims and isinstance(dims[0], list):
        return sum(_numel(d) for d in dims)
    return math.prod(dims) if isinstance(dims, list) else 0


def read_trace(path: str | Path) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ValueError(f"cannot read trace {path}: {e.strerror}") from None
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: not JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(trace, dict):
        raise ValueError(
            f"{path}: field traceEvents: the JSON is not an object: not a Kineto trace"
        )
    return trace


def load(path: str | Path, samples: int | None = None, precision: str | None = None) -> Workload:
    """The workload of one DDP training step traced by torch.profiler; ``samples``: the batch
    size (None: the trace's ``ina`` object, else 1); ``precision``: None for the gradients'
    dtype."""
    trace = read_trace(path)
    return from_trace(trace, str(path), samples, precision)


def from_trace(
    trace: dict, path: str = "<trace>", samples: int | None = None, precision: str | None = None
) -> Workload:
    """`load` on a trace already parsed; ``path`` names it in errors."""
    events = _events(trace, path)
    notes: list[str] = []
    steps = [e for e in events if e.name.startswith("ProfilerStep#")]
    if len(steps) > 1:  # a schedule's several active steps: the last one is the steady state
        notes.append(f"{len(steps)} profiler steps in the trace: the last one taken")
        events = [e for e in events if steps[-1].start <= e.start and e.end <= steps[-1].end]
    backward = [e for e in events if e.name.startswith(EVALUATE)]
    outer = [e for e in backward if e.name == ACCUMULATE_OUTER]
    if not outer:
        raise ValueError(f"no backward events in {path}: was the trace taken over a training step?")
    bwd_start, bwd_end = backward[0].start, max(e.end for e in backward)

    # each gradient: its ready time, elements and dtype, and the backward node before it
    inner = [e for e in events if e.name == ACCUMULATE_INNER]
    grads: list[tuple[float, int, str, str]] = []
    node, last_node_end = "Backward", -math.inf
    for e in backward:
        if e.name != ACCUMULATE_OUTER:
            if e.end > last_node_end:  # a nested evaluate_function is not a new node
                node, last_node_end = e.name[len(EVALUATE) :], e.end
            continue
        shape = next((i for i in inner if e.contains(i)), None)
        if shape is None:
            raise ValueError(
                f"{path}: field Input Dims: no gradient shape in the AccumulateGrad at "
                f"ts={e.start}: was the trace taken with record_shapes=True?"
            )
        dims, types = shape.args.get("Input Dims", [[]]), shape.args.get("Input type", [""])
        grads.append((e.end, _numel(dims[0] if dims else []), types[0] if types else "", node))
        last_node_end = e.end
    grads.sort()

    # groups: consecutive gradients with no other backward node between them
    groups: list[list[tuple[float, int, str, str]]] = []
    for i, g in enumerate(grads):
        between = i and any(
            e.name != ACCUMULATE_OUTER and grads[i - 1][0] <= e.start < g[0] for e in backward
        )
        if not groups or between:
            groups.append([])
        groups[-1].append(g)
    ready = [grp[-1][0] for grp in groups]
    bwd_s = [(t - prev) * US for t, prev in zip(ready, [bwd_start, *ready[:-1]], strict=True)]
    if bwd_end > ready[-1]:
        notes.append(
            f"{(bwd_end - ready[-1]) * US * 1e3:.3f} ms of backward after the last gradient left out"
        )

    forward = [e for e in events if e.name == FORWARD]
    if forward:
        fwd_start = forward[0].start
    else:
        ops = [e for e in events if e.end <= bwd_start and not e.name.startswith(OPTIMIZER)]
        fwd_start = ops[0].start if ops else bwd_start
        notes.append(f"no {FORWARD} annotation: forward taken from the first operator")
    fwd_total = max(bwd_start - fwd_start, 0.0) * US
    total_bwd = sum(bwd_s)
    shares = [b / total_bwd for b in bwd_s] if total_bwd > 0 else [1 / len(groups)] * len(groups)

    steps_s = [e.end - e.start for e in events if e.name.startswith(OPTIMIZER_STEP)]
    optimizer_s = sum(steps_s) * US if steps_s else None
    if not steps_s:
        notes.append("no Optimizer.step annotation: the optimizer's time is not measured")

    n = len(groups)
    layers = tuple(
        Layer(
            f"{n - 1 - k}:{grp[-1][3].removesuffix('0').removesuffix('Backward')}",
            tuple(g[1] for g in grp),
            fwd_s=fwd_total * shares[k],
            bwd_s=bwd_s[k],
        )
        for k, grp in reversed(list(enumerate(groups)))
    )

    sizes = [g[1] for g in grads]
    buckets, why = _buckets(sizes, _allreduces(events, bwd_start))
    if why:
        notes.append(why)

    meta = trace.get("ina") if isinstance(trace.get("ina"), dict) else {}
    if samples is None:
        samples = meta.get("samples")
        if samples is None:
            samples = 1
            notes.append("the trace does not give the batch size: 1 sample a step assumed")
    if precision is None:
        dtype = Counter(g[2] for g in grads).most_common(1)[0][0]
        precision = DTYPES.get(dtype)
        if precision is None:
            precision = "fp32"
            notes.append(f"gradient dtype {dtype!r} not known: fp32 assumed")
    return Workload(
        name=str(meta.get("model", Path(path).stem)),
        layers=layers,
        samples=int(samples),
        precision=check_precision(precision),
        tokens_per_sample=int(meta.get("tokens_per_sample", 1)),
        optimizer_s=optimizer_s,
        source=f"torch.profiler trace {Path(path).name}",
        buckets=buckets,
        notes=tuple(notes),
    )


def _allreduces(events: list[Event], bwd_start: float) -> list[int]:
    """Element counts of the allreduces from the start of backward to the optimizer step,
    from the first source that has any (see the module's docstring)."""
    steps = [e.start for e in events if e.name.startswith(OPTIMIZER_STEP) and e.start >= bwd_start]
    end = min(steps, default=math.inf)
    window = [e for e in events if bwd_start <= e.start < end]
    sources = (
        [_numel(e.args.get("Input Dims", [[]])[0]) for e in window if e.name == ALLREDUCE_OP],
        [
            int(e.args.get("In msg nelems", 0))
            for e in window
            if e.name == PARAM_COMMS
            and str(e.args.get("Collective name", "")).replace("_", "").startswith("allreduce")
        ],
        [_numel(e.args.get("Input Dims", [[]])[0]) for e in window if e.name in BACKEND_ALLREDUCE],
    )
    return next((s for s in sources if s), [])


def _buckets(
    sizes: list[int], allreduces: list[int]
) -> tuple[tuple[tuple[int, ...], ...] | None, str]:
    """Greedy: each allreduce takes the next gradients (backward order) until its count."""
    if not allreduces:
        return None, "no allreduce in the backward pass: DDP's buckets not measured"
    buckets, i = [], 0
    for count in allreduces:
        start, total = i, 0
        while total < count and i < len(sizes):
            total, i = total + sizes[i], i + 1
        if total != count:
            return None, (
                f"allreduce of {count} elements does not match consecutive gradients "
                f"(got {total}): buckets left to DDP's assignment"
            )
        buckets.append(tuple(range(start, i)))
    if i != len(sizes):
        return (
            None,
            f"allreduces cover {i} of {len(sizes)} gradients: buckets left to DDP's assignment",
        )
    return tuple(buckets), ""


def trim(trace: dict) -> dict:
    """The trace with only what `load` reads: the events it uses and their shape and
    collective arguments, the other top-level fields as they are."""
    out = {k: v for k, v in trace.items() if k != "traceEvents"}
    kept = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" or (e.get("ph") == "X" and str(e.get("name", "")).startswith(KEPT)):
            e = dict(e)
            if "args" in e:
                e["args"] = {k: v for k, v in e["args"].items() if k in KEPT_ARGS}
            kept.append(e)
    out["traceEvents"] = kept
    return out

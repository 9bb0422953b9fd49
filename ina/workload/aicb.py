"""SimAI/AICB workload files: read one as a `Workload`, write any `Workload` as one.

AICB (aliyun/aicb, `workload_generator/SimAI_training_workload_generator.py`) writes the
layer lists that SimAI's simulator (aliyun/SimAI,
`astra-sim-alibabacloud/astra-sim/workload/Workload.cc`, `initialize_workload`) reads. A file
is plain text:

    HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 32 ga: 1 ...
    76
    attention_layer  -1  539986  ALLREDUCE  16777216  592000  ALLREDUCE  16777216  592000  NONE  0  100
    ...

- line 1: the parallelism policy (``HYBRID_TRANSFORMER_FWD_IN_BCKWD``, ``MICRO``, ...), then
  ``key: value`` pairs (the tensor-parallel group, ``ep:``, ``pp:``, ``ga:``, ``all_gpus:``,
  ...); SimAI looks only for the keys it knows, so this module keeps its own under ``ina_``
  names there (``ina_name:``, ``ina_samples:``, ``ina_tokens_per_sample:``,
  ``ina_precision:``, ``ina_optimizer_ns:``);
- line 2: the number of rows;
- one row per layer in forward order, 12 fields separated by white space (AICB writes tabs,
  SimAI reads with ``>>``, so any white space will do):

  | # | field (SimAI's name) | here |
  |---|---|---|
  | 1 | name | the layer's name (no white space) |
  | 2 | dependency, always -1 | ignored |
  | 3 | forward compute time | ``fwd_s`` |
  | 4, 5 | forward collective, bytes (tensor parallelism) | ignored |
  | 6 | input-gradient compute time | ``bwd_s`` = 6 + 9 |
  | 7, 8 | input-gradient collective, bytes (tensor parallelism) | ignored |
  | 9 | weight-gradient compute time | ``bwd_s`` = 6 + 9 |
  | 10, 11 | weight-gradient collective, bytes (the data-parallel reduction) | ``grads`` |
  | 12 | weight-update time | ignored |

Units. Times are integer nanoseconds: SimAI reads them as its ``Tick`` (``unsigned long
long``, nanoseconds: ``astra-sim/system/Common.hh``), and AICB makes them so: AIOB times a
kernel with CUDA events (milliseconds) times 1000 (``utils/utils.py``,
``cuda_timing_decorator``: microseconds), and ``extract_averages`` multiplies by 1000 again
(nanoseconds). Sizes are bytes.

Gradients. A row's gradient is its weight-gradient collective when that is a reduction
(``ALLREDUCE*`` or ``REDUCESCATTER*``: SimAI runs both over the data-parallel group); its
element count is the size in bytes over the bytes per value of ``precision`` (default bf16,
the precision of AICB's Megatron workloads). AICB's Megatron files carry the whole model's
gradient in one ``REDUCESCATTER`` row of 4 bytes a parameter (the distributed optimizer's fp32
main gradients, ``dp_comm_size=4 * params`` in the generator): read those with
``precision="fp32"`` to get the parameter count. Parameter gathers (``ALLGATHER*``) and
all-to-alls in that column are not gradients and are skipped with a note.

Writing. `dump` writes one row per layer and, for a layer with more than one gradient tensor,
one extra row per further tensor named ``NAME~1``, ``NAME~2``, ... with no compute, placed
before the layer's row: SimAI walks the rows backwards in the backward pass, so it meets the
layer's compute and first tensor and then the others, the order the layer produces them.
`load` folds such rows back into their layer. Backward time is split evenly between the
input-gradient and weight-gradient columns (the two GEMMs of a linear layer cost the same);
`load` adds them back. What the format cannot hold is lost: FLOPs and bytes (only times are
written; a layer without a measured time gets the device's roofline), DDP bucket boundaries,
notes, zero-element tensors. `load(dump(w))` is otherwise `w` at nanosecond resolution.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

from ina.workload.devices import DEFAULT_EFFICIENCY, Device, layer_times
from ina.workload.layers import PRECISIONS, Layer, Workload, check_precision

FIELDS = (
    "name",
    "dependency",
    "fwd_compute_time",
    "fwd_comm_type",
    "fwd_comm_size",
    "ig_compute_time",
    "ig_comm_type",
    "ig_comm_size",
    "wg_compute_time",
    "wg_comm_type",
    "wg_comm_size",
    "wg_update_time",
)
INTEGER_FIELDS = frozenset(FIELDS[1:]) - {"fwd_comm_type", "ig_comm_type", "wg_comm_type"}
NS = 1e9  # ticks per second: SimAI's Tick is a nanosecond
POLICY = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"  # what AICB writes for training workloads
UPDATE_NS = 100  # AICB's default weight-update time (Work_Item.process_time)
DEFAULT_PRECISION = "bf16"
# collectives of the weight-gradient column that reduce gradients over the data-parallel group
GRADIENT_COLLECTIVES = ("ALLREDUCE", "REDUCESCATTER")
CONTINUATION = re.compile(r"^(?P<base>.+)~(?P<index>[1-9][0-9]*)$")


def _ticks(seconds: float) -> int:
    return round(seconds * NS)


def _token(name: str) -> str:
    """A name as one white-space-free token (SimAI reads names with ``>>``)."""
    return re.sub(r"\s+", "_", name.strip()) or "layer"


def dump(
    w: Workload,
    device: Device | None = None,
    efficiency: float = DEFAULT_EFFICIENCY,
    world_size: int = 1,
) -> str:
    """The AICB/SimAI text of ``w``: measured times where ``w`` has them, the roofline on
    ``device`` otherwise (None: every layer must have measured times); ``world_size`` goes
    into the header's ``all_gpus:``."""
    times = layer_times(w, device, efficiency)
    value = PRECISIONS[w.precision]
    header = [
        POLICY,
        "model_parallel_NPU_group: 1 ep: 1 pp: 1",
        f"vpp: {len(w.layers)} ga: 1 all_gpus: {world_size}",
        "checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0",
        f"ina_name: {_token(w.name)} ina_samples: {w.samples}",
        f"ina_tokens_per_sample: {w.tokens_per_sample} ina_precision: {w.precision}",
    ]
    if w.optimizer_s is not None or device is not None:
        header.append(f"ina_optimizer_ns: {_ticks(times.optimizer)}")
    rows = []
    for layer, fwd, bwd in zip(w.layers, times.fwd, times.bwd, strict=True):
        name = _token(layer.name)
        grads = [n for n in layer.grads if n > 0]
        # the further tensors first, last one first: SimAI's backward walks rows in reverse
        for j in range(len(grads) - 1, 0, -1):
            rows.append(_row(f"{name}~{j}", 0, 0, 0, grads[j] * value))
        bwd_ns = _ticks(bwd)
        rows.append(
            _row(
                name,
                _ticks(fwd),
                bwd_ns // 2,
                bwd_ns - bwd_ns // 2,
                grads[0] * value if grads else 0,
            )
        )
    return "\n".join([" ".join(header), str(len(rows)), *rows]) + "\n"


def _row(name: str, fwd_ns: int, ig_ns: int, wg_ns: int, wg_bytes: int) -> str:
    wg = "ALLREDUCE" if wg_bytes else "NONE"
    fields = [name, -1, fwd_ns, "NONE", 0, ig_ns, "NONE", 0, wg_ns, wg, wg_bytes, UPDATE_NS]
    return "\t".join(str(f) for f in fields)


def _header(path: str, line: str) -> dict[str, str]:
    tokens = line.split()
    if not tokens or not re.fullmatch(r"[A-Z][A-Z_0-9]*", tokens[0]):
        first = tokens[0] if tokens else ""
        raise ValueError(
            f"{path}:1: field parallelism: expected a policy such as {POLICY}, got {first!r}"
        )
    pairs = {"parallelism": tokens[0]}
    for key, val in pairwise(tokens[1:]):
        if key.endswith(":"):
            pairs[key[:-1]] = val
    return pairs


def _int(path: str, lineno: int, field: str, token: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise ValueError(
            f"{path}:{lineno}: field {field}: expected an integer, got {token!r}"
        ) from None


def load(path: str | Path, precision: str | None = None) -> Workload:
    """The workload of an AICB/SimAI file. ``precision`` gives the bytes per gradient value
    (None: the file's ``ina_precision:``, else bf16); see the module's docstring."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"cannot read AICB workload file {path}: {e.strerror}") from None
    return parse(text, str(path), precision, default_name=path.stem)


def parse(
    text: str, path: str = "<string>", precision: str | None = None, default_name: str = "aicb"
) -> Workload:
    """`load` on text already read; ``path`` names it in errors."""
    lines = text.splitlines()
    if not lines:
        raise ValueError(f"{path}:1: field parallelism: the file is empty")
    head = _header(path, lines[0])
    if len(lines) < 2:
        raise ValueError(f"{path}:2: field rows: missing the row count")
    count = _int(path, 2, "rows", lines[1].strip())

    def meta(key: str, default: int | None) -> int | None:
        return _int(path, 1, key, head[key]) if key in head else default

    given = precision or head.get("ina_precision")
    precision = check_precision(given or DEFAULT_PRECISION)
    value = PRECISIONS[precision]
    notes: list[str] = []
    skipped: dict[str, int] = {}
    layers: list[Layer] = []
    pending: list[tuple[str, int, int]] = []  # continuation rows: (base, index, elements)
    rows = 0
    for lineno, line in enumerate(lines[2:], start=3):
        tokens = line.split()
        if not tokens:
            continue
        rows += 1
        if rows > count:
            raise ValueError(f"{path}:{lineno}: field rows: more rows than line 2's {count}")
        if len(tokens) != len(FIELDS):
            raise ValueError(
                f"{path}:{lineno}: field {FIELDS[min(len(tokens), len(FIELDS) - 1)]}: "
                f"expected {len(FIELDS)} fields, got {len(tokens)}"
            )
        row = dict(zip(FIELDS, tokens, strict=True))
        num = {f: _int(path, lineno, f, row[f]) for f in FIELDS if f in INTEGER_FIELDS}
        for f, n in num.items():
            if n < 0 and f != "dependency":
                raise ValueError(f"{path}:{lineno}: field {f}: negative value {n}")
        for slot in ("fwd", "ig"):
            if row[f"{slot}_comm_type"] != "NONE":
                skipped[slot] = skipped.get(slot, 0) + 1
        wg_type, wg_bytes = row["wg_comm_type"], num["wg_comm_size"]
        elements = 0
        if wg_type.startswith(GRADIENT_COLLECTIVES):
            elements = -(-wg_bytes // value)  # a partial value still takes a whole one
            if wg_bytes % value:
                notes.append(
                    f"line {lineno}: {wg_bytes} gradient bytes are not whole {precision} values"
                )
        elif wg_type != "NONE":
            skipped["wg"] = skipped.get("wg", 0) + 1
        fwd_ns, bwd_ns = num["fwd_compute_time"], num["ig_compute_time"] + num["wg_compute_time"]
        name = row["name"]
        cont = CONTINUATION.match(name)
        idle = fwd_ns == bwd_ns == 0 and row["fwd_comm_type"] == row["ig_comm_type"] == "NONE"
        if cont and idle and elements:
            pending.append((cont["base"], int(cont["index"]), elements))
            continue
        grads = [elements] if elements else []
        extra = [(j, n) for base, j, n in pending if base == name]
        if extra and [j for j, _ in extra] == list(range(len(extra), 0, -1)):
            grads += [n for _, n in reversed(extra)]
        else:  # not this layer's: they stand as layers of their own
            layers += [Layer(f"{b}~{j}", (n,), fwd_s=0.0, bwd_s=0.0) for b, j, n in pending]
        pending = []
        layers.append(Layer(name, tuple(grads), fwd_s=fwd_ns / NS, bwd_s=bwd_ns / NS))
    layers += [Layer(f"{b}~{j}", (n,), fwd_s=0.0, bwd_s=0.0) for b, j, n in pending]
    if rows < count:
        raise ValueError(
            f"{path}:{len(lines) + 1}: field rows: line 2 promises {count} rows, found {rows}"
        )
    if not layers:
        raise ValueError(f"{path}:2: field rows: the file has no rows")
    if not given:
        notes.append(f"gradient bytes read as {precision} values (no precision given)")
    if "ina_samples" not in head:
        notes.append("the file does not give the batch size: 1 sample a step assumed")
    columns = {"fwd": "forward", "ig": "input-gradient", "wg": "weight-gradient non-reduction"}
    for slot, n in skipped.items():
        notes.append(f"{n} {columns[slot]} collectives ignored (not data-parallel gradients)")
    ga = head.get("ga", "1")
    if ga not in ("0", "1"):
        notes.append(f"ga: {ga}: the rows hold {ga} micro-batches of gradient accumulation")
    optimizer_ns = meta("ina_optimizer_ns", None)
    return Workload(
        name=head.get("ina_name", default_name),
        layers=tuple(layers),
        samples=meta("ina_samples", 1),
        precision=precision,
        tokens_per_sample=meta("ina_tokens_per_sample", 1),
        optimizer_s=None if optimizer_ns is None else optimizer_ns / NS,
        source=f"AICB workload file {Path(path).name} ({head['parallelism']})",
        notes=tuple(notes),
    )

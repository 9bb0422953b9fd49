"""Makes the example workload files shipped in ``ina/data/workloads/``.

    python -m ina.workload.examples OUT_DIR

writes, into OUT_DIR:

- ``resnet-ddp-gloo.trace.json``: a torch.profiler trace (``record_shapes=True``, CPU
  activity) of one training step of ``ina.workload.models``' ResNet-20 on CIFAR-10's shapes
  (a batch of 8 random 3x32x32 images, seed 0, SGD with momentum) under
  `DistributedDataParallel` on the gloo backend, world size 1 in this process (a free
  localhost port). Two steps run first so DDP has rebuilt its buckets; the third is traced.
  The trace is cut by `ina.workload.kineto.trim` to the events its reader uses and carries an
  ``"ina"`` object with the model's name and the batch size. The times are this machine's CPU.
- ``gpt2-bf16.aicb.txt``: an AICB/SimAI workload file written by `ina.workload.aicb.dump`: the
  zoo's GPT-2 (``ina.workload.zoo.build("gpt2", batch_size=8, precision="bf16")``) timed by
  the roofline of an A100 at the default efficiency, when the zoo is installed; without it,
  ``resnet-cpu.aicb.txt``, the workload of the trace above (measured CPU times).

`ina.workload.imports.EXAMPLES` names the shipped files.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

from ina.workload import aicb, kineto
from ina.workload.devices import device
from ina.workload.models import build_model

TRACE = "resnet-ddp-gloo.trace.json"
MODEL, INPUT_SHAPE, CLASSES, BATCH = "resnet", (3, 32, 32), 10, 8
WARMUP_STEPS = 2  # DDP rebuilds its buckets in the order of the first backward


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trace_step(path: Path) -> Path:
    """Trace one DDP step of ResNet-20 on gloo, world size 1, into ``path`` (trimmed)."""
    ours = not dist.is_initialized()
    if ours:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
        )
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(build_model(MODEL, INPUT_SHAPE, CLASSES))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(BATCH, *INPUT_SHAPE), torch.randint(0, CLASSES, (BATCH,))

        def step() -> None:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        for _ in range(WARMUP_STEPS):
            step()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step()
        raw = path.with_suffix(".raw.json")
        prof.export_chrome_trace(str(raw))
    finally:
        if ours:
            dist.destroy_process_group()
    trace = kineto.trim(json.loads(raw.read_text()))
    raw.unlink()
    trace["traceName"] = path.name  # not the temporary file's path on this machine
    trace["ina"] = {
        "model": MODEL,
        "samples": BATCH,
        "input_shape": list(INPUT_SHAPE),
        "made_by": "python -m ina.workload.examples",
    }
    path.write_text(json.dumps(trace, separators=(",", ":")) + "\n")
    return path


def aicb_example(out: Path, trace: Path) -> Path:
    """The AICB example: the zoo's GPT-2 on an A100's roofline, else the trace's workload."""
    try:
        from ina.workload import zoo
    except ImportError:
        path = out / "resnet-cpu.aicb.txt"
        path.write_text(aicb.dump(kineto.load(trace)))
        return path
    path = out / "gpt2-bf16.aicb.txt"
    path.write_text(aicb.dump(zoo.build("gpt2", batch_size=8, precision="bf16"), device("a100")))
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ina.workload.examples OUT_DIR", file=sys.stderr)
        return 2
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    trace = trace_step(out / TRACE)
    for path in (trace, aicb_example(out, trace)):
        print(f"{path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

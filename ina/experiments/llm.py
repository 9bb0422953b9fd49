"""`ina experiment llm`: where in-network aggregation pays in LLM training, by model size,
layout and network.

For each model (with its layout) and each NIC rate, the same step runs twice on the cluster
(`ina sim train`, timing only): with NCCL's pick for the data-parallel collective and with INA
in the rails' switches. The table gives each step's time, INA's speed-up, and where the NCCL
step's time goes: compute, the pipeline's bubble, tensor-parallel all-reduces, expert-parallel
all-to-alls, pipeline sends and the data-parallel collective left exposed. Tensor-parallel
all-reduces run inside a node on NVLink, all-to-alls and pipeline sends are point to point:
INA changes none of them, so it can only shorten the data-parallel share. Writes ``llm.md``, ``llm.json`` and ``llm.png`` (the shares, stacked).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

from ina.errors import UsageError, output_dir

# A layout per model, as such models are trained (Megatron-LM's and Llama 2's reports use
# tensor parallelism inside a node and pipeline stages across nodes for the larger ones).
LAYOUTS = {
    "llama-7b": ["--tp", "1", "--zero", "1", "--micro-batches", "4"],
    "llama-13b": ["--tp", "2", "--zero", "1", "--micro-batches", "4"],
    "llama-70b": ["--tp", "8", "--pp", "4", "--micro-batches", "16", "--recompute"],
    "gpt3-175b": ["--tp", "8", "--pp", "8", "--micro-batches", "32", "--recompute"],
    "mixtral-8x7b": ["--tp", "1", "--ep", "8", "--zero", "1", "--micro-batches", "4"],
}


SHARES = ("compute", "bubble", "tp", "ep", "pp", "dp")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="llama-7b,llama-70b", help=f"of {', '.join(LAYOUTS)}")
    p.add_argument("--system", default="dgx-h100", help="the cluster preset or file")
    p.add_argument("--nodes", type=int, default=32, help="nodes of the system")
    p.add_argument("--nic-rates", default="100G,400G", help="each NIC's rate, a list")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--out", default="runs/experiment/llm", help="folder for llm.md/json/png")


def _step(argv: list[str], out: Path) -> dict:
    from ina.sim import train_steps

    p = argparse.ArgumentParser()
    train_steps.add_arguments(p)
    args = p.parse_args([*argv, "--out", str(out)])
    with contextlib.redirect_stdout(io.StringIO()):
        train_steps.main(args)
    return json.loads((out / "result.json").read_text())


def _cluster_file(folder: Path, system: str, rate: str) -> str:
    from ina.sim.cluster import PRESET_NAMES, PRESETS

    if system in PRESETS:
        base = {"preset": system}
    else:
        try:
            base = json.loads(Path(system).read_text())
        except OSError as e:
            raise ValueError(
                f"--system {system}: not a preset ({', '.join(PRESET_NAMES)}) and not a "
                f"readable cluster file ({e.strerror})"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"--system {system}: not JSON ({e})") from None
        if not isinstance(base, dict):
            raise ValueError(f"--system {system}: a JSON object of fields")
    path = folder / f"{Path(system).stem}-{rate}.json"
    path.write_text(json.dumps({**base, "nic_rate": rate}) + "\n")
    return str(path)


def run(args: argparse.Namespace, out: Path) -> list[dict]:
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in LAYOUTS]
    if bad:
        raise UsageError(f"--models {', '.join(bad)}: known {', '.join(LAYOUTS)}")
    rates = [r.strip() for r in args.nic_rates.split(",") if r.strip()]
    rows = []
    for model in models:
        for rate in rates:
            system = _cluster_file(out, args.system, rate)
            base = ["--workload", model, "--precision", args.precision, "--system", system,
                    "--nodes", str(args.nodes), "--timing-only", "--steps", "1",
                    *LAYOUTS[model]]  # fmt: skip
            nccl = _step([*base, "--algorithm", "nccl"], out)
            ina = _step([*base, "--algorithm", "ina"], out)
            it = nccl["steps"][0]["iteration_s"]
            m = nccl["layout"]["micro_batches"]
            tp = nccl["tp_comm_s_per_microbatch"] * m
            ep = nccl["ep_comm_s_per_microbatch"] * m
            pp = nccl["pp_comm_s_per_microbatch"] * m
            dp = nccl["steps"][0]["exposed_comm_s"] + nccl["zero_gather_exposed_s"]
            bubble = nccl["bubble"] * nccl["pipeline_s"]
            compute = max(it - tp - ep - pp - dp - bubble, 0.0)
            rows.append({
                "model": model, "layout": nccl["layout"], "nic_rate": rate,
                "nccl_s": it, "ina_s": ina["steps"][0]["iteration_s"],
                "speedup": it / ina["steps"][0]["iteration_s"],
                "share": {"compute": compute / it, "bubble": bubble / it, "tp": tp / it,
                          "ep": ep / it, "pp": pp / it, "dp": dp / it},
            })  # fmt: skip
    return rows


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# Where INA pays in LLM training",
        "",
        f"Made by `{command}`.",
        "",
        "| model | layout | NIC | NCCL step | INA step | INA speed-up | compute | bubble | "
        "TP all-reduce | EP all-to-all | PP sends | DP exposed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lay, sh = r["layout"], r["share"]
        layout = (
            f"tp {lay['tp']} pp {lay['pp']} dp {lay['dp']}"
            + (f" ep {lay['ep']}" if lay["ep"] > 1 else "")
            + (f" ZeRO {lay['zero']}" if lay["zero"] else "")
        )
        lines.append(
            f"| {r['model']} | {layout} | {r['nic_rate']} | {r['nccl_s'] * 1e3:,.0f} ms | "
            f"{r['ina_s'] * 1e3:,.0f} ms | {r['speedup']:.3f}x | "
            + " | ".join(f"{100 * sh[k]:.1f} %" for k in SHARES)
            + " |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    labels = [f"{r['model']}\n{r['nic_rate']}" for r in rows]
    bottom = [0.0] * len(rows)
    for key in SHARES:
        vals = [100 * r["share"][key] for r in rows]
        ax.bar(labels, vals, bottom=bottom, label=key)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, r in enumerate(rows):
        ax.text(i, 101, f"INA {r['speedup']:.2f}x", ha="center", fontsize=8)
    ax.set_ylabel("share of the NCCL step (%)")
    ax.set_ylim(0, 110)
    ax.legend(fontsize=7, ncol=5, loc="lower center", bbox_to_anchor=(0.5, -0.4))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    try:
        out = output_dir(args.out)
        if args.nodes < 1:
            raise ValueError(f"--nodes must be >= 1, got {args.nodes}")
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        rows = run(args, out)
    except ValueError as e:  # a layout or cluster the options make impossible: one line
        raise UsageError(str(e)) from None
    command = (
        f"ina experiment llm --models {args.models} --system {args.system} --nodes "
        f"{args.nodes} --nic-rates {args.nic_rates} --precision {args.precision}"
    )
    text = markdown(rows, command)
    print(text)
    (out / "llm.md").write_text(text)
    (out / "llm.json").write_text(json.dumps(rows, indent=2) + "\n")
    plot(rows, out / "llm.png")
    print(f"wrote {out / 'llm.md'}, {out / 'llm.json'}, {out / 'llm.png'}")
    return 0

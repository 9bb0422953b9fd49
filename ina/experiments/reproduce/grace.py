"""`ina reproduce grace`: GRACE (Xu et al., ICDCS 2021): does the ranking of compression
methods change with the architecture, and are some methods impractical for their codec cost?

1. **Ranking** (`ina.experiments.grace`): GRACE's methods trained in simulated time on a CNN
   (MNIST-1D) and an RNN (the character LSTM, ``pytext``) on the slow 1 Gbit/s network, each
   method ranked by its time to the workload's target (then by its final metric); the two
   rankings compared by Kendall's tau over the methods and by their top-3 sets.
2. **Codec cost**: per iteration on the zoo's ResNet-50 and PTB LSTM (FP32 gradients), each
   method's encode+decode time at the throughput measured on this CPU (by experiment 1, on
   the workload's gradient: host-dependent) against the communication it saves,
   ``gradient bytes x (1 - 1/ratio) / link rate``, on 1 and 10 Gbit/s.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from itertools import combinations
from pathlib import Path

from ina.experiments.reproduce import Claim, Report, verdict

NAME = "grace"
TITLE = "GRACE: A Compressed Communication Framework for Distributed Machine Learning (ICDCS 2021)"

QUICK_METHODS = [
    "none", "fp16", "qsgd:levels=7", "efsignsgd", "topk:ratio=0.01", "powersgd:rank=4",
]  # fmt: skip
NETWORK = "slow-1G"  # where compression matters; the quiet 100G network adds only codec time
ZOO = ("resnet50", "ptb-lstm")
RATES = (1e9, 10e9)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parallel", type=int, default=2, help="training runs at once")
    p.add_argument(
        "--methods",
        help="the methods to train, as `ina experiment grace --methods` takes them (default: "
        f"with --quick {','.join(QUICK_METHODS)}; else every method)",
    )


def train(args: argparse.Namespace, out: Path) -> tuple[list[dict], dict]:
    """`ina experiment grace --sim` on both workloads (--quick: its short preset's steps and
    targets, `QUICK_METHODS`; else --long, every method); its rows and codec stats."""
    from ina.experiments import grace as g

    p = argparse.ArgumentParser()
    g.add_arguments(p)
    argv = ["--sim", "--workloads", "mnist1d,pytext", "--networks", NETWORK,
            "--parallel", str(args.parallel), "--out", str(out / "grace-sim")]  # fmt: skip
    if args.methods:
        argv += ["--methods", args.methods] + ([] if args.quick else ["--long"])
    else:
        argv += ["--methods", ",".join(QUICK_METHODS)] if args.quick else ["--long"]
    gargs = p.parse_args(argv)
    if g.main(gargs) != 0:
        raise RuntimeError("ina experiment grace --sim failed")
    rows = g.read_results(out / "grace-sim" / "results.csv")
    stats = json.loads((out / "grace-sim" / "stats.json").read_text())
    return rows, stats


def ranking(rows: list[dict], workload: str) -> list[dict]:
    """The workload's methods, fastest to target first; those that missed it after, by their
    final metric (lower is better for bits per character, higher for accuracy)."""
    mine = [r for r in rows if r["workload"] == workload]
    lower = mine and "bpc" in mine[0]["metric"]

    def key(r: dict) -> tuple:
        t = r["time_to_target_s"]
        m = r["final_metric"] if r.get("diverged_at_step") in (None, "") else math.inf
        m = m if lower else -m
        return (0, t, m) if t is not None else (1, m, 0.0)

    return sorted(mine, key=key)


def kendall_tau(a: list[str], b: list[str]) -> float:
    """Kendall's tau-a between two orders of the same items."""
    common = [x for x in a if x in b]
    pos = {x: i for i, x in enumerate(b)}
    pairs = list(combinations(common, 2))
    if not pairs:
        return math.nan
    s = sum(1 if pos[x] < pos[y] else -1 for x, y in pairs)  # x before y in a
    return s / len(pairs)


def rank_table(ranks: dict[str, list[dict]]) -> str:
    lines = [
        f"Ranking by time to target in simulated seconds (`ina experiment grace --sim`, "
        f"network {NETWORK}; '-': not reached, ranked by final metric after).",
        "",
        "| rank | " + " | ".join(f"{w} method | time to target | final" for w in ranks) + " |",
        "|---|" + "---|---|---|" * len(ranks),
    ]
    n = max(len(v) for v in ranks.values())
    for i in range(n):
        cells = []
        for rs in ranks.values():
            if i < len(rs):
                r = rs[i]
                t = r["time_to_target_s"]
                cells.append(
                    f"{r['method']} | {'-' if t is None else f'{t:.3f} s'} | "
                    f"{r['final_metric']:.3f}"
                )
            else:
                cells.append(" | | ")
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def codec_rows(stats: dict) -> list[dict]:
    """Per zoo model, method and rate: codec seconds vs communication seconds saved. The codec
    throughput and the traffic ratio of each method: the CNN's (mnist1d) for ResNet-50, the
    LSTM's (pytext) for the PTB LSTM."""
    from ina.workload import zoo

    source = {"resnet50": "mnist1d", "ptb-lstm": "pytext"}
    out = []
    for name in ZOO:
        w = zoo.build(name, None, "fp32")
        grad = 4 * w.params
        ms = stats[source[name]]
        base = grad / (ms["none"]["best_cpu_mb_s"] * 1e6) if "none" in ms else 0.0
        for method, s in ms.items():
            codec_s = grad / (s["best_cpu_mb_s"] * 1e6) - base  # over dense's own int32 codec
            for rate in RATES:
                dense_s = grad * 8 / rate
                saved = dense_s * (1 - 1 / s["ratio"])
                out.append(
                    dict(
                        model=name, method=method, rate=rate, ratio=s["ratio"],
                        mb_s=s["best_cpu_mb_s"], codec_s=codec_s, dense_s=dense_s,
                        saved_s=saved, net_s=saved - codec_s,
                    )
                )  # fmt: skip
    return out


def codec_table(rows: list[dict]) -> str:
    lines = [
        "Codec cost per iteration: FP32 gradient of the zoo model, encode+decode at this "
        "CPU's measured throughput (host-dependent), less dense's own (none: int32 lanes), "
        "vs the communication saved, gradient "
        "bytes x (1 - 1/ratio) / link rate. Net < 0: the method is slower than dense.",
        "",
        "| model | method | traffic ratio | codec MB/s (this CPU) | link | dense comm | saved "
        "| extra codec | net |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['method']} | {r['ratio']:.1f}x | {r['mb_s']:.0f} | "
            f"{r['rate'] / 1e9:g} Gbit/s | {r['dense_s'] * 1e3:.0f} ms | "
            f"{r['saved_s'] * 1e3:.0f} ms | {r['codec_s'] * 1e3:+.0f} ms | "
            f"{r['net_s'] * 1e3:+.0f} ms |"
        )
    return "\n".join(lines)


def claims(ranks: dict[str, list[dict]], codec: list[dict]) -> list[Claim]:
    order = {w: [r["method"] for r in rs] for w, rs in ranks.items()}
    (wa, a), (wb, b) = list(order.items())[:2]
    tau = kendall_tau(a, b)
    top_a, top_b = set(a[:3]), set(b[:3])
    # the claim: the best methods differ by architecture. A reordering below an unchanged
    # top three (tau < 1) is not that: measured 1.0 (yes) or 0.0 (no)
    changes = bool(a and b) and (a[0] != b[0] or top_a != top_b)
    rank_v = verdict(1.0 if changes else 0.0, 1.0, False)
    rank_why = (
        f"Kendall tau {tau:.2f} between the {wa} (CNN) and {wb} (RNN) rankings; top 3 "
        f"{wa}: {', '.join(a[:3])}; {wb}: {', '.join(b[:3])}"
        + (
            ": the best methods differ by architecture"
            if changes
            else ": the same best method and the same top three, so the ranking does not "
            "change where the claim says it does (only below the top three)"
        )
        + ". The order follows each model's step time (communication over a 1 Gbit/s link "
        "against its compute, the codec's cost) and its steps to target under each method's "
        "error"
    )
    bad = [r for r in codec if r["net_s"] < 0 and r["method"] != "none"]
    bad_at_10 = sorted({r["method"] for r in bad if r["rate"] == 10e9})
    bad_at_1 = sorted({r["method"] for r in bad if r["rate"] == 1e9})
    worst = min(codec, key=lambda r: r["net_s"]) if codec else None
    codec_v = verdict(1.0 if bad_at_1 or bad_at_10 else 0.0, 1.0, False)
    codec_why = (
        f"codec time exceeds the communication saved for {', '.join(bad_at_10) or 'none'} at "
        f"10 Gbit/s and {', '.join(bad_at_1) or 'none'} at 1 Gbit/s"
        + (
            f"; worst: {worst['method']} on {worst['model']} at {worst['rate'] / 1e9:g} Gbit/s, "
            f"{worst['codec_s'] * 1e3:.0f} ms of extra codec for {worst['saved_s'] * 1e3:.0f} ms saved"
            if worst
            else ""
        )
        + ". Throughputs are this CPU's (numpy, one core): a GPU codec is faster, so fewer "
        "methods would be impractical there"
    )
    return [
        Claim(
            "the ranking of methods changes with the architecture (CNN vs RNN)",
            "different best methods per model",
            f"tau {tau:.2f}; best {'differs' if a[:1] != b[:1] else 'same'}, top-3 "
            f"{'differ' if top_a != top_b else 'same set'}",
            rank_v,
            rank_why,
        ),
        Claim(
            "some methods are impractical because of their compression cost",
            "yes (e.g. slow codecs negate the savings)",
            f"{len(bad_at_10)} at 10 Gbit/s, {len(bad_at_1)} at 1 Gbit/s of "
            f"{len({r['method'] for r in codec}) - 1} methods",
            codec_v,
            codec_why,
        ),
    ]


def run(args: argparse.Namespace) -> Report:
    out = Path(args.out or f"runs/reproduce/{NAME}")
    t0 = time.perf_counter()
    rows, stats = train(args, out)
    wall = time.perf_counter() - t0
    ranks = {w: ranking(rows, w) for w in ("mnist1d", "pytext")}
    codec = codec_rows(stats)
    with open(out / "codec.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(codec[0]))
        writer.writeheader()
        writer.writerows(codec)
    report = Report(
        name=NAME,
        title=TITLE,
        command="ina reproduce grace" + (" --quick" if args.quick else ""),
        setting=[
            f"ranking: methods {', '.join(sorted({r['method'] for r in rows}))} on MNIST-1D "
            "(1-D CNN) and the character LSTM, 4 workers x batch 32, network "
            f"{NETWORK} (1 Gbit/s links, 50 us propagation), compute fixed 5 ms per step, "
            "each method's codec time charged at its throughput measured on this CPU",
            "codec cost: zoo resnet50 (25.6 M parameters) and ptb-lstm (66.0 M), FP32 "
            "gradients, links 1 and 10 Gbit/s",
            f"wall time of the training part: {wall:.0f} s",
        ],
        approximations=[
            "the paper's CNNs and RNNs (ResNet, VGG; LSTM on PTB) are trained here as the "
            "MNIST-1D CNN and a character LSTM; --quick trains them to low targets (0.35 "
            "accuracy after <= 60 steps; 3.9 bits/char after <= 30), so its ranking mostly "
            "reflects step time, not converged quality",
            "codec throughputs are this host's numpy implementations on one CPU core "
            "(host-dependent), measured on the small workloads' gradients and applied to the "
            "zoo models' sizes; GRACE measured GPU (TensorFlow/PyTorch) codecs",
            "the codec-cost table is a first-order model (no overlap of codec and "
            "communication); the traffic ratio is ina's switch encoding, not GRACE's "
            "all-gather byte counts",
            "every setting is the presets' of `ina experiment grace`, fixed before comparing",
        ],
        tables=[rank_table(ranks), codec_table(codec)],
        claims=claims(ranks, codec),
    )
    if args.quick:
        report.full_run = (
            f"This was --quick ({len((args.methods or ','.join(QUICK_METHODS)).split(','))} "
            "methods, short runs to low targets). The "
            "full run (`ina reproduce grace`: all 16 methods trained to 96 % / 2.3 bits per "
            "character, --long) takes several hours on two cores (the LSTM's 2000-step runs "
            "dominate)."
        )
    return report

"""`ina workloads`: list the model zoo (`ina.workload.zoo`), or one model's layers.

    ina workloads                       one row per model: parameters, fp32 gradient MB,
                                        GFLOPs per sample (forward + backward), source
    ina workloads --model gpt2          gpt2's layers (parameters, forward and backward
                                        GFLOPs) and totals
    ina workloads --model llama-7b --seq-len 2048 --batch-size 2 --precision bf16

Tables are markdown, as `ina bench` prints them. A bad model name, precision, batch size or
sequence length is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse

from ina.errors import UsageError
from ina.workload import zoo
from ina.workload.layers import PRECISIONS, Workload

G = 1e9


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help=f"print this model's layers ({', '.join(zoo.NAMES)})")
    p.add_argument("--batch-size", type=int, help="samples per worker (default: the model's)")
    p.add_argument("--precision", default="fp32", help=f"one of {', '.join(PRECISIONS)}")
    p.add_argument("--seq-len", type=int, help="tokens per sample of a language model (--model)")


def _build(name: str, args: argparse.Namespace) -> Workload:
    try:
        return zoo.build(name, args.batch_size, args.precision, args.seq_len)
    except ValueError as e:
        raise UsageError(str(e)) from None


def list_models(args: argparse.Namespace) -> None:
    print("| model | parameters | gradient MB (fp32) | GFLOPs per sample | source |")
    print("|---|---:|---:|---:|---|")
    for name in zoo.NAMES:
        w = _build(name, args)
        print(
            f"| {name} | {w.params:,} | {4 * w.params / 1e6:,.1f} | "
            f"{w.flops / w.samples / G:,.3f} | {zoo.entry(name).published} |",
            flush=True,
        )


def show_model(name: str, args: argparse.Namespace) -> None:
    w = _build(name, args)
    tokens = f", {w.tokens_per_sample} tokens per sample" if w.tokens_per_sample > 1 else ""
    print(f"{w.name}: batch {w.samples}{tokens}, {w.precision}; {w.source}\n")
    print("| layer | parameters | forward GFLOPs | backward GFLOPs |")
    print("|---|---:|---:|---:|")
    for x in w.layers:
        print(f"| {x.name} | {x.params:,} | {x.fwd_flops / G:,.3f} | {x.bwd_flops / G:,.3f} |")
    fwd = sum(x.fwd_flops for x in w.layers)
    bwd = sum(x.bwd_flops for x in w.layers)
    print(
        f"| **total** ({len(w.layers)} layers) | {w.params:,} | {fwd / G:,.3f} | {bwd / G:,.3f} |"
    )
    for note in w.notes:
        print(f"\nnote: {note}")


def main(args: argparse.Namespace) -> int:
    if args.model is None:
        if args.seq_len is not None:
            raise UsageError("--seq-len needs --model (models take different lengths)")
        # check the shared options once, before any model is built
        _build(zoo.NAMES[0], args)
        list_models(args)
    else:
        show_model(args.model, args)
    return 0

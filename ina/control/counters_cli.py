"""``ina counters``: print a switch's aggregation counters once, or live with rates.

Works against BMv2 and the switch model alike (P4Runtime ``Read`` only: no arbitration, so it
never disturbs the controller that owns the switch)::

    ina counters --target 127.0.0.1:9559              # totals once
    ina counters --target 127.0.0.1:9559 --watch 1    # every second, with rates per second

On a terminal, ``--watch`` redraws the table in place (ANSI cursor-up and erase); piped or
redirected, it prints one table after another as lines.

Rates: packets/s for every counter, and the gradient payload aggregated in Gbit/s: lane bits
of the AGGREGATED contributions per second. Without ``--lanes`` the lane bytes come from the
byte counter (frame bytes minus 42 bytes of Ethernet/IPv4/UDP and 20 of INA header per
packet), which is exact for any mix of packet sizes; ``--lanes N`` uses packets x N x 4 bytes.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time

from ina.control.counters import CounterSnapshot, Rates, payload_bytes, rates, read_counters
from ina.control.p4rt import (
    DEFAULT_ADDRESS,
    DEFAULT_DEVICE_ID,
    P4RuntimeError,
    SwitchConnection,
    check_address,
)
from ina.protocol import Counter

_DROPS = [c for c in Counter if c.name.startswith("DROP_")]


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"  # pragma: no cover (loop always returns)


def format_snapshot(
    snap: CounterSnapshot,
    rate: Rates | None = None,
    lanes: int | None = None,
    workers: bool = False,
) -> str:
    """The counter table (with per-second rates if ``rate``) and a summary."""
    lines = []
    head = f"{'counter':<18}{'packets':>14}{'bytes':>16}"
    if rate is not None:
        head += f"{'packets/s':>14}"
    lines.append(head)
    for c in Counter:
        name = c.name.lower()
        p, b = snap.stats[name]
        row = f"{name:<18}{p:>14,}{b:>16,}"
        if rate is not None:
            row += f"{rate.packets[name]:>14,.1f}"
        lines.append(row)

    pkts_in = snap.packets(Counter.PACKETS_IN)
    dups = snap.packets(Counter.DUPLICATES)
    payload = payload_bytes(snap, Counter.AGGREGATED, lanes)
    lines.append("")
    summary = f"gradient payload aggregated: {_fmt_bytes(payload)}"
    if rate is not None:
        summary += (
            f", {rate.payload_gbps:.3f} Gbit/s now (results out {rate.result_gbps:.3f} Gbit/s)"
        )
    lines.append(summary)
    share = f" ({100 * dups / pkts_in:.2f} % of packets in)" if pkts_in else ""
    lines.append(f"slots completed: {snap.packets(Counter.RESULTS):,}; duplicates: {dups:,}{share}")
    drops = ", ".join(f"{c.name.removeprefix('DROP_').lower()} {snap.packets(c):,}" for c in _DROPS)
    lines.append(f"drops: {drops}")
    if workers:
        lines.append("")
        if snap.workers:
            lines.append(f"{'job_index':>9} {'worker':>6}{'contributions':>16}{'bytes':>16}")
            for (j, w), (p, b) in sorted(snap.workers.items()):
                lines.append(f"{j:>9} {w:>6}{p:>16,}{b:>16,}")
        else:
            lines.append("no worker contributions yet")
    return "\n".join(lines)


class Redraw:
    """Show one block of text after another on ``stream``: in place on a terminal (the
    cursor goes back up over the last block, which is erased), else one after the other."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.in_place = stream.isatty()
        self._lines = 0  # lines of the block on screen

    def show(self, text: str) -> None:
        if self.in_place and self._lines:
            self.stream.write(f"\x1b[{self._lines}F\x1b[J")  # up to the block's start, erase
        self.stream.write(text + "\n")
        if not self.in_place:
            self.stream.write("\n")  # a blank line between tables, as before
        self.stream.flush()
        width = shutil.get_terminal_size().columns  # a line wider than it takes more rows
        self._lines = sum(max(1, math.ceil(len(line) / width)) for line in text.split("\n"))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``ina counters`` (the `ina` command calls this on its subparser)."""
    ap.add_argument(
        "--target",
        default=DEFAULT_ADDRESS,
        metavar="HOST:PORT",
        help=f"P4Runtime address of the switch (default {DEFAULT_ADDRESS})",
    )
    ap.add_argument(
        "--device-id",
        type=int,
        default=DEFAULT_DEVICE_ID,
        help=f"P4Runtime device id (default {DEFAULT_DEVICE_ID})",
    )
    ap.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="refresh every SECONDS, with rates per second, until interrupted (Ctrl-C: "
        "exit status 130, as every command)",
    )
    ap.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="with --watch: stop after N >= 1 refreshes (default: run until ^C)",
    )
    ap.add_argument(
        "--lanes",
        type=int,
        metavar="N",
        help="lanes per packet for the Gbit/s figure (default: from byte counts)",
    )
    ap.add_argument(
        "--workers",
        action="store_true",
        help="also list each worker's contributions (worker_contributions)",
    )
    ap.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the switch (default 5)"
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ina counters",
        description="Print an INA switch's aggregation counters (BMv2 or the switch model).",
    )
    add_arguments(ap)
    return ap


def main(args: argparse.Namespace | list[str] | None = None) -> int:
    """Entry point: options parsed by the `ina` command, or an argv list (None: sys.argv);
    returns the exit code (2 if the switch cannot be read)."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(args)
    if args.watch is not None and args.watch <= 0:
        print("ina counters: --watch needs a positive number of seconds", file=sys.stderr)
        return 2
    if args.iterations is not None and args.iterations < 1:
        print(f"ina counters: --iterations must be >= 1, got {args.iterations} (leave it out "
              "to refresh until ^C)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        check_address(args.target)
    except ValueError as e:
        print(f"ina counters: --target {e}", file=sys.stderr)
        return 2
    try:
        conn = SwitchConnection(args.target, args.device_id, arbitrate=False, timeout=args.timeout)
    except (ConnectionError, P4RuntimeError) as e:
        print(f"ina counters: {e}", file=sys.stderr)
        return 2
    try:
        prev = read_counters(conn, workers=args.workers)
        header = f"INA switch {args.target} (device {args.device_id})"
        if args.watch is None:
            print(header)
            print(format_snapshot(prev, lanes=args.lanes, workers=args.workers))
            return 0
        screen, n = Redraw(sys.stdout), 0
        while True:
            time.sleep(args.watch)
            cur = read_counters(conn, workers=args.workers)
            table = format_snapshot(cur, rates(prev, cur, args.lanes), args.lanes, args.workers)
            screen.show(f"{header}, last {cur.time - prev.time:.2f} s\n{table}")
            prev = cur
            n += 1
            if args.iterations and n >= args.iterations:
                return 0
    except (P4RuntimeError, KeyError) as e:
        print(f"ina counters: {e}", file=sys.stderr)
        return 2
    finally:
        conn.close()


if __name__ == "__main__":  # pragma: no cover
    from ina.errors import run_command

    sys.exit(run_command("ina counters", main))  # Ctrl-C ends --watch: one line, status 130

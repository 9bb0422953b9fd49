"""Result copies under load: what ``result_packets`` counts on BMv2 and on the model.

Why (issue 11): in end-to-end runs BMv2's ``result_packets`` fell short of results x workers
+ retransmission replies, which the model always equals. This measures where copies go. The
workers of `ina.bench.bmv2` (raw sockets on veth host ends, prebuilt SUM frames, paced) send
at each offered rate; the switch ends may be shaped to ``--mbit`` Mbit/s with an htb class,
as Mininet's ``TCLink`` does. Once the switch is quiet, three numbers per rate:

- results x workers: the copies the ingress decided to send (every result is a multicast to
  every worker; nothing here retransmits);
- ``result_packets``: what the switch counted (BMv2: in its egress pipeline, per copy; the
  model: when it replicates);
- copies at the hosts: what the host ends received.

Usage (root; BMv2 also needs ``PATH=PREFIX/bin:$PATH, docs/testing.md``)::

    python -m ina.bench.result_copies --target bmv2 --mbit 2 --rates 4000 8000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from ina.bench.bmv2 import (
    Bmv2Switch,
    VethNamespace,
    bench_job,
    bmv2_missing,
    ensure_program,
    free_tcp_port,
    offer,
    remove_all,
    worker_frames,
)
from ina.control.counters import read_counters
from ina.control.p4rt import SwitchConnection
from ina.p4.entities import POOL_SLOTS
from ina.procs import stop_process
from ina.protocol import P4_LANES, Counter


class RawioSwitch:
    """The switch model on the veths' switch ends (``python -m ina.switch_model.rawio``), with
    `Bmv2Switch`'s ``reset`` / ``connect``, so that `offer` drives either."""

    def __init__(self, switch_ifs: dict[int, str]) -> None:
        from ina.switch_model.rawio import READY

        self.address = f"127.0.0.1:{free_tcp_port()}"
        where = ",".join(f"{p}@{i}" for p, i in sorted(switch_ifs.items()))
        cmd = [sys.executable, "-m", "ina.switch_model.rawio", "--ports", where]
        cmd += ["--lanes", str(P4_LANES), "--pool", str(POOL_SLOTS)]
        cmd += ["--grpc", self.address, "--device-id", "1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith(READY):
            self.stop()
            raise RuntimeError(f"rawio did not start: {line!r}")

    def connect(self) -> SwitchConnection:
        return SwitchConnection(self.address, device_id=1, timeout=15)

    def reset(self, conn: SwitchConnection) -> None:
        remove_all(conn)
        conn.push_pipeline()

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc.stdout.close()


def shape(ifname: str, mbit: float) -> None:
    """An htb root with one class of ``mbit`` Mbit/s on ``ifname`` (Mininet TCLink's shape)."""
    subprocess.run(
        ["tc", "qdisc", "add", "dev", ifname, "root", "handle", "5:", "htb", "default", "1"],
        check=True,
    )
    htb = ["htb", "rate", f"{mbit}mbit", "burst", "15k"]
    subprocess.run(
        ["tc", "class", "add", "dev", ifname, "parent", "5:0", "classid", "5:1", *htb], check=True
    )


def _drain(sock) -> int:
    sock.setblocking(False)
    n = 0
    while True:
        try:
            sock.recv(65536)
        except BlockingIOError:
            return n
        n += 1


def measure(target: str, workers: int, mbit: float, rates: list[float], slots: int) -> list[dict]:
    spec = bench_job(workers)
    ports = [w.port for w in spec.workers]
    rows = []
    with VethNamespace(ports) as net:
        for ifname in net.switch_ifs.values() if mbit else ():
            shape(ifname, mbit)
        if target == "bmv2":
            switch = Bmv2Switch(net.switch_ifs, ensure_program()).start()
        else:
            switch = RawioSwitch(net.switch_ifs)
        socks = {p: net.raw_socket(p, buffer_bytes=64 << 20) for p in ports}
        try:
            with switch.connect() as conn:
                frames = [worker_frames(spec, w, slots, P4_LANES) for w in spec.workers]
                for rate in rates:
                    for s in socks.values():
                        _drain(s)
                    r = offer(switch, conn, spec, socks, frames, rate)
                    time.sleep(1.0)  # the egress may lag the ingress: let it finish
                    snap = read_counters(conn, workers=False)
                    results = snap.packets(Counter.RESULTS)
                    rows.append(
                        {
                            "target": target,
                            "mbit": mbit,
                            "rate": rate,
                            "sent": r["sent"],
                            "packets_in": snap.packets(Counter.PACKETS_IN),
                            "results": results,
                            "decided": results * workers,
                            "result_packets": snap.packets(Counter.RESULT_PACKETS),
                            "at_hosts": sum(_drain(s) for s in socks.values()),
                        }
                    )
                    print(row_md(rows[-1]), flush=True)
        finally:
            for s in socks.values():
                s.close()
            switch.stop()
    return rows


TABLE_HEAD = (
    "| target | link Mbit/s | offered pkt/s | packets in / sent | results x workers "
    "| result_packets | copies at the hosts |\n|---|---:|---:|---:|---:|---:|---:|"
)


def row_md(r: dict) -> str:
    return (
        f"| {r['target']} | {r['mbit'] or '-'} | {r['rate']:,.0f} | "
        f"{r['packets_in']:,} / {r['sent']:,} | {r['decided']:,} | {r['result_packets']:,} | "
        f"{r['at_hosts']:,} |"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=("bmv2", "model"), default="bmv2")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--mbit", type=float, default=2.0, help="shape switch ports (0: unshaped)")
    p.add_argument("--rates", type=float, nargs="+", default=[4000.0, 8000.0])
    p.add_argument("--slots", type=int, default=4000, help="chunks per worker per rate")


def main(args: argparse.Namespace) -> list[dict]:
    import os

    why = "needs root (veths, tc)" if os.geteuid() != 0 else None
    if why is None and args.target == "bmv2":
        why = bmv2_missing()
    if why is not None:
        print(f"result copies skipped: {why}.", flush=True)
        return []
    print(TABLE_HEAD, flush=True)
    return measure(args.target, args.workers, args.mbit, args.rates, args.slots)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m ina.bench.result_copies", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    main(parser.parse_args())

"""The switch model on network interfaces: AF_PACKET raw sockets around `FramePipeline`.

Where BMv2's ``simple_switch_grpc`` would own a set of interfaces (Mininet's ``s1-eth1``...,
a PTF test's veths), this loop owns them instead: one ``AF_PACKET`` socket per switch port,
bound to the interface, receiving every frame that arrives (``PACKET_IGNORE_OUTGOING``: not
the ones we send), running them through `ina.switch_model.frames.FramePipeline` and writing
the output frames to their egress ports' sockets. Frames move in batches (recvmmsg/sendmmsg
through ctypes, straight between the sockets and numpy buffers), like the UDP loop in
`ina.switch_model.server`.

The loop holds ``lock`` around each batch, so that a P4Runtime service in another thread of
the same process (``--grpc``) sees tables, registers and counters between batches.

Interfaces should have their offloads off (``ethtool -K IF rx off tx off sg off tso off gso
off gro off`` on both ends of each link), as for BMv2: with checksum offload a sender's frames
arrive with unfinished TCP/UDP checksums, and with segmentation offload as 64 KiB super-frames,
which the switch would forward as they are. INA frames do not care (the switch writes a zero
UDP checksum), plain traffic does.

The kernel takes the 802.1Q tag off every frame it receives; each read also brings the tag
(``PACKET_AUXDATA``) and `ina.packet_socket` puts it back, so that a tagged frame reaches the
parser as it was on the wire and leaves with its tag, as on BMv2 (libpcap does the same).

A frame the kernel hands over queued behind a full egress queue (a bandwidth-limited link) is
dropped and counted, as a switch drops on a full queue; retransmission recovers INA packets.

Usage::

    python -m ina.switch_model.rawio --ports 1@s1-eth1,2@s1-eth2 --jobs jobs.json \\
        [--forward forward.json] [--grpc 127.0.0.1:9559] [--lanes 256]
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import select
import signal
import socket
import sys
import threading
from dataclasses import asdict, dataclass

import numpy as np

from ina.errors import UsageError, run_command
from ina.netio import IOVEC, MMSGHDR
from ina.p4.entities import POOL_SLOTS
from ina.packet_socket import (
    AUXDATA_CMSG,
    AUXDATA_SPACE,
    TAG_BYTES,
    keep_vlan_tags,
    restore_tags,
)
from ina.protocol import P4_LANES, packet_bytes
from ina.switch_model.frames import INA, FrameOutputs, FramePipeline, int_to_mac
from ina.switch_model.pipeline import Pipeline

READY = "ina-rawio ready"  # first line on stdout once the ports (and P4Runtime) are open

_libc = ctypes.CDLL(None, use_errno=True)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20: our own transmissions are not looped back
SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20
SOCKET_BUFFER_BYTES = 16 * 1024 * 1024


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def interface_mtu(ifname: str) -> int:
    """An interface's MTU (1500 if it cannot be read)."""
    try:
        with open(f"/sys/class/net/{ifname}/mtu") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1500


def parse_ports(spec: str) -> dict[int, str]:
    """``"1@s1-eth1,2@s1-eth2"`` -> {1: "s1-eth1", 2: "s1-eth2"}."""
    ports: dict[int, str] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        num, sep, ifname = item.partition("@")
        if not sep or not num.isdigit() or not ifname:
            raise ValueError(f"port {item!r}: expected NUMBER@INTERFACE")
        port = int(num)
        if port in ports:
            raise ValueError(f"port {port} given twice")
        if ifname in ports.values():
            raise ValueError(f"interface {ifname} given twice")
        ports[port] = ifname
    if not ports:
        raise ValueError("no ports given")
    return ports


@dataclass
class IOCounters:
    """What the I/O loop saw, beside the pipeline's counters."""

    rx_frames: int = 0
    rx_truncated: int = 0  # longer than the buffer stride: dropped
    rx_vlan_tagged: int = 0  # arrived with an 802.1Q tag, which the kernel had taken off
    tx_frames: int = 0
    tx_dropped: int = 0  # refused by the kernel (egress queue full, interface down)
    tx_no_port: int = 0  # for a port number that has no interface here
    rx_errors: int = 0  # reads that failed because an interface is down or gone
    ports_lost: int = 0  # ports whose interface went away (no longer read)
    batches: int = 0


class RawPort:
    """One switch port: an AF_PACKET socket bound to an interface."""

    def __init__(self, number: int, ifname: str) -> None:
        self.number = number
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            self.sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            for opt, force in (
                (socket.SO_RCVBUF, SO_RCVBUFFORCE),
                (socket.SO_SNDBUF, SO_SNDBUFFORCE),
            ):
                try:
                    self.sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER_BYTES)
                except OSError:
                    self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
            keep_vlan_tags(self.sock)  # tagged frames keep their tags, as in BMv2 (issue 11)
            self.sock.bind((ifname, ETH_P_ALL))
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


class RawSwitch:
    """Serve a `FramePipeline` on raw ports until `stop` is called."""

    def __init__(
        self,
        frames: FramePipeline,
        ports: dict[int, str],
        batch: int = 128,
        lock: threading.Lock | threading.RLock | None = None,
        stride: int | None = None,
    ) -> None:
        self.frames = frames
        self.lock = lock if lock is not None else threading.Lock()
        # room for the largest frame a port can carry (and for an INA packet)
        need = INA + frames.pipeline.payload_bytes
        mtu = max((interface_mtu(i) for i in ports.values()), default=1500)
        self.stride = stride or max(2048, need, mtu + 18)
        self.batch = batch
        self.counters = IOCounters()
        self.ports: dict[int, RawPort] = {}
        try:
            for num, ifname in sorted(ports.items()):
                self.ports[num] = RawPort(num, ifname)
        except BaseException:
            self.close()
            raise
        self._by_fd = {p.fd: p for p in self.ports.values()}
        self._stop = threading.Event()
        # receive side: one buffer for the frames of all ports in a batch
        self.rx = np.zeros((batch, self.stride), np.uint8)
        self.rx_len = np.zeros(batch, np.int64)
        self.rx_port = np.zeros(batch, np.int64)
        self._rx_iov = np.zeros(batch, IOVEC)
        self._rx_iov["base"] = _addr(self.rx) + np.arange(batch, dtype=np.uint64) * self.stride
        # room to put back an 802.1Q tag that the kernel took off (`ina.packet_socket`)
        self._rx_iov["len"] = self.stride - TAG_BYTES
        self._rx_hdr = np.zeros(batch, MMSGHDR)
        self._rx_hdr["iov"] = _addr(self._rx_iov) + np.arange(batch, dtype=np.uint64) * 16
        self._rx_hdr["iovlen"] = 1
        self._rx_ctl = np.zeros(batch, AUXDATA_CMSG)  # each read's PACKET_AUXDATA message
        self._rx_hdr["control"] = _addr(self._rx_ctl) + np.arange(batch, dtype=np.uint64) * (
            AUXDATA_CMSG.itemsize
        )
        # send side: headers point into the output buffer, rebuilt per send
        self.out = FrameOutputs.allocate(4 * batch, self.stride)
        self._tx_cap = 0
        self._ensure_tx(4 * batch)
        self._next = 0  # round-robin start among ports

    def _ensure_tx(self, n: int) -> None:
        if n > self._tx_cap:
            self._tx_cap = n
            self._tx_iov = np.zeros(n, IOVEC)
            self._tx_hdr = np.zeros(n, MMSGHDR)
            self._tx_hdr["iov"] = _addr(self._tx_iov) + np.arange(n, dtype=np.uint64) * 16
            self._tx_hdr["iovlen"] = 1

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for p in self.ports.values():
            p.close()

    def __enter__(self) -> RawSwitch:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self.close()

    # -- the loop --------------------------------------------------------------------------

    def serve_forever(self, poll: float = 0.05) -> None:
        poller = select.poll()
        for fd in self._by_fd:
            poller.register(fd, select.POLLIN)
        while not self._stop.is_set():
            events = poller.poll(poll * 1000)
            if not events:
                continue
            for fd, ev in events:
                if ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) and not (
                    ev & select.POLLIN
                ):
                    # the interface went away (a network being torn down): stop reading it
                    poller.unregister(fd)
                    self.counters.ports_lost += 1
            while not self._stop.is_set():
                n = self.receive()
                if n == 0:
                    break
                self.run_batch(n)

    def receive(self) -> int:
        """Read waiting frames from every port (round robin, no blocking) into ``rx``."""
        filled = 0
        order = list(self.ports.values())
        k = len(order)
        start = self._next
        self._next = (start + 1) % k
        for j in range(k):
            if filled >= self.batch:
                break
            p = order[(start + j) % k]
            got = self._recv(p, filled)
            if got:
                self.rx_port[filled : filled + got] = p.number
                filled += got
        return filled

    def _recv(self, port: RawPort, at: int) -> int:
        room = self.batch - at
        hdr = self._rx_hdr
        hdr["flags"][at:] = 0
        hdr["controllen"][at:] = AUXDATA_SPACE  # the kernel shrinks it to what it wrote
        self._rx_ctl[at:] = 0
        n = _libc.recvmmsg(
            port.fd, ctypes.c_void_p(_addr(hdr) + at * 64), room, MSG_DONTWAIT | MSG_TRUNC, None
        )
        if n < 0:
            e = ctypes.get_errno()
            if e in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return 0
            if e in (errno.ENETDOWN, errno.ENODEV, errno.ENXIO):
                self.counters.rx_errors += 1
                return 0
            raise OSError(e, f"recvmmsg on {port.ifname}: {os.strerror(e)}")
        lengths = hdr["len"][at : at + n].astype(np.int64)
        room = self.stride - TAG_BYTES
        truncated = ((hdr["flags"][at : at + n] & MSG_TRUNC) != 0) | (lengths > room)
        ctl, ctl_len = self._rx_ctl[at : at + n], hdr["controllen"][at : at + n]
        if truncated.any():
            # drop them: compact the good frames down (rare: MTU-sized links never do this)
            self.counters.rx_truncated += int(truncated.sum())
            keep = np.flatnonzero(~truncated)
            self.rx[at : at + keep.size] = self.rx[at + keep]
            lengths = lengths[keep]
            ctl, ctl_len = ctl[keep], ctl_len[keep]
            n = int(keep.size)
        # 802.1Q: the frame as it was on the wire, tag included (the parser then forwards it
        # at layer 2 untouched, as BMv2 does, instead of taking a tagged INA packet in)
        self.counters.rx_vlan_tagged += restore_tags(self.rx[at : at + n], lengths, ctl, ctl_len)
        self.rx_len[at : at + n] = lengths
        return n

    def run_batch(self, n: int) -> int:
        """Process the ``n`` frames in ``rx`` and send the outputs; returns frames sent."""
        c = self.counters
        c.rx_frames += n
        c.batches += 1
        with self.lock:
            m = self.frames.process(self.rx[:n], self.rx_len[:n], self.rx_port[:n], self.out)
        if m == 0:
            return 0
        return self.send(self.out, m)

    def send(self, out: FrameOutputs, m: int) -> int:
        """Send ``out``'s first ``m`` frames, each to its port (in order per port)."""
        ports = out.port[:m]
        sent = 0
        for num in np.unique(ports).tolist():
            port = self.ports.get(num)
            rows = np.flatnonzero(ports == num)
            if port is None:
                self.counters.tx_no_port += int(rows.size)
                continue
            sent += self._send(port, out, rows)
        return sent

    def _send(self, port: RawPort, out: FrameOutputs, rows: np.ndarray) -> int:
        k = int(rows.size)
        self._ensure_tx(k)
        stride = out.data.strides[0]
        self._tx_iov["base"][:k] = _addr(out.data) + rows.astype(np.uint64) * stride
        self._tx_iov["len"][:k] = out.length[rows]
        base = _addr(self._tx_hdr)
        off = sent = 0
        waited = False
        while off < k:
            r = _libc.sendmmsg(port.fd, ctypes.c_void_p(base + off * 64), k - off, 0)
            if r >= 0:
                off += r
                sent += r
                continue
            e = ctypes.get_errno()
            if e == errno.EINTR:
                continue
            if e in (errno.EAGAIN, errno.EWOULDBLOCK) and not waited:
                # socket send buffer full: give the link a moment once, then drop the rest
                waited = True
                select.select([], [port.fd], [], 0.01)
                continue
            # ENOBUFS: the egress queue dropped it; anything else: the port is gone
            self.counters.tx_dropped += 1
            off += 1
        self.counters.tx_frames += sent
        return sent

    def snapshot(self) -> dict:
        """All counters: the pipeline's (``ina_stats``), the frame layer's and the I/O's."""
        return {
            "counters": self.frames.pipeline.counters.snapshot(),
            "frames": self.frames.counters.snapshot(),
            "io": asdict(self.counters),
        }


# -- P4Runtime ------------------------------------------------------------------------------


class _ForwardMirror(dict):
    """The P4Runtime service's ``forward_table`` store, mirrored into a `FramePipeline`.

    The service keeps entries as ``{(dst_mac,): (action name, (port,))}``; every change is
    applied to ``frames.forward`` too (an entry whose action is ``drop`` drops, like a miss).
    """

    def __init__(self, frames: FramePipeline, entries: dict) -> None:
        super().__init__()
        self._frames = frames
        for k, v in entries.items():
            self[k] = v

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        action, params = value
        if action == "forward":
            self._frames.forward[int(key[0])] = int(params[0])
        else:
            self._frames.forward.pop(int(key[0]), None)

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._frames.forward.pop(int(key[0]), None)

    def pop(self, key, *default):
        self._frames.forward.pop(int(key[0]), None)
        return super().pop(key, *default)

    def clear(self) -> None:
        super().clear()
        self._frames.forward.clear()


def start_p4runtime(frames: FramePipeline, address: str, lock, device_id: int):
    """Serve P4Runtime for ``frames`` (jobs, workers, groups, counters, registers and
    ``forward_table``); returns an object with ``stop(grace)``."""
    from ina.switch_model import p4runtime_server as p4rt

    if hasattr(p4rt, "start_server"):
        server = p4rt.start_server(frames.pipeline, address, lock, device_id=device_id)
        service = getattr(server, "service", None)
        store = getattr(service, "_forward", None)
        if isinstance(store, dict):
            # forward_table writes reach the frame layer (the UDP model only stores them)
            service._forward = _ForwardMirror(frames, store)
            for (mac,), (action, params) in store.items():
                if action == "forward":
                    frames.forward[int(mac)] = int(params[0])
        else:
            print("rawio: P4Runtime forward_table writes are not applied", file=sys.stderr)
        return server
    grpc_server = p4rt.serve(frames.pipeline, address, lock, device_id=device_id)
    print("rawio: P4Runtime forward_table writes are not applied", file=sys.stderr)
    return grpc_server


# -- command line ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ports", required=True, help="switch ports: 1@IF1,2@IF2,...")
    p.add_argument("--jobs", help="jobs file (JSON) to install at start")
    p.add_argument("--forward", help="forward_table entries (p4lang runtime JSON)")
    p.add_argument(
        "--lanes",
        type=int,
        default=256,
        help=f"int32 lanes per packet (the P4 program uses {P4_LANES}; MTU 1500 allows 363)",
    )
    p.add_argument("--pool", type=int, default=POOL_SLOTS, help="slots in the register pool")
    p.add_argument("--grpc", default="", help="serve P4Runtime on this address (default: off)")
    p.add_argument("--device-id", type=int, default=0, help="P4Runtime device id")
    p.add_argument("--batch", type=int, default=128, help="frames per batch")


def main(args: argparse.Namespace) -> int:
    from ina.switch_model.run import install_job_spec
    from ina.switch_model.tables import load_jobs

    ports = parse_ports(args.ports)
    pipeline = Pipeline(lanes=args.lanes, pool_total=args.pool)
    frames = FramePipeline(pipeline)
    for spec in load_jobs(args.jobs) if args.jobs else []:
        install_job_spec(pipeline, spec)
    if args.forward:
        frames.load_forward(args.forward)
    frame = INA + packet_bytes(args.lanes)
    mtu = min(interface_mtu(i) for i in ports.values())
    if frame > mtu + 14:
        print(
            f"rawio: {args.lanes} lanes make {frame}-byte frames, more than an MTU of {mtu} "
            "carries",
            file=sys.stderr,
        )
    switch = RawSwitch(frames, ports, batch=args.batch)
    grpc_server = None
    if args.grpc:
        try:
            grpc_server = start_p4runtime(frames, args.grpc, switch.lock, args.device_id)
        except OSError as e:  # the port is taken: one line, not a traceback
            switch.close()
            raise UsageError(str(e)) from None

    def stop(*_):
        switch.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    where = ",".join(f"{n}@{i}" for n, i in sorted(ports.items()))
    forward = {int_to_mac(m): p for m, p in sorted(frames.forward.items())}
    print(
        f"{READY}: ports {where}, {f'P4Runtime on {args.grpc}' if args.grpc else 'P4Runtime off'}, lanes {args.lanes}, "
        f"pool {args.pool}, jobs {sorted(pipeline.tables.jobs)}, forward {forward}",
        flush=True,
    )
    try:
        switch.serve_forever()
    finally:
        if grpc_server is not None:
            grpc_server.stop(0.5)
        switch.close()
        print(json.dumps(switch.snapshot()), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m ina.switch_model.rawio", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    sys.exit(run_command("rawio", main, parser.parse_args()))

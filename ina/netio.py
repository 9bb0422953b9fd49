"""Batched UDP I/O: recvmmsg/sendmmsg through ctypes, into and out of numpy buffers.

Why: on loopback the kernel's cost per datagram (a sendto is ~4 us, a recv ~1 us) dwarfs
the arithmetic of aggregation, so both the switch model and the workers move packets in
batches of up to ``batch`` datagrams per system call, straight between the socket and
preallocated numpy arrays. The message headers for sendmmsg are a numpy structured array
with the layout of ``struct mmsghdr`` (Linux, LP64), filled with vectorized writes instead
of per-packet ctypes objects.

Only IPv4 is supported (INA runs on IPv4 like the P4 program).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import sys

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_HAVE_MMSG = sys.platform.startswith("linux") and hasattr(_libc, "recvmmsg")

MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20  # in recvmmsg's flags: report a datagram's whole length, however long
SOCKET_BUFFER_BYTES = 16 * 1024 * 1024  # the default ~208 KiB overflows at once under load

# struct mmsghdr { struct msghdr { void *name; socklen_t namelen; struct iovec *iov;
#   size_t iovlen; void *control; size_t controllen; int flags; }; unsigned len; }
MMSGHDR = np.dtype(
    [
        ("name", "<u8"),
        ("namelen", "<u4"),
        ("_p0", "<u4"),
        ("iov", "<u8"),
        ("iovlen", "<u8"),
        ("control", "<u8"),
        ("controllen", "<u8"),
        ("flags", "<i4"),
        ("_p1", "<u4"),
        ("len", "<u4"),
        ("_p2", "<u4"),
    ]
)
assert MMSGHDR.itemsize == 64
IOVEC = np.dtype([("base", "<u8"), ("len", "<u8")])
# struct sockaddr_in: family (host order), port (network order), addr (network order), zero[8]
SOCKADDR_IN = np.dtype([("family", "<u2"), ("port", ">u2"), ("addr", ">u4"), ("zero", "u1", 8)])
AF_INET = socket.AF_INET


def _addr(a: np.ndarray) -> int:
    # .ctypes.data, not __array_interface__: the latter builds a dtype description (tens of
    # microseconds for the structured dtypes here) on every call
    return a.ctypes.data


def ip_to_int(ip: str) -> int:
    return int.from_bytes(socket.inet_aton(ip), "big")


def int_to_ip(v: int) -> str:
    return socket.inet_ntoa(int(v).to_bytes(4, "big"))


class AddressBook:
    """A dense table of IPv4 socket addresses, referenced by index in send batches."""

    def __init__(self, capacity: int = 256) -> None:
        self.table = np.zeros(capacity, SOCKADDR_IN)
        self.index: dict[tuple[str, int], int] = {}

    def add(self, ip: str, port: int) -> int:
        key = (ip, port)
        if key in self.index:
            return self.index[key]
        i = len(self.index)
        if i >= self.table.size:
            self.table = np.concatenate([self.table, np.zeros(self.table.size, SOCKADDR_IN)])
        self.table[i] = (AF_INET, port, ip_to_int(ip), np.zeros(8, np.uint8))
        self.index[key] = i
        return i


class BatchSocket:
    """A UDP socket that receives and sends batches of datagrams of at most ``stride`` bytes."""

    def __init__(
        self, bind: tuple[str, int], batch: int = 64, stride: int = 2048, reuseport: bool = False
    ) -> None:
        """``reuseport``: join the SO_REUSEPORT group on ``bind`` (a sharded switch's sockets)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if reuseport:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        # Root may exceed net.core.rmem_max (SO_RCVBUFFORCE = 33, SO_SNDBUFFORCE = 32).
        for opt in (33, 32):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()
        self.batch = batch
        self.stride = stride
        self.addresses = AddressBook()
        # receive side
        self.rx = np.zeros((batch, stride), np.uint8)
        self.rx_from = np.zeros(batch, SOCKADDR_IN)
        self._rx_iov = np.zeros(batch, IOVEC)
        self._rx_iov["base"] = _addr(self.rx) + np.arange(batch, dtype=np.uint64) * stride
        self._rx_iov["len"] = stride
        self._rx_hdr = np.zeros(batch, MMSGHDR)
        self._rx_hdr["name"] = _addr(self.rx_from) + np.arange(batch, dtype=np.uint64) * 16
        self._rx_hdr["iov"] = _addr(self._rx_iov) + np.arange(batch, dtype=np.uint64) * 16
        self._rx_hdr["iovlen"] = 1
        # send side (headers and iovecs rebuilt per call, vectorized)
        self._tx_hdr = np.zeros(batch, MMSGHDR)
        self._tx_iov = np.zeros(batch, IOVEC)
        self._tx_hdr["iov"] = _addr(self._tx_iov) + np.arange(batch, dtype=np.uint64) * 16
        self._tx_hdr["iovlen"] = 1
        self._tx_hdr["namelen"] = 16
        self.send_errors = 0  # datagrams the kernel refused (e.g. ECONNREFUSED, ENOBUFS)

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BatchSocket:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_readable(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a datagram."""
        r, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
        return bool(r)

    def recv_batch(self) -> np.ndarray:
        """Datagrams waiting now (no blocking): their lengths; data in ``self.rx`` rows and
        senders in ``self.rx_from``. A datagram longer than ``stride`` comes back cut to
        ``stride`` bytes with its whole length (MSG_TRUNC: a switch answers a JOIN of any
        size from its header); without recvmmsg, with length ``stride + 1``."""
        if _HAVE_MMSG:
            self._rx_hdr["namelen"] = 16
            self._rx_hdr["flags"] = 0
            n = _libc.recvmmsg(
                self.fd,
                ctypes.c_void_p(_addr(self._rx_hdr)),
                self.batch,
                MSG_DONTWAIT | MSG_TRUNC,
                None,
            )
            if n < 0:
                e = ctypes.get_errno()
                if e in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR, errno.ECONNREFUSED):
                    return np.zeros(0, np.int64)
                raise OSError(e, os.strerror(e))
            return self._rx_hdr["len"][:n].astype(np.int64)
        return self._recv_fallback()

    def _recv_fallback(self) -> np.ndarray:
        lengths = []
        for i in range(self.batch):
            try:
                data, (ip, port) = self.sock.recvfrom(self.stride + 1)
            except (BlockingIOError, InterruptedError, ConnectionRefusedError):
                break
            k = min(len(data), self.stride)
            self.rx[i, :k] = np.frombuffer(data[:k], np.uint8)
            self.rx_from[i] = (AF_INET, port, ip_to_int(ip), np.zeros(8, np.uint8))
            lengths.append(len(data) if len(data) <= self.stride else self.stride + 1)
        return np.asarray(lengths, np.int64)

    def sender(self, i: int) -> tuple[str, int]:
        a = self.rx_from[i]
        return int_to_ip(a["addr"]), int(a["port"])

    def send_batch(
        self, data: np.ndarray, rows: np.ndarray, lengths: np.ndarray, dest: np.ndarray
    ) -> int:
        """Send ``data[rows[i], :lengths[i]]`` to address-book entry ``dest[i]`` for each i.

        ``data`` must be C-contiguous. Returns the number of datagrams the kernel took; the
        rest (socket buffer full) are counted in ``send_errors`` and dropped, as a switch
        drops on a full queue: retransmission recovers them.
        """
        total = int(rows.size)
        sent = 0
        base = _addr(data)
        stride = data.strides[0]
        book = _addr(self.addresses.table)
        for lo in range(0, total, self.batch):
            hi = min(lo + self.batch, total)
            k = hi - lo
            self._tx_iov["base"][:k] = base + rows[lo:hi].astype(np.uint64) * stride
            self._tx_iov["len"][:k] = lengths[lo:hi]
            self._tx_hdr["name"][:k] = book + dest[lo:hi].astype(np.uint64) * 16
            if _HAVE_MMSG:
                off = 0
                while off < k:
                    n = _libc.sendmmsg(
                        self.fd, ctypes.c_void_p(_addr(self._tx_hdr) + off * 64), k - off, 0
                    )
                    if n < 0:
                        e = ctypes.get_errno()
                        if e == errno.EINTR:
                            continue
                        if e in (errno.EAGAIN, errno.EWOULDBLOCK):
                            # buffer full: wait briefly for room once, then drop the rest
                            _, w, _ = select.select([], [self.fd], [], 0.01)
                            if w:
                                continue
                        # A refused or failing datagram: skip it, keep sending the others.
                        self.send_errors += 1
                        off += 1
                        continue
                    off += n
                    sent += n
            else:
                for j in range(k):
                    r = int(rows[lo + j])
                    a = self.addresses.table[dest[lo + j]]
                    try:
                        self.sock.sendto(
                            data[r, : lengths[lo + j]].tobytes(),
                            (int_to_ip(a["addr"]), int(a["port"])),
                        )
                        sent += 1
                    except OSError:
                        self.send_errors += 1
        return sent

"""StreamChannel sessions and master arbitration of the switch model's P4Runtime service.

`Arbiter` holds the state of every open ``StreamChannel`` and decides which controller is
primary; the service (`ina.switch_model.p4runtime_server`) hands it the StreamChannel RPC and
asks it whether a ``Write`` or ``SetForwardingPipelineConfig`` comes from the primary. It is
kept apart from the entities because it shares nothing with them: its own lock, no pipeline.

Behaviour (P4Runtime spec, and BMv2's server, p4lang/PI, where the spec leaves a choice):

- Master arbitration for the default role only (others are refused, INVALID_ARGUMENT): the
  connected controller with the highest election ID is primary, as in PI. The spec's
  "highest ID ever seen" would lock the usual controller out after one shell session with a
  higher ID. Replies carry OK to the primary, ALREADY_EXISTS to backups, NOT_FOUND while
  there is no primary; every session hears of a change of primary.
- Packet-out, digest acks and other stream messages get a ``StreamError``: UNIMPLEMENTED
  (the program has no controller packet metadata), PERMISSION_DENIED from a backup.
- Each open stream holds a gRPC thread (and a reader thread). Up to ``max_streams``
  (`MAX_STREAMS` in the service) are served at once and more are refused at once with
  RESOURCE_EXHAUSTED (the spec's answer when "the number of open streams exceeds the
  supported limit"), so ``Read``, ``Write`` and new streams are never starved of threads.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from ina.switch_model.p4rt_values import SC, P4RuntimeFailure, fail, u128

log = logging.getLogger(__name__)

_END = object()  # the stream is over (client gone, or cancelled)


@dataclass
class _Abort:
    """End the stream with this status (a bad arbitration update)."""

    code: grpc.StatusCode
    message: str


class _Session:
    """One StreamChannel: its outgoing queue and arbitration state."""

    def __init__(self) -> None:
        self.out: queue.Queue = queue.Queue()
        self.live = False  # has sent an accepted arbitration update
        self.election_id: int | None = None


class Arbiter:
    """The open StreamChannels of one device and which of them is primary."""

    def __init__(self, device_id: int, max_streams: int) -> None:
        self.device_id = device_id
        self.max_streams = max_streams
        self._lock = threading.Lock()
        self._sessions: list[_Session] = []  # live sessions, in arrival order
        self._primary: _Session | None = None
        self._streams = 0  # StreamChannels being served (guarded by _lock)

    @property
    def open_streams(self) -> int:
        """StreamChannels being served now."""
        with self._lock:
            return self._streams

    def check_primary(self, request) -> None:
        """Raise PERMISSION_DENIED unless ``request`` (a Write or a pipeline config) carries
        the primary's election ID for the default role."""
        if request.role:
            raise fail(SC.NOT_FOUND, f"unknown role {request.role!r}")
        with self._lock:
            primary = self._primary
            if (
                primary is None
                or not request.HasField("election_id")
                or u128(request.election_id) != primary.election_id
            ):
                raise fail(
                    SC.PERMISSION_DENIED,
                    "not primary: open a StreamChannel and "
                    "win master arbitration with this election id",
                )

    def stream(self, request_iterator, context) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        """The StreamChannel RPC: refused past ``max_streams``, else served until it ends."""
        # Each stream holds a gRPC thread for its lifetime (and one reader thread): past
        # max_streams a stream is refused at once, as the spec asks, so that Read, Write and
        # new streams are never starved of threads (16 streams used to hang every RPC).
        with self._lock:
            admitted = self._streams < self.max_streams
            self._streams += admitted
        if not admitted:
            context.abort(
                SC.RESOURCE_EXHAUSTED,
                f"{self.max_streams} StreamChannels are open, the most this switch serves: "
                "close one (Read needs no stream)",
            )
        try:
            yield from self._serve_stream(request_iterator, context)
        finally:
            with self._lock:
                self._streams -= 1

    def _serve_stream(self, request_iterator, context):
        session = _Session()

        def reader() -> None:
            try:
                for req in request_iterator:
                    self._on_stream_message(session, req)
            except Exception as e:  # client gone or a bug: end this stream only
                if not isinstance(e, grpc.RpcError):
                    log.exception("StreamChannel message failed")
            finally:
                session.out.put(_END)

        context.add_callback(lambda: session.out.put(_END))
        threading.Thread(target=reader, name="p4rt-stream", daemon=True).start()
        try:
            while True:
                item = session.out.get()
                if item is _END:
                    return
                if isinstance(item, _Abort):
                    context.abort(item.code, item.message)
                yield item
        finally:
            self._disconnect(session)

    def _on_stream_message(self, s: _Session, req: p4runtime_pb2.StreamMessageRequest) -> None:
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            try:
                self._arbitrate(s, req.arbitration)
            except P4RuntimeFailure as f:
                s.out.put(_Abort(f.code, f.message))
            return
        reply = p4runtime_pb2.StreamMessageResponse()
        err = reply.error
        with self._lock:
            primary = self._primary is s
        if kind == "packet":
            err.packet_out.packet_out.CopyFrom(req.packet)
        elif kind == "digest_ack":
            err.digest_list_ack.digest_list_ack.CopyFrom(req.digest_ack)
        else:
            err.other.other.CopyFrom(req.other)
        if not primary:
            err.canonical_code = code_pb2.PERMISSION_DENIED
            err.message = "not primary"
        else:
            err.canonical_code = code_pb2.UNIMPLEMENTED
            err.message = (
                f"{kind or 'empty'} stream messages are not supported: the INA "
                "program has no packet-in/out metadata or digests"
            )
        s.out.put(reply)

    def _arbitrate(self, s: _Session, m: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        with self._lock:
            if m.device_id != self.device_id:
                code = SC.FAILED_PRECONDITION if s.live else SC.NOT_FOUND
                raise fail(code, f"unknown device id {m.device_id}")
            if m.role.name or m.role.HasField("config"):
                raise fail(SC.INVALID_ARGUMENT, "only the default role is supported")
            eid = u128(m.election_id) if m.HasField("election_id") else None
            if eid is not None and any(o is not s and o.election_id == eid for o in self._sessions):
                raise fail(SC.INVALID_ARGUMENT, f"election id {eid} is used by another controller")
            s.election_id = eid
            if not s.live:
                s.live = True
                self._sessions.append(s)
            if self._elect():
                self._notify(self._sessions)
            else:
                self._notify([s])

    def _elect(self) -> bool:
        """Make the live session with the highest election id primary (none without ids);
        True if that changed. Like BMv2's server (PI), and unlike the letter of the spec,
        only live sessions count: when a primary leaves, the next highest takes over, so a
        shell session with a high id cannot lock the default controller out until restart."""
        ranked = [x for x in self._sessions if x.election_id is not None]
        new = max(ranked, key=lambda x: x.election_id) if ranked else None
        changed = new is not self._primary
        self._primary = new
        return changed

    def _disconnect(self, s: _Session) -> None:
        with self._lock:
            if s in self._sessions:
                self._sessions.remove(s)
            if self._elect():
                self._notify(self._sessions)

    def _notify(self, sessions: list[_Session]) -> None:
        """Send each session its arbitration status (caller holds ``_lock``)."""
        for s in sessions:
            r = p4runtime_pb2.StreamMessageResponse()
            a = r.arbitration
            a.device_id = self.device_id
            if self._primary is not None:  # the primary's id, as PI sends it
                a.election_id.high = self._primary.election_id >> 64
                a.election_id.low = self._primary.election_id & ((1 << 64) - 1)
            if self._primary is s:
                a.status.code = code_pb2.OK
                a.status.message = "primary"
            elif self._primary is not None:
                a.status.code = code_pb2.ALREADY_EXISTS
                a.status.message = "backup: another controller is primary"
            else:
                a.status.code = code_pb2.NOT_FOUND
                a.status.message = "backup: there is no primary"
            s.out.put(r)

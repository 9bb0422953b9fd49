"""The switch model's P4Runtime service: the same control API as BMv2's simple_switch_grpc.

One control plane (`ina.control.p4rt`) and one interactive ``p4runtime-shell`` session drive
either target, so the model serves P4Runtime (v1, API 1.4.1) for the entities of our P4
program (`ina.p4.entities`, P4Info from `ina.p4info.build_p4info`) and maps each onto the
`Pipeline` it wraps:

====================================  =====================================================
P4Runtime entity                      switch model state
====================================  =====================================================
``job_table`` / ``set_job``           ``Pipeline.install_job(JobEntry)`` (INSERT, MODIFY),
                                      ``Pipeline.remove_job`` (DELETE)
``worker_table`` / ``set_worker``     ``Tables.add_worker(WorkerAddress)``; the worker's
                                      switch port comes from the job's multicast group
                                      (the replica whose instance is the worker id)
``forward_table`` / ``forward``       stored and read back (the UDP-mode model forwards
                                      nothing else; BMv2 uses it for plain L2 traffic)
``parent_table`` / ``set_parent``     ``Pipeline.set_parent(ParentEntry)`` (a leaf of a
                                      hierarchical job); ``no_parent`` entries are kept
                                      beside it (the same as no entry)
multicast group entries               ``Tables.mcast_groups[group] = [(port, instance)]``
``ina_stats``, ``worker_contributions``  ``Pipeline.counters.stats`` / ``.workers``
``slot_*`` registers                  ``Pipeline.registers`` (``slot_lane_i`` = lane i)
``job_epoch``, ``join_*``, ``up_*``   ``Pipeline.runs`` (JoinRun)
====================================  =====================================================

Behaviour follows the P4Runtime specification; where the specification leaves a choice, the
model does what BMv2's P4Runtime server (p4lang/PI) does, so that a controller sees the same
answers from both targets:

- Master arbitration on ``StreamChannel`` for the default role: the connected controller
  with the highest election ID is primary (as in PI: the spec's "highest ID ever seen"
  would lock the usual controller out after one shell session with a higher ID); replies
  carry OK to the primary, ALREADY_EXISTS to backups (NOT_FOUND while there is no primary). ``Write`` and ``SetForwardingPipelineConfig`` need
  the primary's election ID (else PERMISSION_DENIED); ``Read`` needs no session. Roles other
  than the default are refused. Packet-out, digest acks and other stream messages get a
  ``StreamError`` UNIMPLEMENTED: the program has no controller packet metadata.
- ``Write`` reports per-update errors the standard way (status UNKNOWN with one ``p4.v1.Error``
  per update in the binary details, which p4runtime-shell unpacks); only CONTINUE_ON_ERROR
  atomicity is implemented (the others are optional: UNIMPLEMENTED). A ``Read`` stops at the
  first bad request and returns its code directly (like PI). Unknown P4 IDs are
  INVALID_ARGUMENT (like PI); bytestrings that do not fit their width, or are empty, are
  OUT_OF_RANGE; padded bytestrings are accepted and replies use the canonical (shortest)
  form.
- The model *is* the program, so it starts with our P4Info installed (``preloaded``):
  ``p4runtime-shell`` works without ``--config``. ``SetForwardingPipelineConfig`` accepts
  only a P4Info that matches ours (`ina.p4info.p4info_differences`; p4c's P4Info for the
  program passes) and ignores ``p4_device_config`` (stored and returned, e.g. BMv2 JSON).
  VERIFY_AND_COMMIT clears the forwarding state as on BMv2 (tables, groups, registers,
  counters); RECONCILE_AND_COMMIT and COMMIT keep it.
- A ``job_table`` entry that runs ``drop`` is kept beside the pipeline's jobs: its packets
  miss in the pipeline and are dropped as UNKNOWN_JOB, which is what the program does with
  such an entry. ``worker_table`` entries that run ``drop`` are refused (UNIMPLEMENTED): the
  model's replication has no per-worker drop; delete the entry instead.
  Their default actions are const (PERMISSION_DENIED on MODIFY, as the program declares).
- Registers: the P4Info size is ``POOL_SLOTS * 2``; the model serves the cells it has
  (``pool_total * 2``, OUT_OF_RANGE beyond) and lanes it does not run (``slot_lane_i`` with
  ``i >= lanes``) read as zero and refuse non-zero writes. BMv2's P4Runtime server does not
  implement register access at all (use ``simple_switch_CLI register_read`` there).

Threading: gRPC serves requests on a thread pool while the model's data path runs in another
thread of the same process. Every access to the pipeline holds one lock, ``pipeline_lock``,
which the I/O loop must also hold around ``Pipeline.process_batch`` (one acquisition per
batch, so control writes are atomic with respect to packets; a ``Write`` batch is applied
under one acquisition). A ``Read`` only copies the state it answers with under the lock
(microseconds even for every register) and encodes the reply after releasing it
(`ina.switch_model.p4rt_wire`: numpy, not protobuf objects, for counter and register cells),
so a large read never holds up aggregation.

Streams: each open ``StreamChannel`` holds a gRPC thread. The service serves up to
``max_streams`` (`MAX_STREAMS`) at once and refuses more with RESOURCE_EXHAUSTED (the
spec's answer when "the number of open streams exceeds the supported limit"); the pool
keeps `RPC_THREADS` more threads, so ``Read``, ``Write`` and the refusals always get one.

Usage::

    lock = threading.Lock()
    server = start_server(pipeline, "0.0.0.0:9559", lock)   # returns at once
    ...  # I/O loop: with lock: pipeline.process_batch(...)
    server.stop()
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import ipaddress
import logging
import queue
import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
import numpy as np
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ina.p4 import entities
from ina.p4info import build_p4info, p4info_differences
from ina.switch_model import p4rt_wire
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.tables import JobEntry, ParentEntry, Tables, WorkerAddress

log = logging.getLogger(__name__)

DEFAULT_DEVICE_ID = 1  # p4runtime-shell's default; start simple_switch_grpc with --device-id 1
DEFAULT_ADDRESS = "0.0.0.0:9559"  # simple_switch_grpc's default --grpc-server-addr
P4RUNTIME_API_VERSION = "1.4.1"  # the p4runtime protos this service is built on
_READ_BYTES = 256 * 1024  # bytes per ReadResponse: far below gRPC's 4 MB default limit
MAX_STREAMS = 32  # StreamChannels served at once; more are refused (RESOURCE_EXHAUSTED)
RPC_THREADS = 8  # gRPC threads left for unary RPCs and Reads when every stream is open

SC = grpc.StatusCode
_U = p4runtime_pb2.Update
_PIPE = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET = p4runtime_pb2.GetForwardingPipelineConfigRequest


class P4RuntimeFailure(Exception):
    """A request (or one update of a batch) failed with a canonical gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _fail(code: grpc.StatusCode, message: str) -> P4RuntimeFailure:
    return P4RuntimeFailure(code, message)


def _rpc_code(code: grpc.StatusCode) -> int:
    """google.rpc.Code number of a grpc.StatusCode."""
    return code.value[0]


# -- bytestrings (P4Runtime spec, "Bytestrings") -----------------------------------------------


def encode_uint(value: int) -> bytes:
    """Canonical bytestring of an unsigned value: the shortest big-endian string, >= 1 byte."""
    value = int(value)
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_uint(data: bytes, bits: int, what: str) -> int:
    """Value of a bytestring that must fit ``bit<bits>``; leading zero bytes are allowed."""
    if not data:
        raise _fail(SC.OUT_OF_RANGE, f"{what}: empty bytestring")
    value = int.from_bytes(data, "big")
    if value >> bits:
        raise _fail(SC.OUT_OF_RANGE, f"{what}: {value:#x} does not fit bit<{bits}>")
    return value


def _u128(msg: p4runtime_pb2.Uint128) -> int:
    return (msg.high << 64) | msg.low


def _mac_str(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def _mac_int(mac: str) -> int:
    try:
        return int(mac.replace(":", "").replace("-", ""), 16) & ((1 << 48) - 1)
    except ValueError:
        return 0


def _ip_int(ip: str) -> int:
    try:
        return int(ipaddress.IPv4Address(ip))
    except ValueError:  # a host name in a jobs file: the program only holds addresses
        return 0


# -- the program's schema, from the P4Info -------------------------------------------------


@dataclass(frozen=True)
class _TableInfo:
    id: int
    name: str
    fields: tuple[tuple[int, str, int, int], ...]  # (id, name, bitwidth, match type)
    actions: frozenset[int]
    default_action: int
    size: int


@dataclass(frozen=True)
class _ActionInfo:
    id: int
    name: str
    params: tuple[tuple[int, str, int], ...]  # (id, name, bitwidth)


class _Schema:
    """Entities of the P4Info by ID, for validating requests."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.tables = {
            t.preamble.id: _TableInfo(
                t.preamble.id,
                t.preamble.name,
                tuple((m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields),
                frozenset(r.id for r in t.action_refs),
                t.const_default_action_id or t.initial_default_action.action_id,
                t.size,
            )
            for t in info.tables
        }
        self.actions = {
            a.preamble.id: _ActionInfo(
                a.preamble.id,
                a.preamble.name,
                tuple((p.id, p.name, p.bitwidth) for p in a.params),
            )
            for a in info.actions
        }
        self.counters = {c.preamble.id: c for c in info.counters}
        self.registers = {r.preamble.id: r for r in info.registers}
        self.table_id = {t.name: i for i, t in self.tables.items()}
        self.action_id = {a.name: i for i, a in self.actions.items()}

    def table(self, table_id: int) -> _TableInfo:
        t = self.tables.get(table_id)
        if t is None:
            raise _fail(SC.INVALID_ARGUMENT, f"unknown table id {table_id:#x}")
        return t


# -- StreamChannel sessions ----------------------------------------------------------------

_END = object()


@dataclass
class _Abort:
    code: grpc.StatusCode
    message: str


class _Session:
    """One StreamChannel: its outgoing queue and arbitration state."""

    def __init__(self) -> None:
        self.out: queue.Queue = queue.Queue()
        self.live = False  # has sent an accepted arbitration update
        self.election_id: int | None = None


# -- the service ---------------------------------------------------------------------------


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):
    """P4Runtime for one switch model device (see the module docstring)."""

    def __init__(
        self,
        pipeline: Pipeline,
        lock: threading.Lock | threading.RLock | None = None,
        device_id: int = DEFAULT_DEVICE_ID,
        preloaded: bool = True,
        max_streams: int = MAX_STREAMS,
    ) -> None:
        self.pipeline = pipeline
        self.pipeline_lock = lock if lock is not None else threading.Lock()
        self.device_id = device_id
        self._p4info = build_p4info()
        self._schema = _Schema(self._p4info)
        self._config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        if preloaded:
            self._config = p4runtime_pb2.ForwardingPipelineConfig(p4info=self._p4info)
        self._saved: p4runtime_pb2.ForwardingPipelineConfig | None = None
        # State the pipeline has no place for, kept for read-write symmetry.
        self._forward: dict[tuple[int, ...], tuple[str, tuple[int, ...]]] = {}
        self._job_drops: set[tuple[int, ...]] = set()  # job_table keys whose action is drop
        self._no_parents: set[tuple[int, ...]] = set()  # parent_table keys of no_parent
        self._entry_meta: dict[tuple[int, tuple[int, ...]], tuple[int, bytes]] = {}
        self._group_meta: dict[int, bytes] = {}
        self._group_port_bytes: set[int] = set()  # groups written with `Replica.port`
        # Arbitration (default role only).
        self._arb_lock = threading.Lock()
        self._sessions: list[_Session] = []
        self._primary: _Session | None = None
        self.max_streams = max_streams
        self._streams = 0  # StreamChannels being served (guarded by _arb_lock)

        self._tables = {
            "job_table": (self._job_apply, self._job_remove, self._job_entries),
            "worker_table": (self._worker_apply, self._worker_remove, self._worker_entries),
            "forward_table": (self._forward_apply, self._forward_remove, self._forward_entries),
            "parent_table": (self._parent_apply, self._parent_remove, self._parent_entries),
        }
        self._lane_of = {}  # register id -> lane index, or None for scalar registers
        for r in entities.REGISTERS:
            lane = r.name.removeprefix("slot_lane_")
            self._lane_of[r.id] = int(lane) if lane.isdigit() else None

    # -- RPCs ------------------------------------------------------------------------------

    def Capabilities(self, request, context):  # noqa: N802 (gRPC method names)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    def SetForwardingPipelineConfig(self, request, context):  # noqa: N802
        try:
            self._check_device(request.device_id)
            self._check_primary(request)
            self._set_pipeline(request)
        except P4RuntimeFailure as f:
            context.abort(f.code, f.message)
        except Exception:  # never let a bug take the switch down: report it
            log.exception("SetForwardingPipelineConfig failed")
            context.abort(SC.INTERNAL, "internal error in the switch model (see its log)")
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):  # noqa: N802
        reply = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        try:
            self._check_device(request.device_id)
        except P4RuntimeFailure as f:
            context.abort(f.code, f.message)
        cfg = self._config
        if cfg is None:  # spec: config unset when the device has none
            return reply
        rt = request.response_type
        if rt == _GET.COOKIE_ONLY:
            if cfg.HasField("cookie"):
                reply.config.cookie.CopyFrom(cfg.cookie)
            else:
                reply.config.SetInParent()
        elif rt == _GET.P4INFO_AND_COOKIE:
            reply.config.p4info.CopyFrom(cfg.p4info)
            if cfg.HasField("cookie"):
                reply.config.cookie.CopyFrom(cfg.cookie)
        elif rt == _GET.DEVICE_CONFIG_AND_COOKIE:
            reply.config.p4_device_config = cfg.p4_device_config
            if cfg.HasField("cookie"):
                reply.config.cookie.CopyFrom(cfg.cookie)
        else:
            reply.config.CopyFrom(cfg)
        return reply

    def Write(self, request, context):  # noqa: N802
        try:
            self._check_device(request.device_id)
            self._check_primary(request)
            if self._config is None:
                raise _fail(SC.FAILED_PRECONDITION, "no forwarding pipeline config set")
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise _fail(SC.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        except P4RuntimeFailure as f:
            context.abort(f.code, f.message)
        errors: list[P4RuntimeFailure | None] = []
        with self.pipeline_lock:
            for update in request.updates:
                try:
                    self._write_update(update)
                    errors.append(None)
                except P4RuntimeFailure as f:
                    errors.append(f)
                except Exception as e:  # a bug: report it per update, keep going
                    log.exception("Write update failed")
                    errors.append(_fail(SC.INTERNAL, f"internal error: {e!r}"))
        if any(errors):
            self._abort_batch(context, errors, "Write failure.")
        return p4runtime_pb2.WriteResponse()

    def Read(self, request, context) -> Iterator[bytes]:  # noqa: N802
        """Serialized ReadResponses (see `_add_to_server`): the state is copied under the
        pipeline lock, and encoded and sent after it, in messages of at most _READ_BYTES, so
        a read of every register (about 80,000 cells) holds up the data path for a copy only."""
        try:
            self._check_device(request.device_id)
            if request.role:
                raise _fail(SC.NOT_FOUND, f"unknown role {request.role!r}")
            if self._config is None:
                raise _fail(SC.FAILED_PRECONDITION, "no forwarding pipeline config set")
            with self.pipeline_lock:
                parts = [p for entity in request.entities for p in self._read_entity(entity)]
        except P4RuntimeFailure as f:
            context.abort(f.code, f.message)
        except Exception:
            log.exception("Read failed")
            context.abort(SC.INTERNAL, "internal error in the switch model (see its log)")
        # Always at least one (maybe empty) response, as BMv2 does.
        try:
            yield from p4rt_wire.reply_messages(parts, _READ_BYTES)
        except Exception:
            log.exception("Read reply failed")
            context.abort(SC.INTERNAL, "internal error in the switch model (see its log)")

    @property
    def open_streams(self) -> int:
        """StreamChannels being served now."""
        with self._arb_lock:
            return self._streams

    def StreamChannel(self, request_iterator, context):  # noqa: N802
        # Each stream holds a gRPC thread for its lifetime (and one reader thread): past
        # max_streams a stream is refused at once, as the spec asks, so that Read, Write and
        # new streams are never starved of threads (16 streams used to hang every RPC).
        with self._arb_lock:
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
            with self._arb_lock:
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

    # -- request checks --------------------------------------------------------------------

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise _fail(
                SC.NOT_FOUND,
                f"unknown device id {device_id} (this switch model is device {self.device_id})",
            )

    def _check_primary(self, request) -> None:
        if request.role:
            raise _fail(SC.NOT_FOUND, f"unknown role {request.role!r}")
        with self._arb_lock:
            primary = self._primary
            if (
                primary is None
                or not request.HasField("election_id")
                or _u128(request.election_id) != primary.election_id
            ):
                raise _fail(
                    SC.PERMISSION_DENIED,
                    "not primary: open a StreamChannel and "
                    "win master arbitration with this election id",
                )

    # -- arbitration -------------------------------------------------------------------------

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
        with self._arb_lock:
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
        with self._arb_lock:
            if m.device_id != self.device_id:
                code = SC.FAILED_PRECONDITION if s.live else SC.NOT_FOUND
                raise _fail(code, f"unknown device id {m.device_id}")
            if m.role.name or m.role.HasField("config"):
                raise _fail(SC.INVALID_ARGUMENT, "only the default role is supported")
            eid = _u128(m.election_id) if m.HasField("election_id") else None
            if eid is not None and any(o is not s and o.election_id == eid for o in self._sessions):
                raise _fail(SC.INVALID_ARGUMENT, f"election id {eid} is used by another controller")
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
        with self._arb_lock:
            if s in self._sessions:
                self._sessions.remove(s)
            if self._elect():
                self._notify(self._sessions)

    def _notify(self, sessions: list[_Session]) -> None:
        """Send each session its arbitration status (caller holds ``_arb_lock``)."""
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

    # -- pipeline config -----------------------------------------------------------------

    def _set_pipeline(self, request) -> None:
        action = request.action
        if action in (
            _PIPE.VERIFY,
            _PIPE.VERIFY_AND_SAVE,
            _PIPE.VERIFY_AND_COMMIT,
            _PIPE.RECONCILE_AND_COMMIT,
        ):
            if not request.HasField("config"):
                raise _fail(SC.INVALID_ARGUMENT, "no config given")
            diffs = p4info_differences(request.config.p4info, self._p4info)
            if diffs:
                raise _fail(
                    SC.INVALID_ARGUMENT,
                    "the switch model runs only the INA program; this P4Info differs: "
                    + "; ".join(diffs),
                )
            cfg = p4runtime_pb2.ForwardingPipelineConfig()
            cfg.CopyFrom(request.config)
            if action == _PIPE.VERIFY:
                return
            if action == _PIPE.VERIFY_AND_SAVE:
                self._saved = cfg
                return
            with self.pipeline_lock:
                if action == _PIPE.VERIFY_AND_COMMIT:
                    self._clear_state()  # a new pipeline starts empty, as on BMv2
                self._config = cfg
                self._saved = None
        elif action == _PIPE.COMMIT:
            if request.HasField("config"):
                raise _fail(SC.INVALID_ARGUMENT, "COMMIT takes no config")
            if self._saved is None:
                raise _fail(SC.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
            with self.pipeline_lock:
                self._config, self._saved = self._saved, None
        else:
            raise _fail(SC.INVALID_ARGUMENT, f"unsupported action {action}")

    def _clear_state(self) -> None:
        t = self.pipeline.tables
        # Clear in place: the I/O loop may hold references to these containers.
        t.jobs.clear()
        t.workers.clear()
        t.mcast_groups.clear()
        t.parents.clear()
        self._no_parents.clear()
        self.pipeline.registers.reset()
        self.pipeline.runs.reset_all()
        self.pipeline.counters.reset()
        self._forward.clear()
        self._job_drops.clear()
        self._entry_meta.clear()
        self._group_meta.clear()
        self._group_port_bytes.clear()

    # -- Write -----------------------------------------------------------------------------

    def _abort_batch(self, context, errors: list[P4RuntimeFailure | None], msg: str) -> None:
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message=msg)
        for e in errors:
            err = p4runtime_pb2.Error()
            if e is None:
                err.canonical_code = code_pb2.OK
            else:
                err.canonical_code = _rpc_code(e.code)
                err.message = e.message
            detail = any_pb2.Any()
            detail.Pack(err)
            status.details.append(detail)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(SC.UNKNOWN, msg)

    def _write_update(self, update: p4runtime_pb2.Update) -> None:
        kind = update.entity.WhichOneof("entity")
        if update.type not in (_U.INSERT, _U.MODIFY, _U.DELETE):
            raise _fail(SC.INVALID_ARGUMENT, "update type is not set")
        if kind == "table_entry":
            self._write_table(update.type, update.entity.table_entry)
        elif kind == "packet_replication_engine_entry":
            self._write_pre(update.type, update.entity.packet_replication_engine_entry)
        elif kind == "counter_entry":
            self._write_counter(update.type, update.entity.counter_entry)
        elif kind == "register_entry":
            self._write_register(update.type, update.entity.register_entry)
        elif kind is None:
            raise _fail(SC.INVALID_ARGUMENT, "entity is not set")
        else:
            raise _fail(
                SC.INVALID_ARGUMENT, f"the INA program has no {kind.replace('_', ' ')} entities"
            )

    # -- tables ----------------------------------------------------------------------------

    def _parse_key(self, t: _TableInfo, match) -> tuple[int, ...]:
        given: dict[int, int] = {}
        fields = {f[0]: f for f in t.fields}
        for m in match:
            f = fields.get(m.field_id)
            if f is None:
                raise _fail(SC.INVALID_ARGUMENT, f"{t.name}: unknown match field id {m.field_id}")
            if m.field_id in given:
                raise _fail(SC.INVALID_ARGUMENT, f"{t.name}: match field {f[1]} given twice")
            if m.WhichOneof("field_match_type") != "exact":
                raise _fail(SC.INVALID_ARGUMENT, f"{t.name}.{f[1]} is an exact match field")
            given[m.field_id] = decode_uint(m.exact.value, f[2], f"{t.name}.{f[1]}")
        missing = [f[1] for f in t.fields if f[0] not in given]
        if missing:
            raise _fail(SC.INVALID_ARGUMENT, f"{t.name}: missing match fields {missing}")
        return tuple(given[f[0]] for f in t.fields)

    def _parse_action(self, t: _TableInfo, ta: p4runtime_pb2.TableAction):
        if ta.WhichOneof("type") != "action":
            raise _fail(SC.INVALID_ARGUMENT, f"{t.name} is a direct table: give an action")
        a = self._schema.actions.get(ta.action.action_id)
        if a is None or a.id not in t.actions:
            raise _fail(
                SC.INVALID_ARGUMENT,
                f"action id {ta.action.action_id:#x} is not an action of {t.name}",
            )
        params = {p[0]: p for p in a.params}
        given: dict[int, int] = {}
        for p in ta.action.params:
            info = params.get(p.param_id)
            if info is None:
                raise _fail(SC.INVALID_ARGUMENT, f"{a.name}: unknown param id {p.param_id}")
            if p.param_id in given:
                raise _fail(SC.INVALID_ARGUMENT, f"{a.name}: param {info[1]} given twice")
            given[p.param_id] = decode_uint(p.value, info[2], f"{a.name}.{info[1]}")
        missing = [p[1] for p in a.params if p[0] not in given]
        if missing:
            raise _fail(SC.INVALID_ARGUMENT, f"{a.name}: missing params {missing}")
        return a, tuple(given[p[0]] for p in a.params)

    def _write_table(self, utype: int, te: p4runtime_pb2.TableEntry) -> None:
        t = self._schema.table(te.table_id)
        apply, remove, entries = self._tables[t.name]
        if te.is_const:
            raise _fail(SC.INVALID_ARGUMENT, "is_const must be false in a write")
        for f in ("counter_data", "meter_config", "meter_counter_data", "time_since_last_hit"):
            if te.HasField(f):
                raise _fail(SC.INVALID_ARGUMENT, f"{t.name} has no direct resources ({f})")
        if te.idle_timeout_ns:
            raise _fail(SC.INVALID_ARGUMENT, f"{t.name} does not support idle timeouts")
        if te.is_default_action:
            if te.match or te.priority:
                raise _fail(SC.INVALID_ARGUMENT, "a default entry has no match and priority 0")
            if utype != _U.MODIFY:
                raise _fail(SC.INVALID_ARGUMENT, "the default entry can only be modified")
            raise _fail(SC.PERMISSION_DENIED, f"the default action of {t.name} is const")
        if te.priority:
            raise _fail(SC.INVALID_ARGUMENT, f"{t.name} has only exact matches: priority 0")
        key = self._parse_key(t, te.match)
        exists = key in entries()
        if utype == _U.DELETE:
            if not exists:
                raise _fail(SC.NOT_FOUND, f"{t.name}: no entry for key {key}")
            remove(key)
            self._entry_meta.pop((t.id, key), None)
            return
        if utype == _U.INSERT:
            if exists:
                raise _fail(SC.ALREADY_EXISTS, f"{t.name}: key {key} already has an entry")
            if not te.HasField("action"):
                raise _fail(SC.INVALID_ARGUMENT, "INSERT needs an action")
            if len(entries()) >= t.size:
                raise _fail(SC.RESOURCE_EXHAUSTED, f"{t.name} is full ({t.size} entries)")
        elif not exists:
            raise _fail(SC.NOT_FOUND, f"{t.name}: no entry for key {key}")
        elif not te.HasField("action"):
            return  # spec: MODIFY without an action (and no direct resources) is a no-op
        action, values = self._parse_action(t, te.action)
        apply(key, action, values, utype)
        self._entry_meta[(t.id, key)] = (te.controller_metadata, te.metadata)

    def _job_apply(self, key, action, values, utype) -> None:
        if action.name == "drop":  # JobLookup: job_found stays false, as on a miss
            self.pipeline.remove_job(key[0])
            self._job_drops.add(key)
            return
        job_index, num_workers, pool_base, pool_size, mcast_grp = values
        try:
            job = JobEntry(
                job_id=key[0],
                job_index=job_index,
                num_workers=num_workers,
                pool_base=pool_base,
                pool_size=pool_size,
                mcast_grp=mcast_grp,
            )
            p = self.pipeline
            old = p.tables.jobs.get(job.job_id)
            if old is None:
                p.install_job(job)  # fresh pool registers: a new generation space
            elif (old.pool_base, old.pool_size) == (job.pool_base, job.pool_size):
                # Same pool: keep slots in flight (the P4 program keeps its registers too).
                p.tables.add_job(job, p.pool_total)
            else:
                Tables(jobs=dict(p.tables.jobs)).add_job(job, p.pool_total)  # validate first
                p.registers.reset(old.pool_base, old.pool_size)
                p.install_job(job)
        except ValueError as e:
            raise _fail(SC.INVALID_ARGUMENT, f"job_table: {e}") from None
        self._job_drops.discard(key)
        self._sync_worker_ports()

    def _job_remove(self, key) -> None:
        if key in self._job_drops:
            self._job_drops.discard(key)
        else:
            self.pipeline.remove_job(key[0])

    def _job_entries(self):
        entries: dict[tuple[int, ...], tuple[str, tuple[int, ...]]] = {
            key: ("drop", ()) for key in self._job_drops
        }
        for j in self.pipeline.tables.jobs.values():
            entries[(j.job_id,)] = (
                "set_job",
                (j.job_index, j.num_workers, j.pool_base, j.pool_size, j.mcast_grp),
            )
        return entries

    def _worker_apply(self, key, action, values, utype) -> None:
        if action.name == "drop":
            raise _fail(
                SC.UNIMPLEMENTED,
                "the switch model cannot drop one worker's result copies; delete "
                "the worker_table entry instead",
            )
        mac, ip, udp_port = values
        job_id, worker_id = key
        port = self._worker_port(job_id, worker_id)
        if port is None:  # group not written yet: keep what we knew (0, or a jobs file's)
            old = self.pipeline.tables.workers.get(key)
            port = old.port if old is not None else 0
        self.pipeline.tables.add_worker(
            WorkerAddress(
                job_id=job_id,
                worker_id=worker_id,
                ip=str(ipaddress.IPv4Address(ip)),
                udp_port=udp_port,
                mac=_mac_str(mac),
                port=port,
            )
        )

    def _worker_remove(self, key) -> None:
        self.pipeline.tables.workers.pop(key, None)

    def _worker_entries(self):
        return {
            key: ("set_worker", (_mac_int(w.mac), _ip_int(w.ip), w.udp_port))
            for key, w in self.pipeline.tables.workers.items()
        }

    def _parent_apply(self, key, action, values, utype) -> None:
        if action.name == "no_parent":  # as a miss: the job is not a leaf here
            self.pipeline.remove_parent(key[0])
            self._no_parents.add(key)
            return
        worker_id, port, mac, ip, udp_port = values
        try:
            parent = ParentEntry(
                job_id=key[0],
                worker_id=worker_id,
                ip=str(ipaddress.IPv4Address(ip)),
                udp_port=udp_port,
                mac=_mac_str(mac),
                port=port,
            )
        except ValueError as e:
            raise _fail(SC.INVALID_ARGUMENT, f"parent_table: {e}") from None
        self._no_parents.discard(key)
        self.pipeline.set_parent(parent)

    def _parent_remove(self, key) -> None:
        self._no_parents.discard(key)
        self.pipeline.remove_parent(key[0])

    def _parent_entries(self):
        entries: dict[tuple[int, ...], tuple[str, tuple[int, ...]]] = {
            key: ("no_parent", ()) for key in self._no_parents
        }
        for p in self.pipeline.tables.parents.values():
            entries[(p.job_id,)] = (
                "set_parent",
                (p.worker_id, p.port, _mac_int(p.mac), _ip_int(p.ip), p.udp_port),
            )
        return entries

    def _forward_apply(self, key, action, values, utype) -> None:
        self._forward[key] = (action.name, values)

    def _forward_remove(self, key) -> None:
        self._forward.pop(key, None)

    def _forward_entries(self):
        return self._forward

    def _worker_port(self, job_id: int, worker_id: int) -> int | None:
        """Switch port of a worker: its replica (instance = worker id) in the job's group."""
        job = self.pipeline.tables.jobs.get(job_id)
        if job is None:
            return None
        for port, rid in self.pipeline.tables.mcast_groups.get(job.mcast_grp, ()):
            if rid == worker_id:
                return port
        return None

    def _sync_worker_ports(self) -> None:
        """Give worker addresses the ports their groups now name (tables change in any order)."""
        workers = self.pipeline.tables.workers
        for key, w in list(workers.items()):
            port = self._worker_port(*key)
            if port is not None and port != w.port:
                workers[key] = dataclasses.replace(w, port=port)

    # -- packet replication engine -----------------------------------------------------------

    def _write_pre(self, utype: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
        kind = pre.WhichOneof("type")
        if kind == "clone_session_entry":
            raise _fail(SC.UNIMPLEMENTED, "the INA program uses no clone sessions")
        if kind is None:
            raise _fail(SC.INVALID_ARGUMENT, "packet replication engine entry is not set")
        m = pre.multicast_group_entry
        gid = m.multicast_group_id
        if gid == 0:
            raise _fail(SC.INVALID_ARGUMENT, "multicast group id 0 is reserved")
        if gid > entities.MAX_MCAST_GROUP:  # as BMv2 answers (issue 11)
            raise _fail(
                SC.OUT_OF_RANGE, f"multicast group {gid}: ids are 1..{entities.MAX_MCAST_GROUP}"
            )
        groups = self.pipeline.tables.mcast_groups
        if utype == _U.DELETE:
            if gid not in groups:
                raise _fail(SC.NOT_FOUND, f"no multicast group {gid}")
            del groups[gid]
            self._group_meta.pop(gid, None)
            self._group_port_bytes.discard(gid)
            return
        replicas: list[tuple[int, int]] = []
        as_bytes = False
        for r in m.replicas:
            if r.WhichOneof("port_kind") == "port":
                port = decode_uint(r.port, 32, f"group {gid} replica port")
                as_bytes = True
            else:
                port = r.egress_port
            if r.instance >> 16:  # v1model's egress_rid is bit<16>
                raise _fail(SC.INVALID_ARGUMENT, f"group {gid}: instance {r.instance} > 65535")
            if (port, r.instance) in replicas:
                raise _fail(
                    SC.INVALID_ARGUMENT,
                    f"group {gid}: replica (port {port}, instance {r.instance}) twice",
                )
            replicas.append((port, r.instance))
        if utype == _U.INSERT and gid in groups:
            raise _fail(SC.ALREADY_EXISTS, f"multicast group {gid} exists")
        if utype == _U.MODIFY and gid not in groups:
            raise _fail(SC.NOT_FOUND, f"no multicast group {gid}")
        groups[gid] = replicas
        self._group_meta[gid] = m.metadata
        if as_bytes:
            self._group_port_bytes.add(gid)
        else:
            self._group_port_bytes.discard(gid)
        self._sync_worker_ports()

    # -- counters and registers --------------------------------------------------------------

    def _counter_array(self, counter_id: int):
        c = self._schema.counters.get(counter_id)
        if c is None:
            raise _fail(SC.INVALID_ARGUMENT, f"unknown counter id {counter_id:#x}")
        arr = {
            "ina_stats": self.pipeline.counters.stats,
            "worker_contributions": self.pipeline.counters.workers,
        }[c.preamble.name]
        return c, arr, min(c.size, arr.shape[0])

    def _indices(self, what: str, entry, size: int, p4_size: int) -> range:
        if not entry.HasField("index"):
            return range(size)
        i = entry.index.index
        if i < 0:
            raise _fail(SC.INVALID_ARGUMENT, f"{what}: negative index {i}")
        if i >= size:
            extra = f" (the switch model has {size})" if size < p4_size else ""
            raise _fail(SC.OUT_OF_RANGE, f"{what}: index {i} >= size {p4_size}{extra}")
        return range(i, i + 1)

    def _write_counter(self, utype: int, ce: p4runtime_pb2.CounterEntry) -> None:
        c, arr, size = self._counter_array(ce.counter_id)
        if utype != _U.MODIFY:
            raise _fail(SC.INVALID_ARGUMENT, "counter entries can only be modified")
        idx = self._indices(c.preamble.name, ce, size, c.size)
        if not ce.HasField("data"):
            return  # spec: the value is not modified
        if ce.data.packet_count < 0 or ce.data.byte_count < 0:
            raise _fail(SC.INVALID_ARGUMENT, "counter values must be >= 0")
        arr[idx.start : idx.stop, 0] = ce.data.packet_count
        arr[idx.start : idx.stop, 1] = ce.data.byte_count

    def _register(self, register_id: int):
        r = self._schema.registers.get(register_id)
        if r is None or register_id not in self._lane_of:
            raise _fail(SC.INVALID_ARGUMENT, f"unknown register id {register_id:#x}")
        lane = self._lane_of[register_id]
        if lane is None:  # the model's pool may be smaller than the program's
            size = min(r.size, len(self.pipeline.register_cells(r.preamble.name)))
        else:
            size = min(r.size, 2 * self.pipeline.pool_total)
        return r, lane, size

    def _write_register(self, utype: int, re: p4runtime_pb2.RegisterEntry) -> None:
        r, lane, size = self._register(re.register_id)
        name, bits = r.preamble.name, r.type_spec.bitstring.bit.bitwidth
        if utype != _U.MODIFY:
            raise _fail(SC.INVALID_ARGUMENT, "register entries can only be modified")
        idx = self._indices(name, re, size, r.size)
        if re.data.WhichOneof("data") != "bitstring":
            raise _fail(SC.INVALID_ARGUMENT, f"{name} holds bit<{bits}>: give a bitstring")
        value = decode_uint(re.data.bitstring, bits, name)
        regs = self.pipeline.registers
        if lane is None:
            cells = self.pipeline.register_cells(name)
            for i in idx:
                cells[i] = value
        elif lane >= regs.lanes:
            if value:
                raise _fail(
                    SC.FAILED_PRECONDITION, f"{name}: the switch model runs {regs.lanes} lanes"
                )
        else:
            # Lanes hold int32 two's complement in a bit<32> register.
            signed = value - (1 << 32) if value >> 31 else value
            regs.values[idx.start : idx.stop, lane] = signed

    # -- Read ------------------------------------------------------------------------------
    #
    # Under the pipeline lock a read only copies what it answers with (a "part" of the reply,
    # `ina.switch_model.p4rt_wire`); the reply is encoded after the lock is released.

    def _read_entity(self, entity: p4runtime_pb2.Entity) -> list:
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            return [self._read_tables(entity.table_entry)]
        if kind == "counter_entry":
            return self._read_counters(entity.counter_entry)
        if kind == "register_entry":
            return self._read_registers(entity.register_entry)
        if kind == "packet_replication_engine_entry":
            return [self._read_pre(entity.packet_replication_engine_entry)]
        if kind is None:
            raise _fail(SC.INVALID_ARGUMENT, "entity is not set")
        # Entity kinds the program has none of: a wildcard finds nothing, an ID is unknown.
        msg = getattr(entity, kind)
        id_field = {
            "extern_entry": "extern_type_id",
            "action_profile_member": "action_profile_id",
            "action_profile_group": "action_profile_id",
            "meter_entry": "meter_id",
            "value_set_entry": "value_set_id",
            "digest_entry": "digest_id",
        }.get(kind)
        if id_field is None:  # direct_meter_entry / direct_counter_entry: by table
            msg_id = msg.table_entry.table_id
        else:
            msg_id = getattr(msg, id_field)
        if msg_id:
            raise _fail(
                SC.INVALID_ARGUMENT,
                f"the INA program has no {kind.replace('_', ' ')} with id {msg_id:#x}",
            )
        return []

    def _read_tables(self, q: p4runtime_pb2.TableEntry) -> p4rt_wire.Entities:
        if q.table_id == 0:
            tables = list(self._schema.tables.values())
        else:
            tables = [self._schema.table(q.table_id)]
        out = []
        for t in tables:
            if q.is_default_action:
                out.append(functools.partial(_default_entry, t))
                continue
            if q.priority:
                continue  # every entry has priority 0
            _, _, entries_of = self._tables[t.name]
            entries = entries_of()
            keys = sorted(entries)
            if q.match:
                key = self._parse_key(t, q.match)
                keys = [key] if key in entries else []
            for key in keys:
                action_name, values = entries[key]
                action = self._schema.actions[self._schema.action_id[action_name]]
                if q.HasField("action") and q.action.action.action_id not in (0, action.id):
                    continue
                ctrl_meta, meta = self._entry_meta.get((t.id, key), (0, b""))
                if q.controller_metadata and q.controller_metadata != ctrl_meta:
                    continue
                if q.metadata and q.metadata != meta:
                    continue
                # keys, values and metadata are immutable: the builder owns its copy
                out.append(functools.partial(_table_entry, t, key, action, values, ctrl_meta, meta))
        return p4rt_wire.Entities(tuple(out))

    def _read_counters(self, q: p4runtime_pb2.CounterEntry) -> list[p4rt_wire.CounterCells]:
        ids = [q.counter_id] if q.counter_id else list(self._schema.counters)
        out = []
        for cid in ids:
            c, arr, size = self._counter_array(cid)
            idx = self._indices(c.preamble.name, q, size, c.size)
            out.append(p4rt_wire.CounterCells(cid, idx.start, arr[idx.start : idx.stop].copy()))
        return out

    def _read_registers(self, q: p4runtime_pb2.RegisterEntry) -> list[p4rt_wire.RegisterCells]:
        ids = [q.register_id] if q.register_id else list(self._schema.registers)
        regs = self.pipeline.registers
        out = []
        for rid in ids:
            r, lane, size = self._register(rid)
            name, bits = r.preamble.name, r.type_spec.bitstring.bit.bitwidth
            idx = self._indices(name, q, size, r.size)
            if lane is None:
                cells = self.pipeline.register_cells(name)[idx.start : idx.stop]
                if isinstance(cells, np.ndarray):
                    cells = cells.copy()  # a slice of a list is a copy already
            elif lane >= regs.lanes:
                cells = np.zeros(len(idx), np.int64)  # lanes the model does not run
            else:
                cells = regs.values[idx.start : idx.stop, lane].copy()
            out.append(p4rt_wire.RegisterCells(rid, idx.start, cells, bits))
        return out

    def _read_pre(self, q: p4runtime_pb2.PacketReplicationEngineEntry) -> p4rt_wire.Entities:
        kind = q.WhichOneof("type")
        if kind == "clone_session_entry":
            if q.clone_session_entry.session_id:
                raise _fail(SC.NOT_FOUND, "the INA program uses no clone sessions")
            return p4rt_wire.Entities(())
        if kind is None:
            raise _fail(SC.INVALID_ARGUMENT, "packet replication engine entry is not set")
        groups = self.pipeline.tables.mcast_groups
        gid = q.multicast_group_entry.multicast_group_id
        if gid and gid not in groups:
            raise _fail(SC.NOT_FOUND, f"no multicast group {gid}")
        return p4rt_wire.Entities(
            tuple(
                functools.partial(
                    _group_entry,
                    g,
                    tuple(groups[g]),
                    g in self._group_port_bytes,
                    self._group_meta.get(g, b""),
                )
                for g in ([gid] if gid else sorted(groups))
            )
        )


def _default_entry(t: _TableInfo) -> p4runtime_pb2.Entity:
    e = p4runtime_pb2.Entity()
    e.table_entry.table_id = t.id
    e.table_entry.is_default_action = True
    e.table_entry.action.action.action_id = t.default_action
    return e


def _table_entry(t: _TableInfo, key, action: _ActionInfo, values, ctrl_meta, meta):
    e = p4runtime_pb2.Entity()
    te = e.table_entry
    te.table_id = t.id
    for (fid, _, _, _), v in zip(t.fields, key, strict=True):
        fm = te.match.add()
        fm.field_id = fid
        fm.exact.value = encode_uint(v)
    a = te.action.action
    a.action_id = action.id
    for (pid, _, _), v in zip(action.params, values, strict=True):
        a.params.add(param_id=pid, value=encode_uint(v))
    te.controller_metadata = ctrl_meta
    te.metadata = meta
    return e


def _group_entry(gid: int, replicas, port_bytes: bool, metadata: bytes) -> p4runtime_pb2.Entity:
    e = p4runtime_pb2.Entity()
    m = e.packet_replication_engine_entry.multicast_group_entry
    m.multicast_group_id = gid
    for port, rid in replicas:
        r = m.replicas.add(instance=rid)
        if port_bytes:
            r.port = encode_uint(port)
        else:
            r.egress_port = port
    m.metadata = metadata
    return e


# -- server --------------------------------------------------------------------------------


class ModelServer:
    """A running gRPC server with the model's P4Runtime service (see `start_server`)."""

    def __init__(
        self, server: grpc.Server, service: P4RuntimeService, port: int, host: str
    ) -> None:
        self.server = server
        self.service = service
        self.port = port
        self.address = f"{host}:{port}"

    @property
    def lock(self):
        """The pipeline lock: hold it around ``Pipeline.process_batch``."""
        return self.service.pipeline_lock

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving; open streams are cancelled. Blocks until stopped."""
        self.server.stop(grace).wait()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _read_response_bytes(message: bytes | p4runtime_pb2.ReadResponse) -> bytes:
    """Read's response serializer: our Read yields ReadResponses serialized already."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _add_to_server(service: P4RuntimeService, server: grpc.Server) -> None:
    """Register ``service`` like ``add_P4RuntimeServicer_to_server``, except that Read's
    replies pass through as bytes (encoded by `p4rt_wire`, not built as protobuf objects)."""
    pb = p4runtime_pb2
    unary = grpc.unary_unary_rpc_method_handler
    handlers = {
        "Write": unary(
            service.Write, pb.WriteRequest.FromString, pb.WriteResponse.SerializeToString
        ),
        "Read": grpc.unary_stream_rpc_method_handler(
            service.Read, pb.ReadRequest.FromString, _read_response_bytes
        ),
        "SetForwardingPipelineConfig": unary(
            service.SetForwardingPipelineConfig,
            pb.SetForwardingPipelineConfigRequest.FromString,
            pb.SetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "GetForwardingPipelineConfig": unary(
            service.GetForwardingPipelineConfig,
            pb.GetForwardingPipelineConfigRequest.FromString,
            pb.GetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            service.StreamChannel,
            pb.StreamMessageRequest.FromString,
            pb.StreamMessageResponse.SerializeToString,
        ),
        "Capabilities": unary(
            service.Capabilities,
            pb.CapabilitiesRequest.FromString,
            pb.CapabilitiesResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers),)
    )


def _bind_problem(address: str) -> str | None:
    """Why a TCP listener cannot bind ``address`` (``host:port``) now, or None.

    gRPC would find out too, but it logs a multi-line C++ error on stderr first; this
    check lets `ina switch` say it in one line. (gRPC's own bind stays the real guard.)"""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or int(port) == 0:
        return None  # let gRPC judge the address; port 0 is always free
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"cannot resolve {host!r}: {e.strerror}"
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                s.bind(sockaddr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return "the port is in use (another switch?)"
                return e.strerror or str(e)
    return None


def start_server(
    pipeline: Pipeline,
    address: str = DEFAULT_ADDRESS,
    lock: threading.Lock | threading.RLock | None = None,
    device_id: int = DEFAULT_DEVICE_ID,
    preloaded: bool = True,
    max_streams: int = MAX_STREAMS,
) -> ModelServer:
    """Serve P4Runtime for ``pipeline`` on ``address`` (``host:0`` picks a free port).

    Returns at once; gRPC serves on its own threads. ``lock`` (created if None) guards the
    pipeline: the data path must hold the same lock around ``process_batch``. At most
    ``max_streams`` StreamChannels (controllers) are served at once; more are refused with
    RESOURCE_EXHAUSTED, and RPC_THREADS threads always remain for the other RPCs.
    Raises OSError (one line) if the address cannot be bound, e.g. its port is in use.
    """
    service = P4RuntimeService(
        pipeline, lock=lock, device_id=device_id, preloaded=preloaded, max_streams=max_streams
    )
    server = grpc.server(
        # Each open StreamChannel keeps one thread busy for its lifetime.
        futures.ThreadPoolExecutor(
            max_workers=max_streams + RPC_THREADS, thread_name_prefix="p4rt"
        ),
        # gRPC binds with SO_REUSEPORT by default: a second switch on the same port would
        # come up silently and the kernel would share connections between the two.
        options=[("grpc.so_reuseport", 0)],
    )
    _add_to_server(service, server)
    host, _, _ = address.rpartition(":")
    busy = _bind_problem(address)
    if busy is None:
        try:
            port = server.add_insecure_port(address)
        except RuntimeError:  # grpcio raises when it cannot bind (its message is a C++ dump)
            port = 0
        busy = "the port is in use (another switch?) or the address is not this host's"
    else:
        port = 0
    if port == 0:
        raise OSError(f"P4Runtime cannot listen on {address}: {busy}")
    server.start()
    return ModelServer(server, service, port, host or "127.0.0.1")


def serve(
    pipeline: Pipeline,
    address: str = DEFAULT_ADDRESS,
    lock: threading.Lock | threading.RLock | None = None,
    device_id: int = DEFAULT_DEVICE_ID,
) -> grpc.Server:
    """Start serving and return the bare `grpc.Server` (``start_server`` returns more)."""
    return start_server(pipeline, address, lock, device_id).server


__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_DEVICE_ID",
    "MAX_STREAMS",
    "ModelServer",
    "P4RuntimeFailure",
    "P4RuntimeService",
    "decode_uint",
    "encode_uint",
    "serve",
    "start_server",
]

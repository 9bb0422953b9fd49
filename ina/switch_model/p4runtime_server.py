"""The switch model's P4Runtime service: the same control API as BMv2's simple_switch_grpc.

One control plane (`ina.control.p4rt`) and one interactive ``p4runtime-shell`` session drive
either target, so the model serves P4Runtime (v1, API 1.4.1) for the entities of our P4
program (`ina.p4.entities`, P4Info from `ina.p4info.build_p4info`) and maps each onto the
`Pipeline` it wraps. This module holds the RPCs of `P4RuntimeService` and `start_server`;
the service is put together from one part per concern, each in its own module:

=====================================  ========================================================
module                                 what it holds
=====================================  ========================================================
`ina.switch_model.p4rt_values`         `P4RuntimeFailure`, bytestrings (`encode_uint`,
                                       `decode_uint`), MAC and IPv4 conversions
`ina.switch_model.p4rt_schema`         the P4Info by ID (tables, actions, counters, registers)
`ina.switch_model.p4rt_arbitration`    StreamChannel sessions, master arbitration, stream limit
`ina.switch_model.p4rt_pipeline_config`  Set/GetForwardingPipelineConfig, clearing the state
`ina.switch_model.p4rt_tables`         ``job_table``, ``worker_table``, ``forward_table``,
                                       ``parent_table`` entries onto ``Pipeline.tables``
`ina.switch_model.p4rt_pre`            multicast groups onto ``Tables.mcast_groups``
`ina.switch_model.p4rt_cells`          counters (``Pipeline.counters``) and registers
                                       (``Pipeline.registers``, ``Pipeline.runs``)
`ina.switch_model.p4rt_wire`           Read replies for counter and register cells (numpy)
`ina.switch_model.p4rt_grpc`           gRPC handlers, the bind check, `ModelServer`
=====================================  ========================================================

Behaviour follows the P4Runtime specification; where the specification leaves a choice, the
model does what BMv2's P4Runtime server (p4lang/PI) does, so that a controller sees the same
answers from both targets (each part's docstring says what it does):

- ``Write`` and ``SetForwardingPipelineConfig`` need the primary's election ID (else
  PERMISSION_DENIED); ``Read`` needs no session. Roles other than the default are refused.
- ``Write`` reports per-update errors the standard way (status UNKNOWN with one ``p4.v1.Error``
  per update in the binary details, which p4runtime-shell unpacks); only CONTINUE_ON_ERROR
  atomicity is implemented (the others are optional: UNIMPLEMENTED). A ``Read`` stops at the
  first bad request and returns its code directly (like PI). Unknown P4 IDs are
  INVALID_ARGUMENT (like PI); bytestrings that do not fit their width, or are empty, are
  OUT_OF_RANGE; padded bytestrings are accepted and replies use the canonical (shortest)
  form. Entity kinds the program has none of (meters, action profiles, digests, ...) are
  INVALID_ARGUMENT in a write; a wildcard read of them finds nothing.

Threading: gRPC serves requests on a thread pool while the model's data path runs in another
thread of the same process. Every access to the pipeline holds one lock, ``pipeline_lock``,
which the I/O loop must also hold around ``Pipeline.process_batch`` (one acquisition per
batch, so control writes are atomic with respect to packets; a ``Write`` batch is applied
under one acquisition). A ``Read`` only copies the state it answers with under the lock
(microseconds even for every register) and encodes the reply after releasing it
(`ina.switch_model.p4rt_wire`: numpy, not protobuf objects, for counter and register cells),
so a large read never holds up aggregation.

Streams: each open ``StreamChannel`` holds a gRPC thread. The service serves up to
``max_streams`` (`MAX_STREAMS`) at once and refuses more with RESOURCE_EXHAUSTED; the pool
keeps `RPC_THREADS` more threads, so ``Read``, ``Write`` and the refusals always get one.

Usage::

    lock = threading.Lock()
    server = start_server(pipeline, "0.0.0.0:9559", lock)   # returns at once
    ...  # I/O loop: with lock: pipeline.process_batch(...)
    server.stop()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from ina.p4info import build_p4info
from ina.switch_model import p4rt_wire
from ina.switch_model.p4rt_arbitration import Arbiter
from ina.switch_model.p4rt_cells import CounterRegisterCells
from ina.switch_model.p4rt_grpc import ModelServer, add_to_server, bind_problem
from ina.switch_model.p4rt_pipeline_config import PipelineConfig
from ina.switch_model.p4rt_pre import MulticastGroups
from ina.switch_model.p4rt_schema import Schema
from ina.switch_model.p4rt_tables import TableEntries
from ina.switch_model.p4rt_values import (
    SC,
    P4RuntimeFailure,
    decode_uint,
    encode_uint,
    fail,
    rpc_code,
)
from ina.switch_model.pipeline import Pipeline

log = logging.getLogger(__name__)

DEFAULT_DEVICE_ID = 1  # p4runtime-shell's default; start simple_switch_grpc with --device-id 1
DEFAULT_ADDRESS = "0.0.0.0:9559"  # simple_switch_grpc's default --grpc-server-addr
P4RUNTIME_API_VERSION = "1.4.1"  # the p4runtime protos this service is built on
_READ_BYTES = 256 * 1024  # bytes per ReadResponse: far below gRPC's 4 MB default limit
MAX_STREAMS = 32  # StreamChannels served at once; more are refused (RESOURCE_EXHAUSTED)
RPC_THREADS = 8  # gRPC threads left for unary RPCs and Reads when every stream is open

_U = p4runtime_pb2.Update

# Entity kinds the program has none of, and the field of each that names one by ID.
_ABSENT_ID_FIELD = {
    "extern_entry": "extern_type_id",
    "action_profile_member": "action_profile_id",
    "action_profile_group": "action_profile_id",
    "meter_entry": "meter_id",
    "value_set_entry": "value_set_id",
    "digest_entry": "digest_id",
}


class P4RuntimeService(
    PipelineConfig,
    TableEntries,
    MulticastGroups,
    CounterRegisterCells,
    p4runtime_pb2_grpc.P4RuntimeServicer,
):
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
        self._schema = Schema(self._p4info)
        self._arbiter = Arbiter(device_id, max_streams)  # default role only
        self._init_config(preloaded)
        self._init_tables()
        self._init_groups()
        self._init_cells()

    @property
    def max_streams(self) -> int:
        """StreamChannels served at once; more are refused."""
        return self._arbiter.max_streams

    @property
    def open_streams(self) -> int:
        """StreamChannels being served now."""
        return self._arbiter.open_streams

    # -- RPCs ------------------------------------------------------------------------------

    def Capabilities(self, request, context):  # noqa: N802 (gRPC method names)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=P4RUNTIME_API_VERSION)

    def SetForwardingPipelineConfig(self, request, context):  # noqa: N802
        try:
            self._check_device(request.device_id)
            self._arbiter.check_primary(request)
            self._set_pipeline(request)
        except P4RuntimeFailure as f:
            context.abort(f.code, f.message)
        except Exception:  # never let a bug take the switch down: report it
            log.exception("SetForwardingPipelineConfig failed")
            context.abort(SC.INTERNAL, "internal error in the switch model (see its log)")
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):  # noqa: N802
        try:
            self._check_device(request.device_id)
        except P4RuntimeFailure as f:
            context.abort(f.code, f.message)
        return self._get_pipeline(request)

    def Write(self, request, context):  # noqa: N802
        try:
            self._check_device(request.device_id)
            self._arbiter.check_primary(request)
            if self._config is None:
                raise fail(SC.FAILED_PRECONDITION, "no forwarding pipeline config set")
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise fail(SC.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
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
                    errors.append(fail(SC.INTERNAL, f"internal error: {e!r}"))
        if any(errors):
            self._abort_batch(context, errors, "Write failure.")
        return p4runtime_pb2.WriteResponse()

    def Read(self, request, context) -> Iterator[bytes]:  # noqa: N802
        """Serialized ReadResponses (see `p4rt_grpc.add_to_server`): the state is copied under
        the pipeline lock, and encoded and sent after it, in messages of at most _READ_BYTES,
        so a read of every register (about 80,000 cells) holds up the data path for a copy
        only."""
        try:
            self._check_device(request.device_id)
            if request.role:
                raise fail(SC.NOT_FOUND, f"unknown role {request.role!r}")
            if self._config is None:
                raise fail(SC.FAILED_PRECONDITION, "no forwarding pipeline config set")
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

    def StreamChannel(self, request_iterator, context):  # noqa: N802
        return self._arbiter.stream(request_iterator, context)

    # -- request checks --------------------------------------------------------------------

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise fail(
                SC.NOT_FOUND,
                f"unknown device id {device_id} (this switch model is device {self.device_id})",
            )

    # -- Write: each update to the part that owns its entity ----------------------------------

    def _abort_batch(self, context, errors: list[P4RuntimeFailure | None], msg: str) -> None:
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message=msg)
        for e in errors:
            err = p4runtime_pb2.Error()
            if e is None:
                err.canonical_code = code_pb2.OK
            else:
                err.canonical_code = rpc_code(e.code)
                err.message = e.message
            detail = any_pb2.Any()
            detail.Pack(err)
            status.details.append(detail)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(SC.UNKNOWN, msg)

    def _write_update(self, update: p4runtime_pb2.Update) -> None:
        kind = update.entity.WhichOneof("entity")
        if update.type not in (_U.INSERT, _U.MODIFY, _U.DELETE):
            raise fail(SC.INVALID_ARGUMENT, "update type is not set")
        if kind == "table_entry":
            self._write_table(update.type, update.entity.table_entry)
        elif kind == "packet_replication_engine_entry":
            self._write_pre(update.type, update.entity.packet_replication_engine_entry)
        elif kind == "counter_entry":
            self._write_counter(update.type, update.entity.counter_entry)
        elif kind == "register_entry":
            self._write_register(update.type, update.entity.register_entry)
        elif kind is None:
            raise fail(SC.INVALID_ARGUMENT, "entity is not set")
        else:
            raise fail(
                SC.INVALID_ARGUMENT, f"the INA program has no {kind.replace('_', ' ')} entities"
            )

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
            raise fail(SC.INVALID_ARGUMENT, "entity is not set")
        # Entity kinds the program has none of: a wildcard finds nothing, an ID is unknown.
        msg = getattr(entity, kind)
        id_field = _ABSENT_ID_FIELD.get(kind)
        if id_field is None:  # direct_meter_entry / direct_counter_entry: by table
            msg_id = msg.table_entry.table_id
        else:
            msg_id = getattr(msg, id_field)
        if msg_id:
            raise fail(
                SC.INVALID_ARGUMENT,
                f"the INA program has no {kind.replace('_', ' ')} with id {msg_id:#x}",
            )
        return []


# -- server --------------------------------------------------------------------------------


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
    add_to_server(service, server)
    host, _, _ = address.rpartition(":")
    busy = bind_problem(address)
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

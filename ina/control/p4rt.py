"""P4Runtime sessions with an INA switch: BMv2 ``simple_switch_grpc`` or the switch model.

Both targets serve standard P4Runtime for the same P4Info (`ina.p4info`), so the control
plane is one small client that speaks only the protocol: `SwitchConnection` opens a gRPC
channel, wins master arbitration on a ``StreamChannel`` (when it is to write), pushes the
pipeline, and turns names into IDs with the P4Info it reads *from the device*, so it works
whatever IDs the device's P4Info carries. Entity builders take plain Python values (ints,
``"aa:bb:cc:dd:ee:ff"`` MACs, ``"10.0.0.1"`` addresses) and send canonical bytestrings.

Why not p4runtime-shell's API here: its ``shell`` module keeps one global session per
process and exits the process on errors, and its ``P4RuntimeClient`` exits on a failed
handshake and runs a non-daemon receive thread that keeps a process alive if a caller forgets
to tear it down. Library code needs exceptions and many sessions. p4runtime-shell remains the
interactive tool for both targets (see docs/control-plane.md); its session and this one see
the same entities because they read the same P4Info from the device.

Errors raise `P4RuntimeError` with the gRPC status code and, for ``Write`` batches, the
canonical code of every failed update (the P4Runtime "batch" error details).

Jobs, counters and registers live in `ina.control.jobs` and `ina.control.counters`.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import text_format
from google.rpc import status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:9559"  # simple_switch_grpc's and the model's default port
DEFAULT_DEVICE_ID = 1  # p4runtime-shell's and `ina switch`'s default (simple_switch_grpc: 0)
DEFAULT_ELECTION_ID = (1, 0)  # p4runtime-shell's default, as (high, low)
RPC_TIMEOUT = 30.0  # seconds for one unary RPC
# A Read's deadline covers decoding the reply too: protobuf 3.20 (p4runtime-shell's pin)
# decodes in pure Python, about 200 us per entity, so every register (about 80,000 cells) takes
# 10-20 s on a busy 2-core machine.
READ_TIMEOUT = 120.0

INSERT = p4runtime_pb2.Update.INSERT
MODIFY = p4runtime_pb2.Update.MODIFY
DELETE = p4runtime_pb2.Update.DELETE
_PIPE = p4runtime_pb2.SetForwardingPipelineConfigRequest


# -- errors --------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdateError:
    """One failed update of a ``Write`` batch."""

    index: int
    code: grpc.StatusCode
    message: str


_CODE_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


class P4RuntimeError(Exception):
    """A P4Runtime RPC failed. ``code`` is the RPC's status; for a ``Write`` batch it is
    UNKNOWN and ``errors`` lists the updates that failed with their own codes."""

    def __init__(
        self, code: grpc.StatusCode, message: str, errors: tuple[UpdateError, ...] = ()
    ) -> None:
        self.code = code
        self.message = message
        self.errors = errors
        detail = "".join(f"\n  update {e.index}: {e.code.name} {e.message}" for e in errors)
        super().__init__(f"{code.name}: {message}{detail}")

    @property
    def codes(self) -> set[grpc.StatusCode]:
        """The most specific codes: those of the failed updates, else the RPC's."""
        return {e.code for e in self.errors} or {self.code}

    @classmethod
    def from_rpc_error(cls, e: grpc.RpcError) -> P4RuntimeError:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        message = (e.details() if hasattr(e, "details") else str(e)) or ""
        errors: list[UpdateError] = []
        for key, value in (e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else ():
            if key != "grpc-status-details-bin":
                continue
            status = status_pb2.Status()
            status.ParseFromString(value)
            for i, detail in enumerate(status.details):
                err = p4runtime_pb2.Error()
                if detail.Unpack(err) and err.canonical_code != 0:
                    errors.append(
                        UpdateError(
                            i,
                            _CODE_BY_NUMBER.get(err.canonical_code, grpc.StatusCode.UNKNOWN),
                            err.message,
                        )
                    )
        return cls(code, message, tuple(errors))


# -- values --------------------------------------------------------------------------------


def encode_value(value: int | str | bytes, bits: int) -> bytes:
    """A P4Runtime bytestring (canonical: shortest, >= 1 byte) for a ``bit<bits>`` value.

    ``value`` may be an int, a MAC (``"aa:bb:.."``, 48 bits), a dotted IPv4 address (32 bits),
    a numeric string (``"0x10"``) or bytes (taken as big-endian).
    """
    if isinstance(value, bytes):
        n = int.from_bytes(value, "big")
    elif isinstance(value, str):
        v = value.strip()
        if bits == 48 and ":" in v:
            n = int(v.replace(":", ""), 16)
        elif bits == 32 and "." in v:
            n = int(ipaddress.IPv4Address(v))
        else:
            n = int(v, 0)
    else:
        n = int(value)
    if n < 0 or n >> bits:
        raise ValueError(f"{value!r} does not fit bit<{bits}>")
    return n.to_bytes(max(1, (n.bit_length() + 7) // 8), "big")


def decode_value(data: bytes) -> int:
    """Integer value of a bytestring (canonical or padded)."""
    return int.from_bytes(data, "big")


def check_address(address: str) -> str:
    """``address`` if it names a P4Runtime server as ``HOST:PORT`` (or a gRPC ``unix:`` /
    ``scheme://`` target); ValueError saying what is missing otherwise. Without the check a
    bare host name makes gRPC try port 443 and time out."""
    if address.startswith("unix:") or "://" in address:
        return address
    host, sep, port = address.rpartition(":")
    if ":" in host and not host.startswith("["):  # a bare IPv6 address: no port given
        raise ValueError(f"{address!r}: give an IPv6 address with its port as [ADDR]:PORT")
    if not sep or not host or address.endswith("]"):
        raise ValueError(
            f"{address!r}: the port is missing; give HOST:PORT (e.g. {address or 'localhost'}:9559)"
        )
    if not port.isdigit() or not 0 < int(port) < 1 << 16:
        raise ValueError(f"{address!r}: {port!r} is not a TCP port; give HOST:PORT")
    return address


# -- names ---------------------------------------------------------------------------------


class _Names:
    """Name -> P4Info object for one entity kind; any unique dotted suffix works too
    (p4c names a non-global table ``MyIngress.t``; ``t`` finds it), as in p4runtime-shell."""

    def __init__(self, kind: str, objects: Iterable) -> None:
        self.kind = kind
        self.by_name: dict[str, object] = {}
        self.by_id: dict[int, object] = {}
        count: dict[str, int] = {}
        for obj in objects:
            pre = obj.preamble
            self.by_id[pre.id] = obj
            parts = pre.name.split(".")
            for i in range(len(parts)):
                suffix = ".".join(parts[i:])
                count[suffix] = count.get(suffix, 0) + 1
                self.by_name[suffix] = obj
        for suffix, n in count.items():
            if n > 1:
                del self.by_name[suffix]

    def __getitem__(self, name: str):
        obj = self.by_name.get(name)
        if obj is None:
            raise KeyError(f"the device's P4Info has no {self.kind} {name!r}")
        return obj


class P4InfoIndex:
    """Lookups into one P4Info: tables, actions, counters, registers by name or ID."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        self.info = info
        self.tables = _Names("table", info.tables)
        self.actions = _Names("action", info.actions)
        self.counters = _Names("counter", info.counters)
        self.registers = _Names("register", info.registers)

    def match_field(self, table, name: str):
        for m in table.match_fields:
            if m.name == name or m.name.endswith("." + name):
                return m
        raise KeyError(f"table {table.preamble.name} has no match field {name!r}")

    def param(self, action, name: str):
        for p in action.params:
            if p.name == name:
                return p
        raise KeyError(f"action {action.preamble.name} has no parameter {name!r}")


# -- the session ---------------------------------------------------------------------------


class SwitchConnection:
    """A P4Runtime session with one device.

    ``arbitrate=True`` opens a StreamChannel and asks to be primary with ``election_id``
    (needed for writes and pipeline pushes); ``require_primary`` raises if another
    controller holds a higher election ID. Reads need no arbitration: tools that only
    watch (``ina counters``) pass ``arbitrate=False`` and never disturb the controller.

    Example::

        with SwitchConnection("127.0.0.1:9559") as sw:
            sw.push_pipeline()                       # the model: our P4Info, no device config
            sw.write([sw.update(INSERT, sw.table_entry("forward_table",
                      {"dst_mac": "00:00:00:00:00:01"}, "forward", {"port": 1}))])
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        device_id: int = DEFAULT_DEVICE_ID,
        election_id: tuple[int, int] = DEFAULT_ELECTION_ID,
        arbitrate: bool = True,
        require_primary: bool = True,
        timeout: float = 10.0,
    ) -> None:
        self.address = check_address(address)
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self.is_primary = False
        self._index: P4InfoIndex | None = None
        self._stream_out: queue.Queue | None = None
        self._channel = grpc.insecure_channel(address)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        # Probe with a cheap RPC that waits for the connection (a switch still starting up
        # gets `timeout` seconds). Not grpc.channel_ready_future: its connectivity poller
        # makes every later channel.close() wait up to 0.2 s.
        try:
            self.api_version = self.stub.Capabilities(
                p4runtime_pb2.CapabilitiesRequest(), timeout=timeout, wait_for_ready=True
            ).p4runtime_api_version
        except grpc.RpcError as e:
            self._channel.close()
            if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                raise ConnectionError(
                    f"no P4Runtime server answers at {address} (waited {timeout:g} s)"
                ) from None
            raise P4RuntimeError.from_rpc_error(e) from None
        if arbitrate:
            try:
                self._arbitrate(require_primary)
            except BaseException:
                self.close()
                raise

    # -- session -----------------------------------------------------------------------

    def _arbitrate(self, require_primary: bool) -> None:
        out: queue.Queue = queue.Queue()
        replies: queue.Queue = queue.Queue()
        first = p4runtime_pb2.StreamMessageRequest()
        first.arbitration.device_id = self.device_id
        first.arbitration.election_id.high = self.election_id[0]
        first.arbitration.election_id.low = self.election_id[1]
        out.put(first)

        def requests():
            while True:
                msg = out.get()
                if msg is None:
                    return
                yield msg

        stream = self.stub.StreamChannel(requests())

        def receive() -> None:
            try:
                for msg in stream:
                    if msg.HasField("arbitration"):
                        # Mastership can move later (a controller with a higher election id).
                        self.is_primary = msg.arbitration.status.code == 0
                        replies.put(msg)
                    elif msg.HasField("error"):
                        log.warning(
                            "P4Runtime stream error from %s: %s", self.address, msg.error.message
                        )
            except grpc.RpcError as e:
                replies.put(e)
            except Exception as e:  # never let the receive thread die silently
                replies.put(e)
            finally:
                self.is_primary = False

        # A daemon thread: a session that is never closed must not keep the process alive.
        self._receiver = threading.Thread(target=receive, name="p4rt-stream", daemon=True)
        self._receiver.start()
        self._stream_out, self._stream = out, stream
        try:
            reply = replies.get(timeout=self.timeout)
        except queue.Empty:
            raise ConnectionError(f"no arbitration reply from {self.address}") from None
        if isinstance(reply, grpc.RpcError):
            raise P4RuntimeError.from_rpc_error(reply)
        if isinstance(reply, Exception):
            raise reply
        if require_primary and not self.is_primary:
            a = reply.arbitration
            raise P4RuntimeError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"not primary on {self.address}: election id {self.election_id} is below "
                f"the primary's ({a.election_id.high}, {a.election_id.low}); pass a higher "
                "one (which takes over) or wait for that controller to disconnect",
            )

    def close(self) -> None:
        """End the session (the switch drops this controller's mastership)."""
        if self._stream_out is not None:
            self._stream_out.put(None)  # ends our request generator
            self._stream_out = None
            # Cancel rather than wait for a half-close to travel (gRPC Python polls for it,
            # ~0.2 s); the switch sees the session end at once either way.
            self._stream.cancel()
            self._receiver.join(timeout=1.0)
        self._channel.close()

    def __enter__(self) -> SwitchConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, rpc, request):
        try:
            return rpc(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc_error(e) from None

    def _set_election_id(self, request) -> None:
        request.device_id = self.device_id
        request.election_id.high = self.election_id[0]
        request.election_id.low = self.election_id[1]

    # -- pipeline ----------------------------------------------------------------------

    def capabilities(self) -> str:
        """The device's P4Runtime API version."""
        req = p4runtime_pb2.CapabilitiesRequest()
        return self._call(self.stub.Capabilities, req).p4runtime_api_version

    def push_pipeline(
        self,
        p4info: p4info_pb2.P4Info | str | Path | None = None,
        device_config: bytes | str | Path | None = None,
        action: int = _PIPE.VERIFY_AND_COMMIT,
    ) -> None:
        """Install a pipeline: P4Info (message or text file; default: ours from
        `ina.p4info`) and the target's config (BMv2: the JSON from p4c-bm2-ss; the switch
        model ignores it, default empty). VERIFY_AND_COMMIT clears the device's tables,
        groups, counters and registers; RECONCILE_AND_COMMIT keeps them."""
        if p4info is None:
            from ina.p4info import build_p4info  # local: keeps this module protocol-only

            p4info = build_p4info()
        elif not isinstance(p4info, p4info_pb2.P4Info):
            msg = p4info_pb2.P4Info()
            text_format.Merge(Path(p4info).read_text(), msg, allow_unknown_field=True)
            p4info = msg
        if device_config is None:
            device_config = b""
        elif not isinstance(device_config, bytes):
            device_config = Path(device_config).read_bytes()
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(action=action)
        self._set_election_id(req)
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        self._call(self.stub.SetForwardingPipelineConfig, req)
        self._index = None  # re-read: the device's P4Info is the reference

    def get_p4info(self) -> p4info_pb2.P4Info | None:
        """The device's P4Info, or None if it has no pipeline yet."""
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
        )
        try:
            rep = self._call(self.stub.GetForwardingPipelineConfig, req)
        except P4RuntimeError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:  # BMv2 before a push
                return None
            raise
        if not rep.HasField("config") or not rep.config.HasField("p4info"):
            return None
        return rep.config.p4info

    @property
    def p4(self) -> P4InfoIndex:
        """Lookups into the device's P4Info (read once per pipeline)."""
        if self._index is None:
            info = self.get_p4info()
            if info is None:
                raise P4RuntimeError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"device at {self.address} has no pipeline: push one",
                )
            self._index = P4InfoIndex(info)
        return self._index

    # -- write and read --------------------------------------------------------------------

    @staticmethod
    def update(kind: int, entity: p4runtime_pb2.Entity) -> p4runtime_pb2.Update:
        """An INSERT / MODIFY / DELETE of one entity."""
        return p4runtime_pb2.Update(type=kind, entity=entity)

    def write(self, updates: Iterable[p4runtime_pb2.Update]) -> None:
        """One Write batch (CONTINUE_ON_ERROR). Raises P4RuntimeError listing failed updates."""
        req = p4runtime_pb2.WriteRequest()
        self._set_election_id(req)
        req.updates.extend(updates)
        if req.updates:
            self._call(self.stub.Write, req)

    def read(self, entities: Iterable[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]:
        """One Read batch; each entity is a query (unset fields are wildcards)."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        out: list[p4runtime_pb2.Entity] = []
        try:
            for rep in self.stub.Read(req, timeout=READ_TIMEOUT):
                out.extend(rep.entities)
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc_error(e) from None
        return out

    # -- entity builders ---------------------------------------------------------------

    def table_entry(
        self,
        table: str,
        match: dict[str, int | str | bytes] | None = None,
        action: str | None = None,
        params: dict[str, int | str | bytes] | None = None,
    ) -> p4runtime_pb2.Entity:
        """A table entry (exact matches). Leave ``match`` None for a wildcard read query."""
        t = self.p4.tables[table]
        e = p4runtime_pb2.Entity()
        te = e.table_entry
        te.table_id = t.preamble.id
        for name, value in (match or {}).items():
            mf = self.p4.match_field(t, name)
            if mf.match_type != p4info_pb2.MatchField.EXACT:
                raise ValueError(f"{table}.{name}: only exact matches are supported here")
            fm = te.match.add(field_id=mf.id)
            fm.exact.value = encode_value(value, mf.bitwidth)
        if action is not None:
            a = self.p4.actions[action]
            te.action.action.action_id = a.preamble.id
            given = dict(params or {})
            for p in a.params:
                if p.name not in given:
                    raise ValueError(f"action {action} needs parameter {p.name!r}")
                te.action.action.params.add(
                    param_id=p.id, value=encode_value(given.pop(p.name), p.bitwidth)
                )
            if given:
                raise ValueError(f"action {action} has no parameters {sorted(given)}")
        return e

    def decode_table_entry(self, e: p4runtime_pb2.Entity) -> tuple[str, dict, str, dict]:
        """(table, {match field: int}, action, {param: int}) of a table entry read back."""
        te = e.table_entry
        t = self.p4.tables.by_id[te.table_id]
        fields = {m.id: m.name for m in t.match_fields}
        match = {fields[m.field_id]: decode_value(m.exact.value) for m in te.match}
        a = self.p4.actions.by_id.get(te.action.action.action_id)
        names = {p.id: p.name for p in a.params} if a is not None else {}
        params = {
            names.get(p.param_id, str(p.param_id)): decode_value(p.value)
            for p in te.action.action.params
        }
        return t.preamble.name, match, (a.preamble.name if a else ""), params

    @staticmethod
    def multicast_group(
        group_id: int, replicas: Iterable[tuple[int, int]] = ()
    ) -> p4runtime_pb2.Entity:
        """A multicast group: replicas as (egress port, instance); instance = worker id."""
        e = p4runtime_pb2.Entity()
        m = e.packet_replication_engine_entry.multicast_group_entry
        m.multicast_group_id = group_id
        for port, instance in replicas:
            # `egress_port` (not the newer bytes `port`): what BMv2's PI server understands.
            m.replicas.add(egress_port=port, instance=instance)
        return e

    def counter_entry(
        self,
        counter: str,
        index: int | None = None,
        packets: int | None = None,
        bytes_: int | None = None,
    ) -> p4runtime_pb2.Entity:
        """A counter cell (``index`` None: every cell). Set data for a MODIFY."""
        e = p4runtime_pb2.Entity()
        ce = e.counter_entry
        ce.counter_id = self.p4.counters[counter].preamble.id
        if index is not None:
            ce.index.index = index
        if packets is not None or bytes_ is not None:
            ce.data.packet_count = packets or 0
            ce.data.byte_count = bytes_ or 0
        return e

    def register_entry(
        self, register: str, index: int | None = None, value: int | None = None
    ) -> p4runtime_pb2.Entity:
        """A register cell (``index`` None: every cell). Set ``value`` for a MODIFY."""
        r = self.p4.registers[register]
        e = p4runtime_pb2.Entity()
        re = e.register_entry
        re.register_id = r.preamble.id
        if index is not None:
            re.index.index = index
        if value is not None:
            re.data.bitstring = encode_value(value, r.type_spec.bitstring.bit.bitwidth)
        return e

    # -- registers ---------------------------------------------------------------------

    def read_register(self, name: str, index: int | None = None) -> int | list[int]:
        """Value of one register cell, or of every cell (``index`` None), unsigned.

        The switch model serves registers over P4Runtime; BMv2's P4Runtime server does not
        (UNIMPLEMENTED): read them there with ``simple_switch_CLI``'s ``register_read``.
        """
        got = self.read([self.register_entry(name, index)])
        values = {
            e.register_entry.index.index: decode_value(e.register_entry.data.bitstring) for e in got
        }
        if index is not None:
            return values[index]
        return [values[i] for i in sorted(values)]

    def write_register(self, name: str, value: int, index: int | None = None) -> None:
        """Set one register cell, or every cell (``index`` None)."""
        self.write([self.update(MODIFY, self.register_entry(name, index, value))])


def connect(
    address: str = DEFAULT_ADDRESS,
    device_id: int = DEFAULT_DEVICE_ID,
    election_id: tuple[int, int] = DEFAULT_ELECTION_ID,
    push: bool = False,
) -> SwitchConnection:
    """A primary session; with ``push``, our pipeline is installed first (switch model)."""
    conn = SwitchConnection(address, device_id, election_id)
    if push:
        try:
            conn.push_pipeline()
        except BaseException:
            conn.close()
            raise
    return conn


__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_DEVICE_ID",
    "DEFAULT_ELECTION_ID",
    "DELETE",
    "INSERT",
    "MODIFY",
    "P4InfoIndex",
    "P4RuntimeError",
    "SwitchConnection",
    "UpdateError",
    "connect",
    "decode_value",
    "encode_value",
]

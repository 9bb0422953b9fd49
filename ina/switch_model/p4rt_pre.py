"""Multicast groups of the switch model's P4Runtime service (the packet replication engine).

`MulticastGroups` is a part of `P4RuntimeService` (`ina.switch_model.p4runtime_server`): it
writes ``MulticastGroupEntry`` updates into ``Tables.mcast_groups`` (group -> replicas,
(egress port, instance)) through ``Tables.write_group``, which keeps the order in which BMv2
sends the copies (`ina.switch_model.replica_order`: it depends on the group's INSERT and
MODIFY history), and reads them back as last written (the spec allows any order). The instance of a replica is the worker id
(v1model's ``egress_rid``, bit<16>), so writing a group also gives each worker_table entry
its switch port (``_sync_worker_ports``, from `TableEntries`). Group ids are 1..
`ina.p4.entities.MAX_MCAST_GROUP`, as BMv2 accepts (OUT_OF_RANGE above, issue 11); the
program uses no clone sessions (UNIMPLEMENTED). A replica's port may be given as
``egress_port`` or as the ``port`` bytestring; reads answer in the form it was written in.

The service provides ``pipeline``; `MulticastGroups._init_groups` sets up the metadata kept
beside the pipeline's groups.
"""

from __future__ import annotations

import functools

from p4.v1 import p4runtime_pb2

from ina.p4 import entities
from ina.switch_model import p4rt_wire
from ina.switch_model.p4rt_values import SC, decode_uint, encode_uint, fail
from ina.switch_model.pipeline import Pipeline

_U = p4runtime_pb2.Update


class MulticastGroups:
    """Writes and reads of multicast group entries (a part of `P4RuntimeService`)."""

    pipeline: Pipeline

    def _init_groups(self) -> None:
        self._group_meta: dict[int, bytes] = {}
        self._group_port_bytes: set[int] = set()  # groups written with `Replica.port`

    def _clear_groups(self) -> None:
        """Delete every group (a new pipeline config), in place."""
        self.pipeline.tables.mcast_groups.clear()
        self._group_meta.clear()
        self._group_port_bytes.clear()

    def _write_pre(self, utype: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
        kind = pre.WhichOneof("type")
        if kind == "clone_session_entry":
            raise fail(SC.UNIMPLEMENTED, "the INA program uses no clone sessions")
        if kind is None:
            raise fail(SC.INVALID_ARGUMENT, "packet replication engine entry is not set")
        m = pre.multicast_group_entry
        gid = m.multicast_group_id
        if gid == 0:
            raise fail(SC.INVALID_ARGUMENT, "multicast group id 0 is reserved")
        if gid > entities.MAX_MCAST_GROUP:  # as BMv2 answers (issue 11)
            raise fail(
                SC.OUT_OF_RANGE, f"multicast group {gid}: ids are 1..{entities.MAX_MCAST_GROUP}"
            )
        groups = self.pipeline.tables.mcast_groups
        if utype == _U.DELETE:
            if gid not in groups:
                raise fail(SC.NOT_FOUND, f"no multicast group {gid}")
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
                raise fail(SC.INVALID_ARGUMENT, f"group {gid}: instance {r.instance} > 65535")
            if (port, r.instance) in replicas:
                raise fail(
                    SC.INVALID_ARGUMENT,
                    f"group {gid}: replica (port {port}, instance {r.instance}) twice",
                )
            replicas.append((port, r.instance))
        if utype == _U.INSERT and gid in groups:
            raise fail(SC.ALREADY_EXISTS, f"multicast group {gid} exists")
        if utype == _U.MODIFY and gid not in groups:
            raise fail(SC.NOT_FOUND, f"no multicast group {gid}")
        # INSERT or MODIFY (as checked above) with BMv2's replica order: a MODIFY keeps the
        # copies it keeps in their place and sends new ones last (issue 32).
        self.pipeline.tables.write_group(gid, replicas)
        self._group_meta[gid] = m.metadata
        if as_bytes:
            self._group_port_bytes.add(gid)
        else:
            self._group_port_bytes.discard(gid)
        self._sync_worker_ports()

    def _read_pre(self, q: p4runtime_pb2.PacketReplicationEngineEntry) -> p4rt_wire.Entities:
        kind = q.WhichOneof("type")
        if kind == "clone_session_entry":
            if q.clone_session_entry.session_id:
                raise fail(SC.NOT_FOUND, "the INA program uses no clone sessions")
            return p4rt_wire.Entities(())
        if kind is None:
            raise fail(SC.INVALID_ARGUMENT, "packet replication engine entry is not set")
        groups = self.pipeline.tables.mcast_groups
        gid = q.multicast_group_entry.multicast_group_id
        if gid and gid not in groups:
            raise fail(SC.NOT_FOUND, f"no multicast group {gid}")
        return p4rt_wire.Entities(
            tuple(
                functools.partial(
                    group_entry,
                    g,
                    tuple(groups[g]),
                    g in self._group_port_bytes,
                    self._group_meta.get(g, b""),
                )
                for g in ([gid] if gid else sorted(groups))
            )
        )


def group_entry(gid: int, replicas, port_bytes: bool, metadata: bytes) -> p4runtime_pb2.Entity:
    """A multicast group entry as a read returns it (built after the lock is released)."""
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

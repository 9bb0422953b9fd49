"""Table entries of the switch model's P4Runtime service: the four tables onto the `Pipeline`.

`TableEntries` is a part of `P4RuntimeService` (`ina.switch_model.p4runtime_server`): it
parses a ``TableEntry`` against the P4Info (`Schema`), applies INSERT, MODIFY and DELETE to
the pipeline's state, and reads entries back. Each table is three methods, apply, remove and
entries, so writes and reads treat the tables alike:

=============  ==============================================================================
table          switch model state
=============  ==============================================================================
job_table      ``Pipeline.install_job`` / ``remove_job``; ``drop`` entries are kept beside
               the pipeline's jobs (their packets miss and are dropped as UNKNOWN_JOB, as the
               program does with such an entry)
worker_table   ``Tables.add_worker``; the switch port is the worker's replica in the job's
               multicast group (`MulticastGroups` keeps it in step); ``drop`` is refused
               (UNIMPLEMENTED): the model's replication has no per-worker drop
forward_table  stored and read back (the UDP-mode model forwards nothing else; BMv2 and
               `ina.switch_model.rawio` use it for plain L2 traffic)
parent_table   ``Pipeline.set_parent`` (a leaf of a hierarchical job); ``no_parent``
               entries are kept beside it (the same as no entry)
=============  ==============================================================================

Default actions are const (PERMISSION_DENIED on MODIFY, as the program declares); every
entry has priority 0 (exact matches only) and no direct resources. Controller metadata and
metadata are stored per entry for read-write symmetry.

The service provides ``pipeline`` and ``_schema``; `TableEntries._init_tables` sets up the
state kept beside the pipeline.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress

from p4.v1 import p4runtime_pb2

from ina.switch_model import p4rt_wire
from ina.switch_model.p4rt_schema import ActionInfo, Schema, TableInfo
from ina.switch_model.p4rt_values import (
    SC,
    decode_uint,
    encode_uint,
    fail,
    ip_int,
    mac_int,
    mac_str,
)
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.tables import JobEntry, ParentEntry, Tables, WorkerAddress

_U = p4runtime_pb2.Update
Key = tuple[int, ...]


class TableEntries:
    """Writes and reads of ``job_table``, ``worker_table``, ``forward_table`` and
    ``parent_table`` (a part of `P4RuntimeService`)."""

    pipeline: Pipeline
    _schema: Schema

    def _init_tables(self) -> None:
        # State the pipeline has no place for, kept for read-write symmetry.
        self._forward: dict[Key, tuple[str, Key]] = {}
        self._job_drops: set[Key] = set()  # job_table keys whose action is drop
        self._no_parents: set[Key] = set()  # parent_table keys of no_parent
        self._entry_meta: dict[tuple[int, Key], tuple[int, bytes]] = {}
        self._tables = {
            "job_table": (self._job_apply, self._job_remove, self._job_entries),
            "worker_table": (self._worker_apply, self._worker_remove, self._worker_entries),
            "forward_table": (self._forward_apply, self._forward_remove, self._forward_entries),
            "parent_table": (self._parent_apply, self._parent_remove, self._parent_entries),
        }

    def _clear_tables(self) -> None:
        """Empty every table (a new pipeline config), in place: the I/O loop may hold
        references to these containers, and rawio mirrors ``_forward``."""
        t = self.pipeline.tables
        t.jobs.clear()
        t.workers.clear()
        t.parents.clear()
        self._no_parents.clear()
        self._forward.clear()
        self._job_drops.clear()
        self._entry_meta.clear()

    # -- parsing -----------------------------------------------------------------------------

    def _parse_key(self, t: TableInfo, match) -> Key:
        given: dict[int, int] = {}
        fields = {f[0]: f for f in t.fields}
        for m in match:
            f = fields.get(m.field_id)
            if f is None:
                raise fail(SC.INVALID_ARGUMENT, f"{t.name}: unknown match field id {m.field_id}")
            if m.field_id in given:
                raise fail(SC.INVALID_ARGUMENT, f"{t.name}: match field {f[1]} given twice")
            if m.WhichOneof("field_match_type") != "exact":
                raise fail(SC.INVALID_ARGUMENT, f"{t.name}.{f[1]} is an exact match field")
            given[m.field_id] = decode_uint(m.exact.value, f[2], f"{t.name}.{f[1]}")
        missing = [f[1] for f in t.fields if f[0] not in given]
        if missing:
            raise fail(SC.INVALID_ARGUMENT, f"{t.name}: missing match fields {missing}")
        return tuple(given[f[0]] for f in t.fields)

    def _parse_action(self, t: TableInfo, ta: p4runtime_pb2.TableAction):
        if ta.WhichOneof("type") != "action":
            raise fail(SC.INVALID_ARGUMENT, f"{t.name} is a direct table: give an action")
        a = self._schema.actions.get(ta.action.action_id)
        if a is None or a.id not in t.actions:
            raise fail(
                SC.INVALID_ARGUMENT,
                f"action id {ta.action.action_id:#x} is not an action of {t.name}",
            )
        params = {p[0]: p for p in a.params}
        given: dict[int, int] = {}
        for p in ta.action.params:
            info = params.get(p.param_id)
            if info is None:
                raise fail(SC.INVALID_ARGUMENT, f"{a.name}: unknown param id {p.param_id}")
            if p.param_id in given:
                raise fail(SC.INVALID_ARGUMENT, f"{a.name}: param {info[1]} given twice")
            given[p.param_id] = decode_uint(p.value, info[2], f"{a.name}.{info[1]}")
        missing = [p[1] for p in a.params if p[0] not in given]
        if missing:
            raise fail(SC.INVALID_ARGUMENT, f"{a.name}: missing params {missing}")
        return a, tuple(given[p[0]] for p in a.params)

    # -- write -------------------------------------------------------------------------------

    def _write_table(self, utype: int, te: p4runtime_pb2.TableEntry) -> None:
        t = self._schema.table(te.table_id)
        apply, remove, entries = self._tables[t.name]
        if te.is_const:
            raise fail(SC.INVALID_ARGUMENT, "is_const must be false in a write")
        for f in ("counter_data", "meter_config", "meter_counter_data", "time_since_last_hit"):
            if te.HasField(f):
                raise fail(SC.INVALID_ARGUMENT, f"{t.name} has no direct resources ({f})")
        if te.idle_timeout_ns:
            raise fail(SC.INVALID_ARGUMENT, f"{t.name} does not support idle timeouts")
        if te.is_default_action:
            if te.match or te.priority:
                raise fail(SC.INVALID_ARGUMENT, "a default entry has no match and priority 0")
            if utype != _U.MODIFY:
                raise fail(SC.INVALID_ARGUMENT, "the default entry can only be modified")
            raise fail(SC.PERMISSION_DENIED, f"the default action of {t.name} is const")
        if te.priority:
            raise fail(SC.INVALID_ARGUMENT, f"{t.name} has only exact matches: priority 0")
        key = self._parse_key(t, te.match)
        exists = key in entries()
        if utype == _U.DELETE:
            if not exists:
                raise fail(SC.NOT_FOUND, f"{t.name}: no entry for key {key}")
            remove(key)
            self._entry_meta.pop((t.id, key), None)
            return
        if utype == _U.INSERT:
            if exists:
                raise fail(SC.ALREADY_EXISTS, f"{t.name}: key {key} already has an entry")
            if not te.HasField("action"):
                raise fail(SC.INVALID_ARGUMENT, "INSERT needs an action")
            if len(entries()) >= t.size:
                raise fail(SC.RESOURCE_EXHAUSTED, f"{t.name} is full ({t.size} entries)")
        elif not exists:
            raise fail(SC.NOT_FOUND, f"{t.name}: no entry for key {key}")
        elif not te.HasField("action"):
            return  # spec: MODIFY without an action (and no direct resources) is a no-op
        action, values = self._parse_action(t, te.action)
        apply(key, action, values, utype)
        self._entry_meta[(t.id, key)] = (te.controller_metadata, te.metadata)

    # -- job_table ---------------------------------------------------------------------------

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
            raise fail(SC.INVALID_ARGUMENT, f"job_table: {e}") from None
        self._job_drops.discard(key)
        self._sync_worker_ports()

    def _job_remove(self, key) -> None:
        if key in self._job_drops:
            self._job_drops.discard(key)
        else:
            self.pipeline.remove_job(key[0])

    def _job_entries(self):
        entries: dict[Key, tuple[str, Key]] = {key: ("drop", ()) for key in self._job_drops}
        for j in self.pipeline.tables.jobs.values():
            entries[(j.job_id,)] = (
                "set_job",
                (j.job_index, j.num_workers, j.pool_base, j.pool_size, j.mcast_grp),
            )
        return entries

    # -- worker_table ------------------------------------------------------------------------

    def _worker_apply(self, key, action, values, utype) -> None:
        if action.name == "drop":
            raise fail(
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
                mac=mac_str(mac),
                port=port,
            )
        )

    def _worker_remove(self, key) -> None:
        self.pipeline.tables.workers.pop(key, None)

    def _worker_entries(self):
        return {
            key: ("set_worker", (mac_int(w.mac), ip_int(w.ip), w.udp_port))
            for key, w in self.pipeline.tables.workers.items()
        }

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

    # -- parent_table ------------------------------------------------------------------------

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
                mac=mac_str(mac),
                port=port,
            )
        except ValueError as e:
            raise fail(SC.INVALID_ARGUMENT, f"parent_table: {e}") from None
        self._no_parents.discard(key)
        self.pipeline.set_parent(parent)

    def _parent_remove(self, key) -> None:
        self._no_parents.discard(key)
        self.pipeline.remove_parent(key[0])

    def _parent_entries(self):
        entries: dict[Key, tuple[str, Key]] = {key: ("no_parent", ()) for key in self._no_parents}
        for p in self.pipeline.tables.parents.values():
            entries[(p.job_id,)] = (
                "set_parent",
                (p.worker_id, p.port, mac_int(p.mac), ip_int(p.ip), p.udp_port),
            )
        return entries

    # -- forward_table -----------------------------------------------------------------------

    def _forward_apply(self, key, action, values, utype) -> None:
        self._forward[key] = (action.name, values)

    def _forward_remove(self, key) -> None:
        self._forward.pop(key, None)

    def _forward_entries(self):
        return self._forward

    # -- read --------------------------------------------------------------------------------

    def _read_tables(self, q: p4runtime_pb2.TableEntry) -> p4rt_wire.Entities:
        if q.table_id == 0:
            tables = list(self._schema.tables.values())
        else:
            tables = [self._schema.table(q.table_id)]
        out = []
        for t in tables:
            if q.is_default_action:
                out.append(functools.partial(default_entry, t))
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
                out.append(functools.partial(table_entry, t, key, action, values, ctrl_meta, meta))
        return p4rt_wire.Entities(tuple(out))


# -- entity builders: called after the pipeline lock is released (`p4rt_wire.Entities`) ------


def default_entry(t: TableInfo) -> p4runtime_pb2.Entity:
    """The default entry of ``t`` as a read returns it."""
    e = p4runtime_pb2.Entity()
    e.table_entry.table_id = t.id
    e.table_entry.is_default_action = True
    e.table_entry.action.action.action_id = t.default_action
    return e


def table_entry(t: TableInfo, key, action: ActionInfo, values, ctrl_meta, meta):
    """One entry of ``t`` as a read returns it (canonical bytestrings)."""
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

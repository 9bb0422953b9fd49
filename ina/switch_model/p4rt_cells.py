"""Counter and register cells of the switch model's P4Runtime service.

`CounterRegisterCells` is a part of `P4RuntimeService` (`ina.switch_model.p4runtime_server`):
``ina_stats`` and ``worker_contributions`` map onto ``Pipeline.counters``, the ``slot_*``
registers onto ``Pipeline.registers`` (``slot_lane_i`` is lane i) and ``job_epoch``,
``join_*`` and ``up_*`` onto ``Pipeline.runs``. Both kinds can only be modified (no INSERT or
DELETE), one cell or, with no index, every cell.

Registers: the P4Info size is ``POOL_SLOTS * 2``; the model serves the cells it has
(``pool_total * 2``, OUT_OF_RANGE beyond) and lanes it does not run (``slot_lane_i`` with
``i >= lanes``) read as zero and refuse non-zero writes. BMv2's P4Runtime server does not
implement register access at all (use ``simple_switch_CLI register_read`` there).

A read copies the cells under the pipeline lock and leaves their encoding to
`ina.switch_model.p4rt_wire` (numpy, not protobuf objects), after the lock is released.
The service provides ``pipeline`` and ``_schema``; `_init_cells` maps register IDs to lanes.
"""

from __future__ import annotations

import numpy as np
from p4.v1 import p4runtime_pb2

from ina.p4 import entities
from ina.switch_model import p4rt_wire
from ina.switch_model.p4rt_schema import Schema
from ina.switch_model.p4rt_values import SC, decode_uint, fail
from ina.switch_model.pipeline import Pipeline

_U = p4runtime_pb2.Update


class CounterRegisterCells:
    """Writes and reads of counter and register entries (a part of `P4RuntimeService`)."""

    pipeline: Pipeline
    _schema: Schema

    def _init_cells(self) -> None:
        self._lane_of: dict[int, int | None] = {}  # register id -> lane, None for scalars
        for r in entities.REGISTERS:
            lane = r.name.removeprefix("slot_lane_")
            self._lane_of[r.id] = int(lane) if lane.isdigit() else None

    def _clear_cells(self) -> None:
        """Zero every register, run and counter (a new pipeline config)."""
        self.pipeline.registers.reset()
        self.pipeline.runs.reset_all()
        self.pipeline.counters.reset()

    def _indices(self, what: str, entry, size: int, p4_size: int) -> range:
        """The cells an entry addresses: its index, or every cell the model has."""
        if not entry.HasField("index"):
            return range(size)
        i = entry.index.index
        if i < 0:
            raise fail(SC.INVALID_ARGUMENT, f"{what}: negative index {i}")
        if i >= size:
            extra = f" (the switch model has {size})" if size < p4_size else ""
            raise fail(SC.OUT_OF_RANGE, f"{what}: index {i} >= size {p4_size}{extra}")
        return range(i, i + 1)

    # -- counters ----------------------------------------------------------------------------

    def _counter_array(self, counter_id: int):
        c = self._schema.counters.get(counter_id)
        if c is None:
            raise fail(SC.INVALID_ARGUMENT, f"unknown counter id {counter_id:#x}")
        counters = self.pipeline.counters
        return c, counters, min(c.size, counters.size(c.preamble.name))

    def _write_counter(self, utype: int, ce: p4runtime_pb2.CounterEntry) -> None:
        c, arr, size = self._counter_array(ce.counter_id)
        if utype != _U.MODIFY:
            raise fail(SC.INVALID_ARGUMENT, "counter entries can only be modified")
        idx = self._indices(c.preamble.name, ce, size, c.size)
        if not ce.HasField("data"):
            return  # spec: the value is not modified
        if ce.data.packet_count < 0 or ce.data.byte_count < 0:
            raise fail(SC.INVALID_ARGUMENT, "counter values must be >= 0")
        arr.write(c.preamble.name, idx.start, idx.stop, ce.data.packet_count, ce.data.byte_count)

    def _read_counters(self, q: p4runtime_pb2.CounterEntry) -> list[p4rt_wire.CounterCells]:
        ids = [q.counter_id] if q.counter_id else list(self._schema.counters)
        out = []
        for cid in ids:
            c, arr, size = self._counter_array(cid)
            idx = self._indices(c.preamble.name, q, size, c.size)
            cells = arr.read(c.preamble.name, idx.start, idx.stop)
            out.append(p4rt_wire.CounterCells(cid, idx.start, cells))
        return out

    # -- registers ---------------------------------------------------------------------------

    def _register(self, register_id: int):
        r = self._schema.registers.get(register_id)
        if r is None or register_id not in self._lane_of:
            raise fail(SC.INVALID_ARGUMENT, f"unknown register id {register_id:#x}")
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
            raise fail(SC.INVALID_ARGUMENT, "register entries can only be modified")
        idx = self._indices(name, re, size, r.size)
        if re.data.WhichOneof("data") != "bitstring":
            raise fail(SC.INVALID_ARGUMENT, f"{name} holds bit<{bits}>: give a bitstring")
        value = decode_uint(re.data.bitstring, bits, name)
        regs = self.pipeline.registers
        if lane is None:
            cells = self.pipeline.register_cells(name)
            for i in idx:
                cells[i] = value
        elif lane >= regs.lanes:
            if value:
                raise fail(
                    SC.FAILED_PRECONDITION, f"{name}: the switch model runs {regs.lanes} lanes"
                )
        else:
            # Lanes hold int32 two's complement in a bit<32> register.
            signed = value - (1 << 32) if value >> 31 else value
            regs.values[idx.start : idx.stop, lane] = signed

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
                elif isinstance(cells, memoryview):  # shared cells of a sharded switch
                    cells = cells.tolist()
            elif lane >= regs.lanes:
                cells = np.zeros(len(idx), np.int64)  # lanes the model does not run
            else:
                cells = regs.values[idx.start : idx.stop, lane].copy()
            out.append(p4rt_wire.RegisterCells(rid, idx.start, cells, bits))
        return out

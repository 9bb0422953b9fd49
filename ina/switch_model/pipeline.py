"""The switch's aggregation pipeline as pure logic: INA payloads in, INA payloads out.

This is the executable specification of the P4 program (`ina/p4/`). Its stages carry the
names of the P4 controls and run in the same order:

1. ``Validate``       version, op, length, lane count, no REJECT; else drop MALFORMED.
2. ``JobLookup``      ``job_table`` on job_id; a miss drops UNKNOWN_JOB. ``parent_table``: the
                      job's parent switch on a leaf; a RESULT or PENDING (a parent's reply)
                      for a job without one drops MALFORMED.
3. ``WorkerCheck``    worker_id < num_workers (BAD_WORKER); for data packets, slot < pool_size
                      and slot and shadow copy consistent with seq (BAD_SLOT, see below).
4. ``JoinRun``        the job's runs. A JOIN packet joins a run (below) and is answered
                      like a slot: RESULT to the job's multicast group when the run's last
                      worker joins, a RESULT or PENDING by unicast to a duplicate; a JOIN
                      whose pool (``slot`` = pool_size - 1) or lanes (``num_lanes``) are
                      not the job's is refused: REJECT by unicast, a header alone with
                      the job's values (Validate lets such a JOIN be as long as the lanes
                      it names). A data
                      packet must carry the job's current ``epoch``, else drop STALE;
                      except one of the run just before, which SlotState answers from a
                      complete copy of that run (a DUPLICATE) and drops otherwise.
5. ``SlotState``      one of the slot's two shadow copies, chosen by the SHADOW flag:
                      - NEW: the copy is unused, belongs to an earlier run (its epoch), or
                        the packet carries the copy's next generation -> it starts the
                        aggregation (its lanes are written, not added);
                      - STALE: any other seq than the copy's current one -> drop;
                      - DUPLICATE: the copy is complete, or the worker's bit is already
                        set -> answer it (below), never add it again;
                      - CONTRIBUTE: set the worker's bit, count it.
                      Every counted contribution also clears the worker's bit in the other
                      copy (SwitchML), so that copy shows which workers still need its result.
6. ``LaneAggregate``  per lane: write (NEW), SUM/OR/MAX into the register (CONTRIBUTE), or
                      read the stored result (DUPLICATE into a completed slot).
7. ``ExpLevelMax``    ``slot_exp`` and ``slot_level`` are MAX-combined on every contribution.
8. ``ResultEmit``     the contribution that completes the slot leaves as RESULT to the job's
                      multicast group; a DUPLICATE into a complete slot gets the stored result
                      by unicast; a DUPLICATE into an incomplete one a PENDING reply (with the
                      bitmap, so the worker can name who is missing).
9. ``Stats``          the ``ina_stats`` and ``worker_contributions`` counters.

Hierarchical aggregation (a leaf switch): a job with a ``parent_table`` entry (`ParentEntry`)
is one contributor of the same job on a parent switch. Its completed slot copy, instead of
being multicast, goes UP (output ``dest`` `PARENT`) as the parent's worker
``parent.worker_id``; the parent's RESULT for it (a packet with RESULT set, which is
MALFORMED for a job without a parent) is taken in once (``slot_down``: the copy now holds
the full result) and multicast to the leaf's workers. A worker's duplicate into a complete
copy whose result has not come down sends the stored partial sum up again, so the workers'
retransmissions repair a loss on either level. Runs likewise: the leaf's run join, once
complete, goes up (its nonce kept in ``up_nonce``); the parent's JOIN RESULT with that nonce
gives the leaf its epoch (``up_joined``). docs/protocol.md, "Hierarchical aggregation".

Why the sequence number: chunk ``seq`` of a run lives in slot ``seq % pool_size``, copy
``(seq // pool_size) % 2`` (pool sizes are powers of two, so these are bit masks in P4). A
worker sends ``seq + pool_size`` (same slot, other copy) only after it has the result of
``seq``, so within a run a copy's generations are exactly ``g, g + 2 * pool_size, ...``: once
a copy is in use, a packet with any other seq is stale and can never enter a sum, and reuse
needs no reset message.

Why runs (epochs): every run of a job starts at seq 0, so without them a second run would
meet the first run's completed copies holding the same seqs and be answered with the first
run's sums. A worker's first call sends JOIN with a random nonce in ``seq``; the switch keeps,
per job, the run's ``job_epoch``, the bitmap and count of workers that joined it, and each
worker's last nonce. A JOIN whose nonce is the worker's stored one and whose bit is set is a
duplicate (answered, never counted); any other JOIN counts, and starts a new run (epoch + 1,
join bitmap = {worker}) when no run was joined yet, the last run's join was complete, or the
worker's bit was already set (it restarted). Data packets carry the epoch; a copy written in
an earlier epoch counts as unused. Installing a job resets its pool and its runs (epoch 0,
which packets of clients that never JOIN use).

The pipeline processes batches: parsing and validation are vectorized over the batch; the
stateful stages run per packet in order, so a batch behaves exactly like the same packets one
at a time, which is what the P4 program does. One kind of batch, the common one on a busy
switch, takes whole-batch steps instead (``_contribute_all``): every packet a first count of
one job (no parent) into slot copies whose sibling copies the batch does not touch, none
completed more than once. Its copies are independent and each one's packets only add (int32
SUM wraps, so any order gives the same sums) until the last completes it, so reducing each
copy's lanes at once and writing its registers once gives the per-packet loop's registers,
outputs and counters (`tests/test_pipeline.py` runs both on the same batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ina.protocol import (
    FRAME_OVERHEAD,
    HEADER_BYTES,
    HEADER_DTYPE,
    LANE_BYTES,
    LANE_DTYPE,
    MAX_LANES,
    MAX_WORKERS,
    VERSION,
    Counter,
    Flag,
    Op,
    packet_bytes,
)
from ina.switch_model.state import Counters, RunRegisters, SlotRegisters, Storage
from ina.switch_model.tables import JobEntry, ParentEntry, Tables

MULTICAST = -1  # Outputs.dest value: to the job's multicast group
PARENT = -2  # Outputs.dest value: up to the job's parent switch (Tables.parents)

_MASK32 = (1 << 32) - 1
# Plain ints for the per-packet loop (enum arithmetic there costs more than the work).
_SUM, _OR, _JOIN = int(Op.SUM), int(Op.OR), int(Op.JOIN)
_DROP_UNKNOWN_JOB = 2 * int(Counter.DROP_UNKNOWN_JOB)
_DROP_BAD_WORKER = 2 * int(Counter.DROP_BAD_WORKER)
_DROP_BAD_SLOT = 2 * int(Counter.DROP_BAD_SLOT)
_DROP_STALE = 2 * int(Counter.DROP_STALE)
_DUPLICATES = 2 * int(Counter.DUPLICATES)
_RETX_REPLIES = 2 * int(Counter.RETX_REPLIES)
_PENDING_REPLIES = 2 * int(Counter.PENDING_REPLIES)
_AGGREGATED = 2 * int(Counter.AGGREGATED)
_RESULTS = 2 * int(Counter.RESULTS)
_JOINS = 2 * int(Counter.JOINS)
_RUNS = 2 * int(Counter.RUNS)
_UP_PACKETS = 2 * int(Counter.UP_PACKETS)
_JOIN_REJECTS = 2 * int(Counter.JOIN_REJECTS)
_PACKETS_IN = 2 * int(Counter.PACKETS_IN)
_DROP_MALFORMED = 2 * int(Counter.DROP_MALFORMED)
_RESULT_PACKETS = 2 * int(Counter.RESULT_PACKETS)
_NUM_COUNTERS = len(Counter)
_FROM_PARENT = int(Flag.RESULT | Flag.PENDING)
_REJECT_FLAG = int(Flag.REJECT)
_REPLY_FLAGS = _FROM_PARENT | _REJECT_FLAG
_RESULT_FLAG = int(Flag.RESULT)
# Plain ints for the vectorized stages too: an enum member in a numpy expression takes the
# enum's own operator first and costs tens of microseconds per batch.
_OP_FIRST, _OP_LAST = int(Op.SUM), int(Op.JOIN)
_RESULT, _PENDING, _SHADOW = int(Flag.RESULT), int(Flag.PENDING), int(Flag.SHADOW)
# An output's flags by its kind (0 result multicast, 1 result unicast, 2 pending unicast,
# 3 up to the parent: a contribution, no reply flag, 4 a JOIN refused, unicast)
_KIND_FLAGS = np.array([_RESULT, _RESULT, _PENDING, 0, _REJECT_FLAG], dtype=np.int64)
_REJECT_KIND = 4


@dataclass
class Outputs:
    """Packets the pipeline emits for one batch, in preallocated buffers.

    Row ``i < n`` of ``data`` holds an INA payload of ``length[i]`` bytes for ``job_id[i]``,
    sent to worker ``dest[i]`` or, if ``dest[i] == MULTICAST``, to multicast group
    ``group[i]``, or if ``dest[i] == PARENT``, up to the job's parent switch; ``src[i]`` is
    the input row that produced it (outputs are in input order).
    """

    data: np.ndarray  # (capacity, stride) uint8
    dest: np.ndarray  # int32
    job_id: np.ndarray  # int32
    group: np.ndarray  # int32
    src: np.ndarray  # int64
    length: np.ndarray  # int64: the payload size (a whole packet; a REJECT: the header)
    # bool: the output answers a DUPLICATE (a packet counted before, or into a complete
    # copy), not a counted contribution; the simulator needs it to know that each of a
    # class of alike retransmissions gets an answer of its own (`ina.sim.nodes.SwitchNode`)
    answer: np.ndarray = None
    n: int = 0

    def __post_init__(self) -> None:
        if self.answer is None:
            self.answer = np.zeros(self.dest.shape[0], bool)

    @classmethod
    def allocate(cls, capacity: int, stride: int) -> Outputs:
        z = np.zeros(capacity, dtype=np.int32)
        return cls(
            np.zeros((capacity, stride), np.uint8),
            z.copy(),
            z.copy(),
            z.copy(),
            np.zeros(capacity, np.int64),
            np.zeros(capacity, np.int64),
        )

    def staging(self, lanes: int) -> np.ndarray:
        """Native int32 rows where the pipeline snapshots result lanes (reused)."""
        st = getattr(self, "_staging", None)
        if st is None or st.shape != (self.data.shape[0], lanes):
            st = np.zeros((self.data.shape[0], lanes), np.int32)
            self._staging = st
        return st

    def packets(self) -> list[tuple[int, int, int, bytes]]:
        """(dest, job_id, group, payload) of each output (for tests and tools)."""
        return [
            (
                int(self.dest[i]),
                int(self.job_id[i]),
                int(self.group[i]),
                self.data[i, : self.length[i]].tobytes(),
            )
            for i in range(self.n)
        ]


class Pipeline:
    """The INA aggregation pipeline with its registers, counters and tables."""

    def __init__(
        self,
        lanes: int,
        pool_total: int,
        tables: Tables | None = None,
        storage: Storage | None = None,
        counters: Counters | None = None,
    ) -> None:
        """``storage`` places the registers (default: private to this object, see
        `ina.switch_model.state`); ``counters`` replaces the private counters (a sharded
        switch's front end sums its shards')."""
        if not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"lanes must be 1..{MAX_LANES}, got {lanes}")
        if pool_total < 1:
            raise ValueError("pool_total must be >= 1")
        self.lanes = lanes
        self.pool_total = pool_total
        self.payload_bytes = packet_bytes(lanes)
        self.tables = tables if tables is not None else Tables()
        self.registers = SlotRegisters(pool_total, lanes, storage)
        self.runs = RunRegisters(storage)
        self.counters = counters if counters is not None else Counters(storage)
        # the common batch in whole-batch steps (`_contribute_all`); False: one packet at a
        # time always (the two are compared by tests/test_pipeline.py)
        self.vectorized = True

    # -- control plane -----------------------------------------------------------------

    def install_job(self, job: JobEntry) -> None:
        """Add or replace a job; its pool's registers and its runs are reset."""
        self.tables.add_job(job, self.pool_total)
        self.registers.reset(job.pool_base, job.pool_size)
        self.runs.reset(job.job_index)

    def set_parent(self, parent: ParentEntry) -> None:
        """``parent_table`` entry: this switch is a leaf of ``parent.job_id``."""
        self.tables.parents[parent.job_id] = parent

    def remove_parent(self, job_id: int) -> None:
        self.tables.parents.pop(job_id, None)

    def remove_job(self, job_id: int) -> None:
        job = self.tables.jobs.pop(job_id, None)
        if job is not None:
            self.registers.reset(job.pool_base, job.pool_size)
            self.runs.reset(job.job_index)

    def register_cells(self, name: str) -> list[int]:
        """The cells of the scalar register called ``name`` in the P4 program (a list the
        pipeline reads and writes in place; lanes are ``registers.values``)."""
        if name in RunRegisters.NAMES:
            return getattr(self.runs, name)
        return getattr(self.registers, name.removeprefix("slot_"))

    def group_size(self, group: int) -> int:
        return len(self.tables.mcast_groups.get(group, ()))

    # -- data plane --------------------------------------------------------------------

    def process(self, payload: bytes) -> list[tuple[int, int, int, bytes]]:
        """One packet in, its outputs as (dest, job_id, group, payload) tuples."""
        stride = max(len(payload), self.payload_bytes)
        buf = np.zeros((1, stride), np.uint8)
        buf[0, : len(payload)] = np.frombuffer(payload, np.uint8)
        out = Outputs.allocate(1, max(stride, self.payload_bytes))
        self.process_batch(buf, np.array([len(payload)]), out)
        return out.packets()

    def process_batch(
        self,
        data: np.ndarray,
        lengths: np.ndarray,
        out: Outputs,
        frame_overhead: int = FRAME_OVERHEAD,
    ) -> int:
        """Run ``lengths.size`` packets (rows of ``data``) through the pipeline.

        ``out`` must have room for one output per input packet. Byte counters count
        ``length + frame_overhead`` (the frame on the wire). Returns the number of outputs.
        """
        n = int(lengths.size)
        out.n = 0
        if n == 0:
            return 0
        lengths = np.asarray(lengths, dtype=np.int64)
        frame_len = lengths + frame_overhead
        # Local tallies, flushed into the counter arrays once per batch.
        tally = [0] * (2 * _NUM_COUNTERS)
        tally[_PACKETS_IN] = n
        tally[_PACKETS_IN + 1] = int(frame_len.sum())

        # -- Validate (vectorized) ---------------------------------------------------
        pb = self.payload_bytes
        if data.shape[1] < pb:  # a buffer too narrow to hold a valid packet
            valid = np.zeros(n, dtype=bool)
            hdr = None
        else:
            hdr = data[:n, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(n)
            version = hdr["version"] == VERSION
            num_lanes = hdr["num_lanes"].astype(np.int64)
            valid = (
                (lengths == pb)
                & version
                & (hdr["op"] >= _OP_FIRST)
                & (hdr["op"] <= _OP_LAST)
                & (num_lanes <= self.lanes)
                & ((hdr["flags"] & _REJECT_FLAG) == 0)
            )
            # A worker's JOIN as long as the lanes it says it has, other than ours: a worker
            # configured with other lanes; JoinRun answers it with REJECT (and our lanes).
            # (Such a packet is never pb long: the usual batch skips this.)
            if not valid.all():
                valid |= (
                    version
                    & (hdr["op"] == _JOIN)
                    & ((hdr["flags"] & _REPLY_FLAGS) == 0)
                    & (num_lanes != self.lanes)
                    & (lengths == HEADER_BYTES + LANE_BYTES * num_lanes)
                )
        bad = ~valid
        if bad.any():
            tally[_DROP_MALFORMED] = int(bad.sum())
            tally[_DROP_MALFORMED + 1] = int(frame_len[bad].sum())
        idx = np.flatnonzero(valid)
        if idx.size == 0:
            self._flush(tally)
            return 0

        # Lanes to native int32 once for the batch (one copy, byte-swapping as it goes); the
        # stateful loop uses whole rows. All valid: a strided view of the batch, no gather.
        raw = data[:n, HEADER_BYTES:pb] if idx.size == n else data[idx, HEADER_BYTES:pb]
        lanes_in = raw.view(LANE_DTYPE).astype(np.int32)
        h = hdr[idx]
        flen = frame_len[idx].tolist()
        jobs = self.tables.jobs
        agg_wrow: list[int] = []  # worker_contributions rows and bytes, flushed per batch
        agg_len: list[int] = []

        # Output bookkeeping, snapshotted when the output is decided (as the P4 program
        # writes the packet then): input row, kind, bitmap, exp, level; lanes go to `staged`.
        out_k: list[int] = []
        out_kind: list[int] = []  # 0 result multicast, 1 result unicast, 2 pending unicast
        out_bitmap: list[int] = []
        out_exp: list[int] = []
        out_level: list[int] = []
        out_epoch: list[int] = []
        out_up: dict[int, tuple[int, int | None]] = {}  # UP output -> (worker_id, JOIN seq)
        answers: list[int] = []  # outputs that answer a DUPLICATE (`Outputs.answer`)
        staged = out.staging(self.lanes)

        # The common batch (every packet a first count into one job's slots, each copy
        # completed at most once) in a few whole-batch steps; anything else, one packet at a
        # time below. Both give the same registers, outputs and counters.
        todo = idx.size
        if self.vectorized and self._contribute_all(
            h, lanes_in, flen, tally, out_k, out_bitmap, out_exp, out_level, out_epoch, staged
        ):
            todo = 0
            out_kind = [0] * len(out_k)
            # worker_contributions of the one job at once
            w = h["worker_id"].astype(np.int64)
            first = jobs[int(h["job_id"][0])].job_index * MAX_WORKERS
            mine = self.counters.workers[first : first + MAX_WORKERS]
            mine[:, 0] += np.bincount(w, minlength=MAX_WORKERS)
            mine[:, 1] += np.bincount(w, frame_len[idx], MAX_WORKERS).astype(np.int64)
        else:
            ops = h["op"].tolist()
            shadows = ((h["flags"] & _SHADOW) != 0).astype(np.int64).tolist()
            workers = h["worker_id"].tolist()
            jobs_in = h["job_id"].tolist()
            slots = h["slot"].tolist()
            seqs = h["seq"].tolist()
            exps = h["exp"].tolist()
            levels = h["level"].tolist()
            epochs = h["epoch"].tolist()
            flags = h["flags"].tolist()
            nls = h["num_lanes"].tolist()

        parents = self.tables.parents
        reg = self.registers
        r_seq, r_epoch, r_bitmap, r_count = reg.seq, reg.epoch, reg.bitmap, reg.count
        r_exp, r_level, r_values, r_down = reg.exp, reg.level, reg.values, reg.down
        runs = self.runs
        up_nonce, up_joined = runs.up_nonce, runs.up_joined
        j_epoch, j_bitmap, j_count, j_nonce = (
            runs.job_epoch,
            runs.join_bitmap,
            runs.join_count,
            runs.join_nonce,
        )
        for k in range(todo):
            fl = flen[k]
            # -- JobLookup --------------------------------------------------------------
            job = jobs.get(jobs_in[k])
            if job is None:
                tally[_DROP_UNKNOWN_JOB] += 1
                tally[_DROP_UNKNOWN_JOB + 1] += fl
                continue
            # parent_table: a leaf of a hierarchical job; RESULT/PENDING = the parent's reply
            parent = parents.get(jobs_in[k]) if parents else None
            fp = flags[k] & _FROM_PARENT
            if fp and parent is None:
                tally[_DROP_MALFORMED] += 1
                tally[_DROP_MALFORMED + 1] += fl
                continue
            # -- WorkerCheck ------------------------------------------------------------
            w = workers[k]
            nw = job.num_workers
            if w >= nw and not fp:
                tally[_DROP_BAD_WORKER] += 1
                tally[_DROP_BAD_WORKER + 1] += fl
                continue
            q = seqs[k]
            mask = 1 << w
            if ops[k] == _JOIN:
                # -- JoinRun: a worker joins a run (seq is its nonce) -----------------------
                i = job.job_index
                e = j_epoch[i]
                jb = j_bitmap[i]
                jc = j_count[i]
                formed = jc >= nw
                if fp:
                    # the parent's reply to the leaf's run join
                    if not formed or up_joined[i] or not flags[k] & _RESULT_FLAG:
                        tally[_DROP_STALE] += 1
                        tally[_DROP_STALE + 1] += fl
                        continue
                    if q == up_nonce[i]:
                        # DOWN: the parent's run, for our join: its epoch is ours now
                        e = j_epoch[i] = epochs[k]
                        up_joined[i] = 1
                        tally[_RUNS] += 1
                        tally[_RUNS + 1] += fl
                        kind = 0
                    else:
                        # announced with another contributor's nonce: ask again (UP)
                        tally[_DUPLICATES] += 1
                        tally[_DUPLICATES + 1] += fl
                        kind = 3
                elif nls[k] != self.lanes or slots[k] + 1 != job.pool_size:
                    # REJECT: the worker's lanes or pool are not the job's; it learns ours
                    # (the reply's num_lanes and slot) and stops, its join never counted
                    tally[_JOIN_REJECTS] += 1
                    tally[_JOIN_REJECTS + 1] += fl
                    kind = _REJECT_KIND
                else:
                    ni = i * MAX_WORKERS + w
                    if j_nonce[ni] == q and jb & mask:
                        # DUPLICATE: this join was counted; answer with the run (or who is
                        # in); a leaf whose parent has not answered asks it again (UP)
                        tally[_DUPLICATES] += 1
                        tally[_DUPLICATES + 1] += fl
                        answers.append(len(out_k))
                        if formed and parent is not None and not up_joined[i]:
                            kind = 3
                        else:
                            kind = 1 if formed else 2
                            r = _RETX_REPLIES if kind == 1 else _PENDING_REPLIES
                            tally[r] += 1
                            tally[r + 1] += fl
                    else:
                        if jc == 0 or formed or jb & mask:
                            # the first JOIN of a new run: no run yet, the last run's join
                            # was complete, or this worker restarted. A leaf's epoch comes
                            # from its parent's answer.
                            if parent is None:
                                e = (e + 1) & _MASK32
                                j_epoch[i] = e
                            else:
                                up_joined[i] = 0
                            jb, jc = mask, 1
                        else:
                            jb |= mask
                            jc += 1
                        j_nonce[ni] = q
                        j_bitmap[i] = jb
                        j_count[i] = jc
                        tally[_JOINS] += 1
                        tally[_JOINS + 1] += fl
                        if jc != nw:
                            continue  # absorbed: the worker waits for the run's last join
                        if parent is not None:
                            # the run's name towards the parent, whether or not it goes up
                            # now: a later UP must carry this run's nonce, never an older
                            # run's (docs/protocol.md, "Hierarchical aggregation")
                            up_nonce[i] = q
                        if parent is not None and not up_joined[i]:
                            kind = 3
                        else:
                            tally[_RUNS] += 1
                            tally[_RUNS + 1] += fl
                            kind = 0
                if kind == 3:
                    tally[_UP_PACKETS] += 1
                    tally[_UP_PACKETS + 1] += fl
                    out_up[len(out_k)] = (parent.worker_id, up_nonce[i])
                staged[len(out_k)] = lanes_in[k]  # a JOIN reply echoes the request's lanes
                out_k.append(k)
                out_kind.append(kind)
                out_exp.append(exps[k])
                out_level.append(levels[k])
                if kind == _REJECT_KIND:  # the request's header but for flags, slot, lanes
                    out_bitmap.append(int(h["bitmap"][k]))
                    out_epoch.append(epochs[k])
                else:
                    out_bitmap.append(jb)
                    out_epoch.append(e)
                continue
            s = slots[k]
            shadow = shadows[k]
            psize = job.pool_size
            # slot and shadow copy are functions of seq (pool_size is a power of two)
            if s >= psize or (q & (psize - 1)) != s or (1 if q & psize else 0) != shadow:
                tally[_DROP_BAD_SLOT] += 1
                tally[_DROP_BAD_SLOT + 1] += fl
                continue
            # -- JoinRun: a data packet belongs to the job's current run -------------------
            e = j_epoch[job.job_index]
            previous = False
            if epochs[k] != e:
                # the run just before: a late worker's retransmission is answered from a
                # complete copy of its run (SlotState), never counted
                if not fp and e and (epochs[k] + 1) & _MASK32 == e:
                    e, previous = epochs[k], True
                else:
                    tally[_DROP_STALE] += 1
                    tally[_DROP_STALE + 1] += fl
                    continue
            # -- SlotState --------------------------------------------------------------
            base = (job.pool_base + s) << 1
            row = base + shadow
            other = base + 1 - shadow
            stored = r_seq[row]
            cnt = r_count[row]
            dn = r_down[row]
            if fp:
                # A parent's reply for this leaf's copy: its RESULT for the partial sum we
                # sent up is DOWN once (LaneAggregate, ExpLevelMax: stored); else STALE.
                if (
                    flags[k] & _RESULT_FLAG
                    and not dn
                    and cnt >= nw
                    and r_epoch[row] == e
                    and q == stored
                ):
                    r_down[row] = 1
                    r_values[row] = lanes_in[k]
                    r_exp[row] = exps[k]
                    r_level[row] = levels[k]
                    tally[_RESULTS] += 1
                    tally[_RESULTS + 1] += fl
                    staged[len(out_k)] = r_values[row]
                    out_k.append(k)
                    out_kind.append(0)
                    out_bitmap.append(r_bitmap[row])
                    out_exp.append(exps[k])
                    out_level.append(levels[k])
                    out_epoch.append(e)
                else:
                    tally[_DROP_STALE] += 1
                    tally[_DROP_STALE + 1] += fl
                continue
            if previous and (cnt < nw or r_epoch[row] != e or q != stored):
                tally[_DROP_STALE] += 1
                tally[_DROP_STALE + 1] += fl
                continue
            if not previous and (
                not cnt or r_epoch[row] != e or q == (stored + 2 * psize) & _MASK32
            ):
                # NEW: first contribution of this generation (a copy from an earlier run
                # counts as unused). -- LaneAggregate: write.
                r_seq[row] = q
                r_epoch[row] = e
                r_down[row] = dn = 0
                r_bitmap[row] = mask
                r_count[row] = cnt = 1
                r_values[row] = lanes_in[k]
                r_exp[row] = exps[k]
                r_level[row] = levels[k]
            elif q != stored:
                tally[_DROP_STALE] += 1
                tally[_DROP_STALE + 1] += fl
                continue
            elif cnt >= nw or r_bitmap[row] & mask:
                # DUPLICATE: counted once already, or the slot is complete (a late copy
                # from a worker whose bit was cleared when it moved on); answer, never add.
                tally[_DUPLICATES] += 1
                tally[_DUPLICATES + 1] += fl
                answers.append(len(out_k))
                if cnt >= nw:
                    staged[len(out_k)] = r_values[row]
                    if parent is not None and not dn:
                        # a leaf's result has not come down: send the partial sum up again
                        kind = 3
                        tally[_UP_PACKETS] += 1
                        tally[_UP_PACKETS + 1] += fl
                        out_up[len(out_k)] = (parent.worker_id, None)
                    else:
                        kind = 1
                        tally[_RETX_REPLIES] += 1
                        tally[_RETX_REPLIES + 1] += fl
                else:
                    kind = 2
                    staged[len(out_k)] = lanes_in[k]
                    tally[_PENDING_REPLIES] += 1
                    tally[_PENDING_REPLIES + 1] += fl
                out_k.append(k)
                out_kind.append(kind)
                out_bitmap.append(r_bitmap[row])
                out_exp.append(r_exp[row])
                out_level.append(r_level[row])
                out_epoch.append(e)
                continue
            else:
                # CONTRIBUTE. -- LaneAggregate: combine into the register row.
                r_bitmap[row] |= mask
                r_count[row] = cnt = cnt + 1
                op = ops[k]
                v = r_values[row]
                if op == _SUM:
                    np.add(v, lanes_in[k], out=v)
                elif op == _OR:
                    np.bitwise_or(v, lanes_in[k], out=v)
                else:
                    np.maximum(v, lanes_in[k], out=v)
                # -- ExpLevelMax
                if exps[k] > r_exp[row]:
                    r_exp[row] = exps[k]
                if levels[k] > r_level[row]:
                    r_level[row] = levels[k]
            # Both NEW and CONTRIBUTE land here: a counted contribution.
            r_bitmap[other] &= ~mask
            tally[_AGGREGATED] += 1
            tally[_AGGREGATED + 1] += fl
            agg_wrow.append(job.job_index * MAX_WORKERS + w)
            agg_len.append(fl)
            # -- ResultEmit
            if cnt == nw:
                if parent is not None and not dn:
                    # a leaf: the partial sum goes up as one contributor of the parent's job
                    kind = 3
                    tally[_UP_PACKETS] += 1
                    tally[_UP_PACKETS + 1] += fl
                    out_up[len(out_k)] = (parent.worker_id, None)
                else:
                    kind = 0
                    tally[_RESULTS] += 1
                    tally[_RESULTS + 1] += fl
                staged[len(out_k)] = r_values[row]
                out_k.append(k)
                out_kind.append(kind)
                out_bitmap.append(r_bitmap[row])
                out_exp.append(r_exp[row])
                out_level.append(r_level[row])
                out_epoch.append(e)

        # -- ResultEmit: build the output packets (vectorized) ------------------------
        m = len(out_k)
        if m:
            ks = np.asarray(out_k)
            kinds = np.asarray(out_kind)
            oh = h[ks].copy()
            shadow_bits = oh["flags"] & _SHADOW
            oh["flags"] = _KIND_FLAGS[kinds] | shadow_bits
            oh["bitmap"] = out_bitmap
            oh["exp"] = out_exp
            oh["level"] = out_level
            oh["epoch"] = out_epoch
            for o, (up_worker, up_seq) in out_up.items():  # a leaf's packets to its parent
                oh["worker_id"][o] = up_worker
                if up_seq is not None:
                    oh["seq"][o] = up_seq
            out.length[:m] = pb
            rejects = np.flatnonzero(kinds == _REJECT_KIND)
            if rejects.size:  # the job's pool and our lanes, in a header without lanes
                pools = [jobs[j].pool_size for j in oh["job_id"][rejects].tolist()]
                oh["flags"][rejects] = _REJECT_FLAG  # not the request's SHADOW either
                oh["slot"][rejects] = np.asarray(pools) - 1
                oh["num_lanes"][rejects] = self.lanes
                out.length[rejects] = HEADER_BYTES
            out.data[:m, :HEADER_BYTES] = oh.view(np.uint8).reshape(m, HEADER_BYTES)
            # byte-swapped straight into the output rows (no big-endian temporary)
            out.data[:m, HEADER_BYTES:pb].view(LANE_DTYPE)[:] = staged[:m]
            dest = oh["worker_id"].astype(np.int32)  # kind 1, 2, 4: unicast to the sender
            dest[kinds == 0] = MULTICAST
            dest[kinds == 3] = PARENT
            out.dest[:m] = dest
            out.job_id[:m] = oh["job_id"]
            out.src[:m] = idx[ks]
            out.answer[:m] = False
            out.answer[answers] = True
            grp = [jobs[j].mcast_grp for j in oh["job_id"].tolist()]
            out.group[:m] = grp
            # RESULT_PACKETS counts copies on the wire: a multicast counts its replicas,
            # a pending reply is not a result.
            sizes = {g: self.group_size(g) for g in set(grp)}
            copies = [
                sizes[g] if kd == 0 else (1 if kd == 1 else 0)
                for g, kd in zip(grp, out_kind, strict=True)
            ]
            tally[_RESULT_PACKETS] += sum(copies)
            tally[_RESULT_PACKETS + 1] += sum(
                c * flen[k] for c, k in zip(copies, out_k, strict=True)
            )
        out.n = m

        self._flush(tally)
        if agg_wrow:
            wstats = self.counters.workers
            np.add.at(wstats[:, 0], agg_wrow, 1)
            np.add.at(wstats[:, 1], agg_wrow, agg_len)
        return m

    def _contribute_all(
        self,
        h: np.ndarray,
        lanes_in: np.ndarray,
        flen: list[int],
        tally: list[int],
        out_k: list[int],
        out_bitmap: list[int],
        out_exp: list[int],
        out_level: list[int],
        out_epoch: list[int],
        staged: np.ndarray,
    ) -> bool:
        """The stateful stages for a batch of valid packets in which every packet is a
        counted contribution (NEW or CONTRIBUTE) of one job without a parent, to slot copies
        whose sibling copies the batch does not touch, none completed more than once: per
        copy, the lanes reduced in one step (SUM wraps, so any order gives the same int32s),
        the registers written once, a RESULT for each copy the batch completes (at its last
        packet, in input order). Returns False, having changed nothing, for any other batch.
        """
        n = h.size
        job_ids = h["job_id"]
        job = self.tables.jobs.get(int(job_ids[0]))
        if job is None or (job_ids != job.job_id).any() or job.job_id in self.tables.parents:
            return False
        op = int(h["op"][0])
        flags = h["flags"]
        if op == _JOIN or (h["op"] != op).any() or (flags & _FROM_PARENT).any():
            return False
        nw, psize = job.num_workers, job.pool_size
        e = self.runs.job_epoch[job.job_index]
        w = h["worker_id"].astype(np.int64)
        q = h["seq"].astype(np.int64)
        s = h["slot"].astype(np.int64)
        shadow = (flags & _SHADOW) != 0
        if (
            (w >= nw).any()
            or (s >= psize).any()
            or ((q & (psize - 1)) != s).any()
            or (((q & psize) != 0) != shadow).any()
            or (h["epoch"] != e).any()
        ):
            return False
        rows = ((job.pool_base + s) << 1) + shadow
        order = np.argsort(rows, kind="stable")  # each copy's packets, in input order
        rs = rows[order]
        starts = np.flatnonzero(np.concatenate(([True], rs[1:] != rs[:-1])))
        qs = q[order]
        if (np.maximum.reduceat(qs, starts) != np.minimum.reduceat(qs, starts)).any():
            return False
        masks = np.bitwise_or.reduceat((1 << w)[order], starts).tolist()
        copies = rs[starts].tolist()
        counts = np.diff(np.append(starts, n)).tolist()
        if len({c >> 1 for c in copies}) != len(copies):
            return False  # both copies of a slot: a count clears bits in the other copy
        reg = self.registers
        r_count, r_epoch, r_seq, r_bitmap = reg.count, reg.epoch, reg.seq, reg.bitmap
        plan = []
        keep = plan.append
        for row, qr, mask, cnt_b in zip(copies, qs[starts].tolist(), masks, counts, strict=True):
            if mask.bit_count() != cnt_b:
                return False  # a worker twice: the second is a DUPLICATE
            cnt = r_count[row]
            new = not cnt or r_epoch[row] != e or qr == (r_seq[row] + 2 * psize) & _MASK32
            if not new and (qr != r_seq[row] or cnt >= nw or r_bitmap[row] & mask):
                return False  # STALE or DUPLICATE
            total = cnt_b if new else cnt + cnt_b
            if total > nw:
                return False  # counts past completion: DUPLICATEs
            keep((row, qr, mask, new, total))
        # -- LaneAggregate, ExpLevelMax: whole copies at once
        lanes = lanes_in[order]
        ufunc = np.add if op == _SUM else np.bitwise_or if op == _OR else np.maximum
        if len(set(counts)) == 1:  # as many packets for every copy: whole-row steps
            per = lanes.reshape(len(copies), counts[0], -1)
            red = per[:, 0].copy()
            for j in range(1, counts[0]):
                ufunc(red, per[:, j], out=red)  # int32: SUM wraps
        else:  # (reduceat along rows is several times slower)
            red = ufunc.reduceat(lanes, starts, axis=0, dtype=np.int32)
        exp_max = np.maximum.reduceat(h["exp"][order], starts).tolist()
        level_max = np.maximum.reduceat(h["level"][order], starts).tolist()
        last = order[starts + np.asarray(counts) - 1].tolist()  # each copy's last packet
        values = reg.values
        done: list[tuple[int, int]] = []  # (last packet, row) of each completed copy
        new_i, new_rows, old_i, old_rows = [], [], [], []
        r_down, r_exp, r_level = reg.down, reg.exp, reg.level
        for i, (row, qr, mask, new, total) in enumerate(plan):
            if new:
                r_seq[row] = qr
                r_epoch[row] = e
                r_down[row] = 0
                r_bitmap[row] = mask
                r_exp[row] = exp_max[i]
                r_level[row] = level_max[i]
                new_i.append(i)
                new_rows.append(row)
            else:
                r_bitmap[row] |= mask
                r_exp[row] = max(r_exp[row], exp_max[i])
                r_level[row] = max(r_level[row], level_max[i])
                old_i.append(i)
                old_rows.append(row)
            r_count[row] = total
            r_bitmap[row ^ 1] &= ~mask
            if total == nw:
                done.append((last[i], row))
        # the copies are distinct rows: one gather and one scatter each
        if new_rows:
            values[new_rows] = red[new_i]
        if old_rows:
            values[old_rows] = ufunc(values[old_rows], red[old_i])  # int32: SUM wraps
        tally[_AGGREGATED] += n
        tally[_AGGREGATED + 1] += sum(flen)
        # -- ResultEmit: the completed copies, in the order of their last packets
        done.sort()
        m0 = len(out_k)
        staged[m0 : m0 + len(done)] = values[[row for _, row in done]]
        done_k = [k for k, _ in done]
        tally[_RESULTS] += len(done)
        tally[_RESULTS + 1] += sum([flen[k] for k in done_k])
        out_k += done_k
        out_bitmap += [r_bitmap[row] for _, row in done]
        out_exp += [r_exp[row] for _, row in done]
        out_level += [r_level[row] for _, row in done]
        out_epoch += [e] * len(done)
        return True

    def _flush(self, tally: list[int]) -> None:
        """Add a batch's (packets, bytes) tallies, indexed 2 * Counter, to ``ina_stats``."""
        self.counters.stats += np.asarray(tally, dtype=np.int64).reshape(_NUM_COUNTERS, 2)


def lanes_of(payload: bytes) -> np.ndarray:
    """Native int32 lanes of an INA payload."""
    return np.frombuffer(payload, LANE_DTYPE, offset=HEADER_BYTES).astype(np.int32)


__all__ = ["LANE_BYTES", "MULTICAST", "PARENT", "Outputs", "Pipeline", "lanes_of"]

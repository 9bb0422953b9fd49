// join_run.p4: stage 4, JoinRun (pipeline.py): runs of a job, and which run a packet is of.

#ifndef INA_JOIN_RUN_P4
#define INA_JOIN_RUN_P4

// Every run of a job starts at seq 0, so without runs a second run would meet the first
// run's completed slot copies holding the same seqs and get the first run's sums back. A
// worker's first call therefore JOINs a run: op JOIN, its random 32-bit nonce in seq. Per
// job (index job_index) the switch keeps the current run's epoch, the bitmap and count of
// the workers that joined it, and per (job, worker) the worker's last nonce:
//   DUPLICATE   the nonce is the worker's stored one and its bit is set: a copy of a join
//               already counted; ResultEmit answers it by unicast, with RESULT if the run's
//               join is complete (count >= num_workers), else PENDING and the bitmap;
//   NEW         otherwise, if no run was joined yet (count 0), the last run's join was
//               complete, or the worker's bit is set (it restarted): a new run begins,
//               epoch + 1, bitmap = {worker}, count = 1;
//   CONTRIBUTE  otherwise: the worker joins the run being formed (bit set, count + 1).
// NEW and CONTRIBUTE store the nonce; the one that completes the join (count ==
// num_workers) leaves as RESULT to the job's multicast group. Every JOIN reply carries the
// run's epoch (ResultEmit writes meta.epoch into the header) and echoes exp, level and the
// lanes.
// REJECT: a worker's JOIN whose num_lanes is not P4_LANES or whose slot is not the job's last
// (pool_size - 1): the worker is configured with other lanes or another pool than the job;
// it is never counted, and ResultEmit tells the worker the job's values.
// A data packet must carry the job's current epoch, else it is from another run: STALE;
// except a packet of the run just before (epoch + 1 == the current one), which SlotState
// answers from a complete copy of that run and drops otherwise: a late worker of the last
// run gets its lost result although the others have started the next run.
// SlotState treats a slot copy written in an earlier epoch as unused. Installing a job
// zeroes its join_count (the control plane, ina/control/jobs.py), so its first JOIN starts a
// run; packets of clients that never JOIN carry epoch 0, the epoch of a job with no run.
//
// On a leaf (the job has a parent, JobLookup) the run is the parent's: the leaf joins it as
// one contributor once all its own workers have joined. A NEW local run does not count the
// epoch up; it clears up_joined. The JOIN that completes the local join goes up (ResultEmit:
// UP, as the leaf's worker id, with this JOIN's nonce, kept in up_nonce). The parent's JOIN
// RESULT carrying up_nonce is DOWN: the leaf adopts its epoch (job_epoch), sets up_joined
// and multicasts it to its workers. Until then a duplicate JOIN of the complete local join,
// or the parent's RESULT announced with another contributor's nonce, sends the leaf's JOIN
// up again (DUPLICATE with complete and not down: ResultEmit's UP): the parent answers a
// duplicate by unicast, so a lost JOIN or result in either direction is repaired by the
// workers' retransmissions. Any other reply from the parent is STALE.
control JoinRun(in ina_h ina,
                inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    @name(".job_epoch") @id(REGISTER_ID_JOB_EPOCH)
    register<epoch_t>(MAX_JOBS) job_epoch;
    @name(".join_bitmap") @id(REGISTER_ID_JOIN_BITMAP)
    register<bitmap_t>(MAX_JOBS) join_bitmap;
    @name(".join_count") @id(REGISTER_ID_JOIN_COUNT)
    register<slot_count_t>(MAX_JOBS) join_count;
    @name(".join_nonce") @id(REGISTER_ID_JOIN_NONCE)
    register<seq_t>(JOIN_NONCE_SIZE) join_nonce;
    @name(".up_nonce") @id(REGISTER_ID_UP_NONCE)
    register<seq_t>(MAX_JOBS) up_nonce;
    @name(".up_joined") @id(REGISTER_ID_UP_JOINED)
    register<truth_t>(MAX_JOBS) up_joined;

    apply {
        register_index_t job = (register_index_t) meta.job_index;
        job_epoch.read(meta.epoch, job);
        if (ina.op == OP_JOIN) {
            bitmap_t mask = (bitmap_t) 1 << ina.worker_id;
            bitmap_t bitmap;
            slot_count_t count;
            truth_t joined;
            join_bitmap.read(bitmap, job);
            join_count.read(count, job);
            up_joined.read(joined, job);
            up_nonce.read(meta.up_nonce, job);
            meta.down = joined != 0;
            bool formed = count >= meta.num_workers;  // every worker here has joined
            if (meta.from_parent) {
                if (!formed || meta.down || (ina.flags & FLAG_RESULT) == 0) {
                    meta.dropped = true;
                    meta.drop_reason = DROP_REASON_STALE;
                    mark_to_drop(standard_metadata);
                } else if (ina.seq == meta.up_nonce) {
                    meta.slot_action = slot_action_t.DOWN;
                    meta.epoch = ina.epoch;
                    job_epoch.write(job, meta.epoch);
                    up_joined.write(job, 1);
                    meta.down = true;
                    meta.complete = true;
                } else {
                    meta.slot_action = slot_action_t.DUPLICATE;
                    meta.complete = true;
                }
            } else if (ina.num_lanes != P4_LANES
                       || (pool_index_t) ina.slot + 1 != meta.pool_size) {
                meta.slot_action = slot_action_t.REJECT;
            } else {
                register_index_t cell = job * INA_MAX_WORKERS
                                        + (register_index_t) ina.worker_id;
                seq_t nonce;
                join_nonce.read(nonce, cell);
                if (nonce == ina.seq && (bitmap & mask) != 0) {
                    meta.slot_action = slot_action_t.DUPLICATE;
                    meta.complete = formed;
                } else {
                    if (count == 0 || formed || (bitmap & mask) != 0) {
                        meta.slot_action = slot_action_t.NEW;
                        if (meta.has_parent) {
                            up_joined.write(job, 0);  // the parent's answer brings the epoch
                            meta.down = false;
                        } else {
                            meta.epoch = meta.epoch + 1;  // mod 2^32
                            job_epoch.write(job, meta.epoch);
                        }
                        bitmap = mask;
                        count = 1;
                    } else {
                        meta.slot_action = slot_action_t.CONTRIBUTE;
                        bitmap = bitmap | mask;
                        count = count + 1;
                    }
                    join_nonce.write(cell, ina.seq);
                    join_bitmap.write(job, bitmap);
                    join_count.write(job, count);
                    meta.complete = count == meta.num_workers;
                    if (meta.complete && meta.has_parent) {
                        meta.up_nonce = ina.seq;
                        up_nonce.write(job, ina.seq);
                    }
                }
            }
            meta.count = count;
            meta.bitmap = bitmap;
            meta.exp = ina.exp;
            meta.level = ina.level;
        } else if (ina.epoch != meta.epoch) {
            // The run just before the current one: one of its workers may still wait for a
            // lost last result while the others have joined the next run. SlotState answers
            // it from a complete copy of its run (unicast, its own epoch), never counts it.
            if (!meta.from_parent && meta.epoch != 0 && ina.epoch + 1 == meta.epoch) {
                meta.previous_run = true;
                meta.epoch = ina.epoch;
            } else {
                meta.dropped = true;
                meta.drop_reason = DROP_REASON_STALE;
                mark_to_drop(standard_metadata);
            }
        }
    }
}

#endif  // INA_JOIN_RUN_P4

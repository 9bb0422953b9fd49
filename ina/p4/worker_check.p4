// worker_check.p4: stage 3, WorkerCheck (pipeline.py): is the sender and its slot in range?

#ifndef INA_WORKER_CHECK_P4
#define INA_WORKER_CHECK_P4

// worker_id must name a bit of the job's bitmap (< num_workers), else BAD_WORKER. For data
// packets (not JOIN, whose seq is a nonce), the slot and its copy must be the ones of the
// packet's seq, else BAD_SLOT: chunk seq of a job lives
// in slot seq % pool_size, copy (seq / pool_size) % 2 (the SHADOW flag). pool_size is a power
// of two (the control plane refuses others), so both are bit masks of seq. The worker is
// checked first, as in the switch model, so a packet wrong in both counts as BAD_WORKER.
// A parent's reply carries the parent-level worker id of a leaf, not one of this job's
// workers: only its slot is checked.
control WorkerCheck(in ina_h ina,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    apply {
        seq_t pool_size = (seq_t) meta.pool_size;
        bool seq_shadow = (ina.seq & pool_size) != 0;
        bool flag_shadow = (ina.flags & FLAG_SHADOW) != 0;
        if (!meta.from_parent && ina.worker_id >= meta.num_workers) {
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_BAD_WORKER;
            mark_to_drop(standard_metadata);
        } else if (ina.op != OP_JOIN
                   && (ina.slot >= meta.pool_size
                       || (ina.seq & (pool_size - 1)) != (seq_t) ina.slot
                       || seq_shadow != flag_shadow)) {
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_BAD_SLOT;
            mark_to_drop(standard_metadata);
        }
    }
}

#endif  // INA_WORKER_CHECK_P4

// slot_state.p4: stage 5, SlotState (pipeline.py): what this packet does to its slot copy.

#ifndef INA_SLOT_STATE_P4
#define INA_SLOT_STATE_P4

// Every slot of the pool has two shadow copies, rows (pool_base + slot) * 2 + shadow of each
// slot register; the SHADOW flag picks the copy (WorkerCheck made sure it is seq's copy).
// Chunk seq lives in slot seq % pool_size, copy (seq / pool_size) % 2, and a worker sends
// seq + pool_size only once it has the result of seq; so a copy's generations are exactly
// g, g + 2 * pool_size, g + 4 * pool_size, ... (mod 2^32). For its copy, the packet is:
//   NEW        if the copy is unused (count 0: any seq; installing a job resets its pool),
//              was written by an earlier run (slot_epoch != the run's epoch, JoinRun), or
//              the packet carries its next generation, seq == stored seq + 2 * pool_size;
//              it starts the aggregation (seq, bitmap = {worker}, count = 1; lanes written);
//   STALE      if its seq is any other than the copy's current one: dropped;
//   DUPLICATE  if the copy is complete (count >= num_workers: a late copy from a worker
//              whose bit was cleared when it moved on) or the worker's bit is set: answered
//              by ResultEmit, never added;
//   CONTRIBUTE otherwise: the worker's bit is set and counted (lanes combined).
// A packet of the previous run (JoinRun's previous_run) is a DUPLICATE if its copy is
// complete and still holds that run's seq, else STALE: it is answered, never added.
// NEW and CONTRIBUTE also clear the worker's bit in the OTHER copy (SwitchML): that copy's
// bitmap then shows which workers have not yet moved on from its generation.
//
// On a leaf (the job has a parent) a complete copy holds the leaf's partial sum until its
// parent's RESULT for it comes down (meta.from_parent): that RESULT, for the copy's seq in
// this run, is DOWN once (slot_down := 1; LaneAggregate stores the lanes, ExpLevelMax exp and
// level, so later duplicates are answered with the full result); any other reply from the
// parent (a PENDING, a second copy, another seq) is STALE. A DUPLICATE into a complete copy
// whose result has not come down makes ResultEmit send the partial sum up again.
//
// Outputs for the later stages: meta.row, slot_action, count and bitmap after the packet, and
// complete: for a counted contribution, "this one completed the slot" (count == num_workers,
// the single packet that triggers the multicast); for a duplicate, "the slot holds the full
// result" (count >= num_workers).
control SlotState(in ina_h ina,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    @name(".slot_seq") @id(REGISTER_ID_SLOT_SEQ)
    register<seq_t>(SLOT_REGISTER_SIZE) slot_seq;
    @name(".slot_bitmap") @id(REGISTER_ID_SLOT_BITMAP)
    register<bitmap_t>(SLOT_REGISTER_SIZE) slot_bitmap;
    @name(".slot_count") @id(REGISTER_ID_SLOT_COUNT)
    register<slot_count_t>(SLOT_REGISTER_SIZE) slot_count;
    @name(".slot_epoch") @id(REGISTER_ID_SLOT_EPOCH)
    register<epoch_t>(SLOT_REGISTER_SIZE) slot_epoch;
    @name(".slot_down") @id(REGISTER_ID_SLOT_DOWN)
    register<truth_t>(SLOT_REGISTER_SIZE) slot_down;

    apply {
        // Rows of this packet's copy and of the other copy of the same slot.
        register_index_t base = ((register_index_t) meta.pool_base
                                 + (register_index_t) ina.slot) << 1;
        register_index_t other;
        if ((ina.flags & FLAG_SHADOW) == 0) {
            meta.row = base;
            other = base + 1;
        } else {
            meta.row = base + 1;
            other = base;
        }
        bitmap_t mask = (bitmap_t) 1 << ina.worker_id;

        seq_t stored_seq;
        slot_count_t count;
        bitmap_t bitmap;
        epoch_t stored_epoch;
        slot_seq.read(stored_seq, meta.row);
        slot_count.read(count, meta.row);
        slot_bitmap.read(bitmap, meta.row);
        slot_epoch.read(stored_epoch, meta.row);
        truth_t down;
        slot_down.read(down, meta.row);
        meta.down = down != 0;
        seq_t generation_step = (seq_t) meta.pool_size << 1;  // 2 * pool_size

        if (meta.from_parent) {
            if ((ina.flags & FLAG_RESULT) != 0 && !meta.down && count >= meta.num_workers
                    && stored_epoch == meta.epoch && ina.seq == stored_seq) {
                meta.slot_action = slot_action_t.DOWN;
                slot_down.write(meta.row, 1);
                meta.down = true;
                meta.complete = true;
            } else {
                meta.slot_action = slot_action_t.STALE;
                meta.dropped = true;
                meta.drop_reason = DROP_REASON_STALE;
                mark_to_drop(standard_metadata);
            }
        // An unused copy, or one of an earlier run, takes any seq (WorkerCheck made it
        // consistent with slot and copy).
        // A packet of the previous run (JoinRun): only a complete copy of its run and seq
        // answers it (DUPLICATE); it never starts or joins an aggregation.
        } else if (meta.previous_run && (count < meta.num_workers
                || stored_epoch != meta.epoch || ina.seq != stored_seq)) {
            meta.slot_action = slot_action_t.STALE;
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_STALE;
            mark_to_drop(standard_metadata);
        } else if (meta.previous_run) {
            meta.slot_action = slot_action_t.DUPLICATE;
        } else if (count == 0 || stored_epoch != meta.epoch
                || ina.seq == stored_seq + generation_step) {  // mod 2^32
            meta.slot_action = slot_action_t.NEW;
            slot_seq.write(meta.row, ina.seq);
            slot_epoch.write(meta.row, meta.epoch);
            slot_down.write(meta.row, 0);
            meta.down = false;
            bitmap = mask;
            count = 1;
        } else if (ina.seq != stored_seq) {
            meta.slot_action = slot_action_t.STALE;
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_STALE;
            mark_to_drop(standard_metadata);
        } else if (count >= meta.num_workers || (bitmap & mask) != 0) {
            meta.slot_action = slot_action_t.DUPLICATE;
        } else {
            meta.slot_action = slot_action_t.CONTRIBUTE;
            bitmap = bitmap | mask;
            count = count + 1;
        }

        if (meta.slot_action == slot_action_t.NEW
                || meta.slot_action == slot_action_t.CONTRIBUTE) {
            slot_bitmap.write(meta.row, bitmap);
            slot_count.write(meta.row, count);
            bitmap_t other_bitmap;
            slot_bitmap.read(other_bitmap, other);
            slot_bitmap.write(other, other_bitmap & ~mask);
            meta.complete = count == meta.num_workers;
        } else if (meta.slot_action == slot_action_t.DUPLICATE) {
            meta.complete = count >= meta.num_workers;
        }
        meta.count = count;
        meta.bitmap = bitmap;
    }
}

#endif  // INA_SLOT_STATE_P4

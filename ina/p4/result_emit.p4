// result_emit.p4: stage 8, ResultEmit (pipeline.py): what leaves the switch, and where.

#ifndef INA_RESULT_EMIT_P4
#define INA_RESULT_EMIT_P4

// Runs for packets that passed SlotState (NEW, CONTRIBUTE or DUPLICATE), and for JOINs as
// JoinRun decided them (the same verdicts for the run's join instead of a slot copy):
//   NEW/CONTRIBUTE that completes the slot  RESULT to the job's multicast group (one copy
//                                           per worker; the egress addresses each copy);
//   NEW/CONTRIBUTE that does not             absorbed: dropped without a drop reason;
//   DUPLICATE into a complete slot           the stored RESULT, unicast back out of the
//                                           port it came in on;
//   DUPLICATE into an incomplete slot        PENDING, same way back, its own lanes unchanged
//                                           and the slot's bitmap, so that the worker can
//                                           name the workers still missing;
//   REJECT (a JOIN, JoinRun)                 the request's header, same way back, with
//                                           flags = REJECT, slot = the job's pool_size - 1
//                                           and num_lanes = P4_LANES (WorkerRewrite cuts
//                                           the lanes off), nothing else changed.
// Every reply is the request's INA header with: flags = RESULT or PENDING, plus the
// request's SHADOW bit (RETX is cleared); bitmap, exp and level = the slot copy's after this
// packet (for a JOIN: the join bitmap, the request's exp and level); epoch = the run's.
// version, op, worker_id (the sender's, also in multicast copies), job_id, slot, seq and
// num_lanes stay as the request had them.
//
// On a leaf (the job has a parent, JobLookup) two cases change:
//   a completed slot or run join that has not come down   UP: to the parent, out of
//       (the contribution that completes it, or a        up_port, flags = SHADOW only;
//       duplicate of it, or the parent's RESULT with      WorkerRewrite makes it contributor
//       another contributor's nonce)                      up_worker's (a JOIN: up_nonce in
//                                                         seq), after Stats has counted
//                                                         the sender's contribution;
//   DOWN (the parent's RESULT, taken in)                  RESULT to the job's multicast
//                                                         group, like a completion.
control ResultEmit(inout ina_h ina,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    apply {
        flags_t shadow = ina.flags & FLAG_SHADOW;
        if (meta.slot_action == slot_action_t.REJECT) {
            meta.reply = reply_t.REJECT;
            standard_metadata.egress_spec = standard_metadata.ingress_port;
            ina.flags = FLAG_REJECT;
            ina.slot = (slot_t) (meta.pool_size - 1);
            ina.num_lanes = P4_LANES;
        } else if (meta.slot_action != slot_action_t.DOWN && meta.has_parent && meta.complete
                && !meta.down) {
            meta.reply = reply_t.UP;
            standard_metadata.egress_spec = meta.up_port;
            ina.flags = shadow;
        } else if (meta.slot_action == slot_action_t.DUPLICATE) {
            standard_metadata.egress_spec = standard_metadata.ingress_port;
            if (meta.complete) {
                meta.reply = reply_t.RESULT_UNICAST;
                ina.flags = FLAG_RESULT | shadow;
            } else {
                meta.reply = reply_t.PENDING;
                ina.flags = FLAG_PENDING | shadow;
            }
        } else if (meta.complete) {
            meta.reply = reply_t.RESULT_MULTICAST;
            // Drop the original, replicate to the group: v1model multicasts when mcast_grp
            // is non-zero, whatever egress_spec says. A job installed with group 0 (not a
            // valid P4Runtime group) thus sends nothing, like the model's empty group,
            // instead of leaking the result out of port 0.
            mark_to_drop(standard_metadata);
            standard_metadata.mcast_grp = meta.mcast_grp;
            ina.flags = FLAG_RESULT | shadow;
        } else {
            meta.reply = reply_t.NONE;
            mark_to_drop(standard_metadata);
        }
        if (meta.reply != reply_t.NONE && meta.reply != reply_t.REJECT) {
            ina.bitmap = meta.bitmap;
            ina.exp = meta.exp;
            ina.level = meta.level;
            ina.epoch = meta.epoch;
        }
    }
}

#endif  // INA_RESULT_EMIT_P4

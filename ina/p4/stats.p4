// stats.p4: stage 9, Stats (pipeline.py): the aggregation counters, counted in ingress.

#ifndef INA_STATS_P4
#define INA_STATS_P4

// The counter arrays are declared at the top level because both pipelines count into
// ina_stats: the ingress here, the egress per result copy (EgressStats). Both count packets
// and bytes; v1model counts a packet's bytes as its frame length at ingress, which is what
// the switch model counts (INA payload + protocol.FRAME_OVERHEAD).

// ina_stats[c] for c in protocol.Counter (COUNTER_* in generated/constants_gen.p4).
@name(".ina_stats") @id(COUNTER_ID_INA_STATS)
counter(NUM_COUNTERS, CounterType.packets_and_bytes) ina_stats;

// worker_contributions[job_index * INA_MAX_WORKERS + worker_id]: contributions counted into
// a slot (NEW or CONTRIBUTE), per job and worker.
@name(".worker_contributions") @id(COUNTER_ID_WORKER_CONTRIBUTIONS)
counter(WORKER_COUNTER_SIZE, CounterType.packets_and_bytes) worker_contributions;

// Per INA packet: PACKETS_IN, and then exactly one of
//   a drop counter (COUNTER_DROP_FIRST + drop reason),
//   DUPLICATES, plus RETX_REPLIES (stored result sent again) or PENDING_REPLIES,
//   for a JOIN: JOINS, plus RUNS if it completed the run's join; JOIN_REJECTS if refused,
//   for data: AGGREGATED and the worker's worker_contributions cell, plus RESULTS if it
//   completed the slot (once per slot, however many copies leave),
//   for a parent's result taken in by a leaf (DOWN): RESULTS (data) or RUNS (JOIN),
// and UP_PACKETS for every packet a leaf sends to its parent (a completion, or a duplicate
// that sends the partial sum or run join up again); a leaf counts RESULTS and RUNS when
// they go down to its workers, so `result_packets = N x (results + runs) + retx_replies`
// holds on every switch of a lossless path.
// An absorbed contribution that does not complete its slot is counted, not dropped.
control Stats(in ina_h ina, in metadata_t meta) {
    apply {
        ina_stats.count(COUNTER_PACKETS_IN);
        if (meta.dropped) {
            ina_stats.count(COUNTER_DROP_FIRST + (counter_index_t) meta.drop_reason);
        } else if (meta.slot_action == slot_action_t.DOWN) {
            if (ina.op == OP_JOIN) {
                ina_stats.count(COUNTER_RUNS);
            } else {
                ina_stats.count(COUNTER_RESULTS);
            }
        } else if (meta.slot_action == slot_action_t.REJECT) {
            ina_stats.count(COUNTER_JOIN_REJECTS);
        } else if (meta.slot_action == slot_action_t.DUPLICATE) {
            ina_stats.count(COUNTER_DUPLICATES);
            if (meta.reply == reply_t.RESULT_UNICAST) {
                ina_stats.count(COUNTER_RETX_REPLIES);
            } else if (meta.reply == reply_t.PENDING) {
                ina_stats.count(COUNTER_PENDING_REPLIES);
            }
        } else if (ina.op == OP_JOIN) {
            ina_stats.count(COUNTER_JOINS);
            if (meta.reply == reply_t.RESULT_MULTICAST) {
                ina_stats.count(COUNTER_RUNS);
            }
        } else {
            ina_stats.count(COUNTER_AGGREGATED);
            worker_contributions.count((counter_index_t) meta.job_index * INA_MAX_WORKERS
                                       + (counter_index_t) ina.worker_id);
            if (meta.reply == reply_t.RESULT_MULTICAST) {
                ina_stats.count(COUNTER_RESULTS);
            }
        }
        if (meta.reply == reply_t.UP) {
            ina_stats.count(COUNTER_UP_PACKETS);
        }
    }
}

#endif  // INA_STATS_P4

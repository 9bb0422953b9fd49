// ina.p4: the INA in-network aggregation switch for BMv2 (v1model).
//
// Workers send int32 lanes to the switch (UDP to INA_UDP_PORT); the switch adds up the
// packets of each slot in registers and sends the aggregate to every worker of the job.
// ina/switch_model/pipeline.py is the executable specification of this program: same stages
// under the same names, same packets out byte for byte, same counters. docs/p4.md describes
// the structure, each stage and the metadata that links them.

#include <core.p4>
#include <v1model.p4>

#include "generated/ids_gen.p4"
#include "types.p4"
#include "configuration.p4"
#include "headers.p4"
#include "parser.p4"
#include "actions.p4"
#include "validate.p4"
#include "job_lookup.p4"
#include "worker_check.p4"
#include "join_run.p4"
#include "slot_state.p4"
#include "lane_aggregate.p4"
#include "exp_level_max.p4"
#include "result_emit.p4"
#include "stats.p4"
#include "forward.p4"
#include "worker_rewrite.p4"
#include "egress_stats.p4"

control InaIngress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    Validate() validate;
    JobLookup() job_lookup;
    WorkerCheck() worker_check;
    JoinRun() join_run;
    SlotState() slot_state;
    LaneAggregate() lane_aggregate;
    ExpLevelMax() exp_level_max;
    ResultEmit() result_emit;
    Stats() stats;
    Forward() forward;

    apply {
        if (hdr.udp.isValid() && hdr.udp.dst_port == INA_UDP_PORT) {
            // 1. Validate: version, op, flags, UDP length, lane count, parse errors;
            //    else drop MALFORMED.
            validate.apply(hdr, meta, standard_metadata);
            // 2. JobLookup: job_table on job_id; a miss drops UNKNOWN_JOB. parent_table:
            //    the job's parent switch on a leaf (a parent's reply without one: MALFORMED).
            if (!meta.dropped) {
                job_lookup.apply(hdr.ina, meta, standard_metadata);
            }
            // 3. WorkerCheck: worker_id < num_workers (BAD_WORKER); for data, slot and
            //    SHADOW copy are the ones of seq (BAD_SLOT).
            if (!meta.dropped) {
                worker_check.apply(hdr.ina, meta, standard_metadata);
            }
            // 4. JoinRun: a JOIN joins a run of the job (NEW run / CONTRIBUTE / DUPLICATE);
            //    a data packet must carry the run's epoch (else STALE).
            if (!meta.dropped) {
                join_run.apply(hdr.ina, meta, standard_metadata);
            }
            bool data = hdr.ina.op != OP_JOIN;
            // 5. SlotState: NEW / STALE (drop) / DUPLICATE / CONTRIBUTE for the slot copy.
            if (!meta.dropped && data) {
                slot_state.apply(hdr.ina, meta, standard_metadata);
            }
            if (!meta.dropped) {
                if (data) {
                    // 6. LaneAggregate: write, combine (SUM/OR/MAX) or read the lanes.
                    lane_aggregate.apply(hdr.lanes, meta.row, hdr.ina.op, meta.slot_action,
                                         meta.complete);
                    // 7. ExpLevelMax: MAX-combine exp and level into the slot copy.
                    exp_level_max.apply(hdr.ina, meta);
                }
                // 8. ResultEmit: multicast a completed slot's (or run join's) result, answer
                //    a duplicate by unicast (stored result or PENDING), drop an absorbed one;
                //    on a leaf, send a completed slot up to the parent instead, and multicast
                //    the parent's result when it comes down.
                result_emit.apply(hdr.ina, meta, standard_metadata);
            }
            // 9. Stats: PACKETS_IN and what happened to the packet.
            stats.apply(hdr.ina, meta);
        } else {
            // Not INA: L2 forwarding on the destination MAC.
            forward.apply(hdr.ethernet, standard_metadata);
        }
    }
}

control InaEgress(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    WorkerRewrite() worker_rewrite;
    EgressStats() egress_stats;

    apply {
        if (meta.reply != reply_t.NONE) {
            // 1. WorkerRewrite: address this copy to its worker (worker_table); a copy for a
            //    worker without an entry is dropped; a leaf's UP packet to its parent.
            worker_rewrite.apply(hdr, meta, standard_metadata);
            // 2. EgressStats: RESULT_PACKETS, one per result copy that leaves.
            egress_stats.apply(meta);
        }
    }
}

V1Switch(
    InaParser(),
    InaVerifyChecksum(),
    InaIngress(),
    InaEgress(),
    InaComputeChecksum(),
    InaDeparser()
) main;

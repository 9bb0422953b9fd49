// egress_stats.p4: the part of Stats (pipeline.py) that only the egress can count.

#ifndef INA_EGRESS_STATS_P4
#define INA_EGRESS_STATS_P4

// RESULT_PACKETS counts result copies on the wire: every multicast replica and every unicast
// RETX reply that WorkerRewrite addressed (a copy whose worker has no worker_table entry is
// dropped there and does not count). PENDING replies are not results. The ingress cannot
// count replicas: only the replication engine knows how many a group makes.
control EgressStats(in metadata_t meta) {
    apply {
        if (meta.worker_found && (meta.reply == reply_t.RESULT_MULTICAST
                                  || meta.reply == reply_t.RESULT_UNICAST)) {
            ina_stats.count(COUNTER_RESULT_PACKETS);
        }
    }
}

#endif  // INA_EGRESS_STATS_P4

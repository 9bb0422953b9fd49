// job_lookup.p4: stage 2, JobLookup (pipeline.py): which job the packet belongs to.

#ifndef INA_JOB_LOOKUP_P4
#define INA_JOB_LOOKUP_P4

// job_table: job_id -> set_job(job_index, num_workers, pool_base, pool_size, mcast_grp),
// installed by the control plane (ina/control/jobs.py). A miss drops UNKNOWN_JOB; so does an
// entry whose action is `drop`.
// parent_table: job_id -> set_parent(worker_id, port, mac, ip, udp_port) on a leaf switch of
// a hierarchical job: the job's completed slots (and run joins) go up to the parent switch as
// contributor `worker_id` of the same job there, and the parent's results (packets with
// RESULT or PENDING, meta.from_parent) come back down. A job without an entry (no_parent)
// sends its results to its own workers, and a parent's reply for it is MALFORMED.
control JobLookup(in ina_h ina,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    @name(".set_job") @id(ACTION_ID_SET_JOB)
    action set_job(job_index_t job_index,
                   worker_count_t num_workers,
                   pool_index_t pool_base,
                   pool_index_t pool_size,
                   mcast_grp_t mcast_grp) {
        meta.job_found = true;
        meta.job_index = job_index;
        meta.num_workers = num_workers;
        meta.pool_base = pool_base;
        meta.pool_size = pool_size;
        meta.mcast_grp = mcast_grp;
    }

    @name(".job_table") @id(TABLE_ID_JOB_TABLE)
    table job_table {
        key = {
            ina.job_id : exact @name("job_id");
        }
        actions = {
            set_job;
            drop(standard_metadata);
        }
        const default_action = drop(standard_metadata);
        size = MAX_JOBS;
    }

    @name(".set_parent") @id(ACTION_ID_SET_PARENT)
    action set_parent(worker_id_t worker_id,
                      port_t port,
                      mac_addr_t mac,
                      ipv4_addr_t ip,
                      udp_port_t udp_port) {
        meta.has_parent = true;
        meta.up_worker = worker_id;
        meta.up_port = port;
        meta.up_mac = mac;
        meta.up_ip = ip;
        meta.up_udp_port = udp_port;
    }

    @name(".no_parent") @id(ACTION_ID_NO_PARENT)
    action no_parent() {
        meta.has_parent = false;
    }

    @name(".parent_table") @id(TABLE_ID_PARENT_TABLE)
    table parent_table {
        key = {
            ina.job_id : exact @name("job_id");
        }
        actions = {
            set_parent;
            no_parent;
        }
        const default_action = no_parent();
        size = MAX_JOBS;
    }

    apply {
        job_table.apply();
        if (!meta.job_found) {
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_UNKNOWN_JOB;
        } else {
            parent_table.apply();
            if (meta.from_parent && !meta.has_parent) {
                meta.dropped = true;
                meta.drop_reason = DROP_REASON_MALFORMED;
                mark_to_drop(standard_metadata);
            }
        }
    }
}

#endif  // INA_JOB_LOOKUP_P4

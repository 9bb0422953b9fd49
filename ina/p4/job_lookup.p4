// job_lookup.p4: stage 2, JobLookup (pipeline.py): which job the packet belongs to.

#ifndef INA_JOB_LOOKUP_P4
#define INA_JOB_LOOKUP_P4

// job_table: job_id -> set_job(job_index, num_workers, pool_base, pool_size, mcast_grp),
// installed by the control plane (ina/control/jobs.py). A miss drops UNKNOWN_JOB; so does an
// entry whose action is `drop`.
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

    apply {
        job_table.apply();
        if (!meta.job_found) {
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_UNKNOWN_JOB;
        }
    }
}

#endif  // INA_JOB_LOOKUP_P4

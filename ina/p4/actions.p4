// actions.p4: actions shared by several controls.

#ifndef INA_ACTIONS_P4
#define INA_ACTIONS_P4

// `drop` is shared by every table whose miss (or an explicit entry) means "drop": job_table,
// worker_table and forward_table. Declared once at the top level so that P4Info has a single
// `drop` action (ACTION_ID_DROP) that all three tables reference.
@name(".drop") @id(ACTION_ID_DROP)
action drop(inout standard_metadata_t standard_metadata) {
    mark_to_drop(standard_metadata);
}

#endif  // INA_ACTIONS_P4

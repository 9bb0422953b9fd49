// exp_level_max.p4: stage 7, ExpLevelMax (pipeline.py): the agreed exponent and level.

#ifndef INA_EXP_LEVEL_MAX_P4
#define INA_EXP_LEVEL_MAX_P4

// Whatever the op, `exp` (the biased exponent of the workers' common scale) and `level` (the
// compression level the workers agree on, DC2) are MAX-combined per slot copy, as unsigned
// bytes: a NEW packet (or a parent's result coming DOWN to a leaf) stores its own, a
// CONTRIBUTE keeps the larger, and a DUPLICATE reads the stored ones for its reply. meta.exp
// and meta.level are what the reply carries.
control ExpLevelMax(in ina_h ina, inout metadata_t meta) {
    @name(".slot_exp") @id(REGISTER_ID_SLOT_EXP)
    register<exp_t>(SLOT_REGISTER_SIZE) slot_exp;
    @name(".slot_level") @id(REGISTER_ID_SLOT_LEVEL)
    register<level_t>(SLOT_REGISTER_SIZE) slot_level;

    apply {
        if (meta.slot_action == slot_action_t.NEW || meta.slot_action == slot_action_t.DOWN) {
            meta.exp = ina.exp;
            meta.level = ina.level;
            slot_exp.write(meta.row, meta.exp);
            slot_level.write(meta.row, meta.level);
        } else if (meta.slot_action == slot_action_t.CONTRIBUTE) {
            slot_exp.read(meta.exp, meta.row);
            slot_level.read(meta.level, meta.row);
            if (ina.exp > meta.exp) {
                meta.exp = ina.exp;
            }
            if (ina.level > meta.level) {
                meta.level = ina.level;
            }
            slot_exp.write(meta.row, meta.exp);
            slot_level.write(meta.row, meta.level);
        } else if (meta.slot_action == slot_action_t.DUPLICATE) {
            slot_exp.read(meta.exp, meta.row);
            slot_level.read(meta.level, meta.row);
        }
    }
}

#endif  // INA_EXP_LEVEL_MAX_P4

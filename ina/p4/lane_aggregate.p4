// lane_aggregate.p4: stage 6, LaneAggregate (pipeline.py): the lanes and their registers.

#ifndef INA_LANE_AGGREGATE_P4
#define INA_LANE_AGGREGATE_P4

// One register per lane (slot_lane_0 .. slot_lane_{P4_LANES-1}), rows like every slot
// register. Per SlotState's verdict, on every lane at once:
//   NEW, DOWN              write the packet's lanes into the copy (DOWN: a leaf stores its
//                          parent's result over its partial sum);
//   CONTRIBUTE             combine by the packet's op (SUM: int32 add with wrap-around, OR:
//                          bitwise or, MAX: signed max), store, and leave the new value in
//                          the packet (it becomes the result if this completes the slot);
//   DUPLICATE, complete    read the stored result into the packet (unicast reply; on a
//                          leaf whose result has not come down: the partial sum, sent up);
//   DUPLICATE, incomplete  nothing: the PENDING reply carries the packet's own lanes.
// P4 has no loops: the registers and the per-lane actions are generated, unrolled, from
// ina/protocol.py (generated/lanes_gen.p4, by `python -m ina.p4gen`). Validate admits only
// OP_SUM, OP_OR and OP_MAX, so anything but SUM or OR is MAX, as in the switch model.
control LaneAggregate(inout ina_lanes_h lanes,
                      in register_index_t row,
                      in op_t op,
                      in slot_action_t slot_action,
                      in bool complete) {
#include "generated/lanes_gen.p4"

    apply {
        if (slot_action == slot_action_t.NEW || slot_action == slot_action_t.DOWN) {
            lanes_write();
        } else if (slot_action == slot_action_t.CONTRIBUTE) {
            if (op == OP_SUM) {
                lanes_sum();
            } else if (op == OP_OR) {
                lanes_or();
            } else {
                lanes_max();
            }
        } else if (slot_action == slot_action_t.DUPLICATE && complete) {
            lanes_read();
        }
    }
}

#endif  // INA_LANE_AGGREGATE_P4

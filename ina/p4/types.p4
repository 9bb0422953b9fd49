// types.p4: a name for every width the program uses, the internal decision enums, and (via
// generated/constants_gen.p4) the protocol's field types and constants from ina/protocol.py.

#ifndef INA_TYPES_P4
#define INA_TYPES_P4

// -- Standard headers ------------------------------------------------------------------------
typedef bit<48> mac_addr_t;
typedef bit<16> ether_type_t;
typedef bit<32> ipv4_addr_t;
typedef bit<8>  ip_protocol_t;
typedef bit<16> udp_port_t;
typedef bit<16> packet_length_t;  // IPv4 total length, UDP length, byte counts inside them

const ether_type_t  ETHERTYPE_IPV4 = 0x0800;
const bit<4>        IPV4_IHL_NO_OPTIONS = 5;  // 5 x 32-bit words: INA packets carry no options
const ip_protocol_t IP_PROTOCOL_UDP = 17;
const packet_length_t UDP_HEADER_BYTES = 8;

// -- Switch-side widths ----------------------------------------------------------------------
typedef bit<9>  port_t;            // v1model ingress_port / egress_spec
typedef bit<16> mcast_grp_t;       // v1model mcast_grp, one per job
typedef bit<16> replication_id_t;  // v1model egress_rid: the worker id of a multicast copy
typedef bit<8>  job_index_t;       // dense job number for per-job counters, < MAX_JOBS
typedef bit<8>  worker_count_t;    // workers of a job, <= INA_MAX_WORKERS
typedef bit<16> pool_index_t;      // slot number in the switch's pool (pool_base, pool_size)
typedef bit<8>  slot_count_t;      // contributions counted in a slot copy, <= worker_count_t
typedef bit<32> register_index_t;  // v1model register index: (pool_base + slot) * 2 + shadow
typedef bit<32> counter_index_t;   // v1model counter index
typedef bit<8>  drop_reason_t;     // DropReason
typedef bit<8>  truth_t;           // a yes/no register cell (0 or 1): slot_down, up_joined

// -- Internal decisions (metadata only, never on the wire) -----------------------------------

// SlotState's verdict on a packet for its slot copy (ina/switch_model/pipeline.py, stage 5),
// and JoinRun's on a JOIN for its job's run join (stage 4): the same outcomes, and REJECT.
enum bit<3> slot_action_t {
    NONE       = 0,  // not decided: the packet was dropped before SlotState
    NEW        = 1,  // first contribution of a newer generation: lanes are written
    STALE      = 2,  // older generation than the copy's: dropped
    DUPLICATE  = 3,  // this worker counted already: answered, never added again
    CONTRIBUTE = 4,  // a new worker for the current generation: lanes are combined
    DOWN       = 5,  // a leaf: its parent's result for the copy (or run join) is taken in
    REJECT     = 6   // a JOIN whose pool or lanes are not the job's: refused, never counted
}

// What ResultEmit sends, and what the egress does with each copy.
enum bit<3> reply_t {
    NONE             = 0,  // nothing leaves (contribution absorbed, or dropped)
    RESULT_MULTICAST = 1,  // completing contribution: RESULT to the job's multicast group
    RESULT_UNICAST   = 2,  // duplicate into a complete slot: stored RESULT to its sender
    PENDING          = 3,  // duplicate into an incomplete slot: PENDING to its sender
    UP               = 4,  // a leaf's partial sum (or run join) to its parent switch
    REJECT           = 5   // a refused JOIN: the header alone, to its sender
}

#include "generated/constants_gen.p4"

#endif  // INA_TYPES_P4

// headers.p4: the packet headers and the per-packet metadata.
//
// An INA packet is Ethernet / IPv4 (no options) / UDP to INA_UDP_PORT / ina_h / ina_lanes_h.
// ina_h and ina_lanes_h are generated from ina/protocol.py (generated/headers_gen.p4):
//
//      0                   1                   2                   3
//      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//     +---------------+---------------+---------------+---------------+
//     |    version    |      op       |     flags     |   worker_id   |
//     +---------------+---------------+---------------+---------------+
//     |            job_id             |             slot              |
//     +-------------------------------+-------------------------------+
//     |                              seq                              |
//     +---------------+---------------+-------------------------------+
//     |      exp      |     level     |           num_lanes           |
//     +---------------+---------------+-------------------------------+
//     |                            bitmap                             |
//     +---------------------------------------------------------------+
//     |                             epoch                             |
//     +---------------------------------------------------------------+
//     |                lane_0 ... lane_{P4_LANES-1} (int32)           |
//     +---------------------------------------------------------------+

#ifndef INA_HEADERS_P4
#define INA_HEADERS_P4

header ethernet_h {
    mac_addr_t   dst_addr;
    mac_addr_t   src_addr;
    ether_type_t ether_type;
}

header ipv4_h {
    bit<4>          version;
    bit<4>          ihl;
    bit<8>          diffserv;
    packet_length_t total_len;
    bit<16>         identification;
    bit<3>          flags;
    bit<13>         frag_offset;
    bit<8>          ttl;
    ip_protocol_t   protocol;
    bit<16>         hdr_checksum;
    ipv4_addr_t     src_addr;
    ipv4_addr_t     dst_addr;
}

header udp_h {
    udp_port_t      src_port;
    udp_port_t      dst_port;
    packet_length_t length;
    bit<16>         checksum;
}

#include "generated/headers_gen.p4"

struct headers_t {
    ethernet_h  ethernet;
    ipv4_h      ipv4;
    udp_h       udp;
    ina_h       ina;
    ina_lanes_h lanes;
}

// Per-packet metadata. v1model carries user metadata from ingress to egress, and the packet
// replication engine copies it into every multicast replica: the egress reads `reply` and
// the job's fields that ingress set (see docs/p4.md, "Metadata").
struct metadata_t {
    // Set by any ingress stage that rejects the packet; Stats counts the reason.
    bool             dropped;
    drop_reason_t    drop_reason;

    // Validate: RESULT or PENDING is set, so this is a parent switch's reply to a leaf.
    bool             from_parent;

    // JobLookup: the job_table entry (action set_job).
    bool             job_found;
    job_index_t      job_index;
    worker_count_t   num_workers;
    pool_index_t     pool_base;
    pool_index_t     pool_size;
    mcast_grp_t      mcast_grp;
    // JobLookup: the parent_table entry (action set_parent): this switch is a leaf of the
    // job, a contributor `up_worker` of the same job on its parent, reached out of up_port.
    bool             has_parent;
    worker_id_t      up_worker;
    port_t           up_port;
    mac_addr_t       up_mac;
    ipv4_addr_t      up_ip;
    udp_port_t       up_udp_port;

    // SlotState: which register row, what the packet does to it, and the slot copy after it.
    register_index_t row;          // (pool_base + slot) * 2 + shadow
    slot_action_t    slot_action;
    slot_count_t     count;        // contributions in the copy after this packet
    bitmap_t         bitmap;       // workers in the copy after this packet
    bool             complete;     // the copy holds the full aggregate (see SlotState)
    bool             down;         // a leaf's copy (or run join) holds its parent's result

    // JoinRun: the job's current run (after a JOIN that starts one, the new run), and on a
    // leaf the nonce of the run join it sent up.
    epoch_t          epoch;
    seq_t            up_nonce;
    // JoinRun: a data packet of the run before the current one (meta.epoch is then its
    // epoch): SlotState only answers it from a complete copy of that run.
    bool             previous_run;

    // ExpLevelMax: the copy's exponent and level after this packet.
    exp_t            exp;
    level_t          level;

    // ResultEmit -> egress: what leaves, and for which worker each copy is.
    reply_t          reply;
    worker_id_t      dest_worker;  // egress: worker_table key (docs/p4.md, "Metadata")
    bool             worker_found; // egress: worker_table had an address for dest_worker
}

#endif  // INA_HEADERS_P4

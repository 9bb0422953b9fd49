// configuration.p4: the sizes of the program, each with its reason.
//
// ina/p4/entities.py holds the same numbers for the control plane and the switch model;
// tests/test_p4_generated.py checks that both agree.

#ifndef INA_CONFIGURATION_P4
#define INA_CONFIGURATION_P4

// Lanes per packet (protocol.P4_LANES). Every lane costs one register read and one write per
// packet, and BMv2's single ingress thread is the bottleneck: a SwitchML-like program ran at
// about 20,000 packets/s with 32 lanes against 13,000 with 64 (docs of record, DESIGN.md).
// 32 lanes also keep a packet (190 bytes on the wire) far below any MTU.
const num_lanes_t P4_LANES = 32;

// Slots shared by all jobs (entities.POOL_SLOTS). A worker keeps at most pool_size packets in
// flight, so the pool bounds the window: 1024 slots x 128 bytes = 128 KiB in flight, far more
// than BMv2 (~20k packets/s) drains in a round trip, while 37 registers x 2048 cells stay
// small for BMv2 to allocate and for a P4Runtime read of a whole register.
const bit<32> POOL_SLOTS = 1024;

// Every slot has two shadow copies (SwitchML), selected by the SHADOW flag: a worker sends
// into one copy while the other still serves retransmitted results of the previous chunk.
const bit<32> SLOT_REGISTER_SIZE = POOL_SLOTS * 2;

// Jobs installed at once (entities.MAX_JOBS): job_table size and the job_index range that
// sizes the per-worker counters. 64 jobs x 16 slots each still fit the pool.
const bit<32> MAX_JOBS = 64;

// JoinRun keeps each worker's last JOIN nonce: one cell per (job_index, worker_id).
const bit<32> JOIN_NONCE_SIZE = MAX_JOBS * INA_MAX_WORKERS;

// One worker_table entry per (job, worker): every job may have INA_MAX_WORKERS workers (the
// width of the slot bitmap).
const bit<32> WORKER_TABLE_SIZE = MAX_JOBS * INA_MAX_WORKERS;

// worker_contributions has one cell per (job_index, worker_id): job_index * 32 + worker_id.
const bit<32> WORKER_COUNTER_SIZE = MAX_JOBS * INA_MAX_WORKERS;

// L2 entries for non-INA traffic (entities.FORWARD_TABLE_SIZE): one per host MAC; a Mininet
// topology has tens of hosts, 1024 leaves room without costing BMv2 anything.
const bit<32> FORWARD_TABLE_SIZE = 1024;

// Byte length of a valid INA datagram (UDP header + INA header + P4_LANES lanes): the only
// UDP length Validate accepts, like the switch model's `lengths == payload_bytes`.
const packet_length_t INA_UDP_LENGTH =
    UDP_HEADER_BYTES + INA_HEADER_BYTES + INA_LANE_BYTES * (packet_length_t) P4_LANES;

// A REJECT carries the INA header alone: its UDP length, and its frame (Ethernet + IPv4 +
// UDP + INA header), to which WorkerRewrite truncates it.
const packet_length_t INA_REJECT_UDP_LENGTH = UDP_HEADER_BYTES + INA_HEADER_BYTES;
const bit<32> INA_REJECT_FRAME_BYTES = 14 + 20 + (bit<32>) INA_REJECT_UDP_LENGTH;
#endif  // INA_CONFIGURATION_P4

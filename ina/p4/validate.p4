// validate.p4: stage 1, Validate (pipeline.py): is this a well-formed INA request?

#ifndef INA_VALIDATE_P4
#define INA_VALIDATE_P4

// An INA packet (UDP to INA_UDP_PORT) is MALFORMED unless all of these hold, exactly the
// switch model's conditions:
//   - it parsed whole: INA header and all P4_LANES lanes present (no parser error);
//   - its UDP datagram is exactly one INA payload long (UDP length == INA_UDP_LENGTH);
//   - version == INA_VERSION and OP_SUM <= op <= OP_JOIN;
//   - num_lanes <= P4_LANES, and no REJECT flag (only switches send REJECT);
// or it is a worker's JOIN (no RESULT, PENDING or REJECT) exactly as long as the num_lanes
// lanes it says it has, num_lanes != P4_LANES: a worker configured with other lanes, which
// JoinRun refuses with REJECT so that the worker learns why. Its length is the UDP length
// when the packet parsed whole (longer than a P4_LANES packet), else the bytes there were
// (PacketTooShort), as the switch model's frame parser measures it.
// RESULT or PENDING marks a reply from a parent switch (meta.from_parent): JobLookup drops
// it as MALFORMED unless the job has a parent here (hierarchical aggregation).
control Validate(in headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        bool parsed = standard_metadata.parser_error == error.NoError
                      && hdr.ina.isValid() && hdr.lanes.isValid();
        // Only read the INA header when it was extracted (its fields are undefined otherwise).
        bool well_formed = false;
        if (parsed) {
            well_formed = hdr.udp.length == INA_UDP_LENGTH
                          && hdr.ina.version == INA_VERSION
                          && hdr.ina.op >= OP_SUM && hdr.ina.op <= OP_JOIN
                          && hdr.ina.num_lanes <= P4_LANES
                          && (hdr.ina.flags & FLAG_REJECT) == 0;
            meta.from_parent = (hdr.ina.flags & (FLAG_RESULT | FLAG_PENDING)) != 0;
        }
        if (hdr.ina.isValid() && (parsed || standard_metadata.parser_error == error.PacketTooShort)
                && hdr.ina.version == INA_VERSION && hdr.ina.op == OP_JOIN
                && (hdr.ina.flags & (FLAG_RESULT | FLAG_PENDING | FLAG_REJECT)) == 0
                && hdr.ina.num_lanes != P4_LANES) {
            bit<32> length;  // of the INA payload
            if (parsed) {
                length = (bit<32>) (hdr.udp.length - UDP_HEADER_BYTES);
            } else {
                length = standard_metadata.packet_length - 14 - 20 - (bit<32>) UDP_HEADER_BYTES;
            }
            if (length == (bit<32>) INA_HEADER_BYTES
                          + (bit<32>) INA_LANE_BYTES * (bit<32>) hdr.ina.num_lanes) {
                well_formed = true;
                meta.from_parent = false;
            }
        }
        if (!well_formed) {
            meta.dropped = true;
            meta.drop_reason = DROP_REASON_MALFORMED;
            mark_to_drop(standard_metadata);
        }
    }
}

#endif  // INA_VALIDATE_P4

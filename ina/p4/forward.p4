// forward.p4: ingress, Forward: plain L2 forwarding of everything that is not INA.

#ifndef INA_FORWARD_P4
#define INA_FORWARD_P4

// forward_table: destination MAC -> output port, so that hosts reach each other (ping, ARP
// replies, control traffic). There is no flooding: a topology installs one entry per host
// MAC and gives hosts static ARP entries. A miss drops.
control Forward(in ethernet_h ethernet, inout standard_metadata_t standard_metadata) {
    @name(".forward") @id(ACTION_ID_FORWARD)
    action forward(port_t port) {
        standard_metadata.egress_spec = port;
    }

    @name(".forward_table") @id(TABLE_ID_FORWARD_TABLE)
    table forward_table {
        key = {
            ethernet.dst_addr : exact @name("dst_mac");
        }
        actions = {
            forward;
            drop(standard_metadata);
        }
        const default_action = drop(standard_metadata);
        size = FORWARD_TABLE_SIZE;
    }

    apply {
        forward_table.apply();
    }
}

#endif  // INA_FORWARD_P4

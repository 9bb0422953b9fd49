// worker_rewrite.p4: egress, WorkerRewrite: address each reply copy to its worker.

#ifndef INA_WORKER_REWRITE_P4
#define INA_WORKER_REWRITE_P4

// Which worker a copy is for (the worker_table key `worker_id`):
//   a multicast RESULT replica: its replication id, egress_rid; the control plane builds each
//     job's multicast group with one replica per worker, rid = worker id (ina/control/jobs.py);
//   a unicast reply (RETX result or PENDING): the requester, the header's worker_id.
// The header's worker_id itself is never rewritten: every copy carries the sender's, as in the
// switch model's output.
//
// set_worker addresses the copy from the switch to the worker: the switch's own addresses are
// the request's destination (what the workers sent to), so source MAC and IP become the old
// destination ones and the destination the worker's; the UDP source port becomes
// INA_UDP_PORT and the UDP checksum 0 (none). InaComputeChecksum then fixes the IPv4 checksum.
// TTL, identification and the other IPv4 fields are the request's. A REJECT leaves as the
// headers alone: lengths set for the INA header, the lanes (and whatever the request carried
// past its headers) cut off.
// A leaf's packet UP to its parent is addressed the same way from the parent_table entry
// that JobLookup read (meta.up_mac, up_ip, up_udp_port), without worker_table, and becomes
// the parent's worker up_worker's (a JOIN also carries the nonce the leaf joined with).
control WorkerRewrite(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @name(".set_worker") @id(ACTION_ID_SET_WORKER)
    action set_worker(mac_addr_t mac, ipv4_addr_t ip, udp_port_t udp_port) {
        meta.worker_found = true;
        hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
        hdr.ethernet.dst_addr = mac;
        hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
        hdr.ipv4.dst_addr = ip;
        hdr.udp.src_port = INA_UDP_PORT;
        hdr.udp.dst_port = udp_port;
        hdr.udp.checksum = 0;
    }

    @name(".worker_table") @id(TABLE_ID_WORKER_TABLE)
    table worker_table {
        key = {
            hdr.ina.job_id   : exact @name("job_id");
            meta.dest_worker : exact @name("worker_id");
        }
        actions = {
            set_worker;
            drop(standard_metadata);
        }
        const default_action = drop(standard_metadata);
        size = WORKER_TABLE_SIZE;
    }

    apply {
        if (meta.reply == reply_t.UP) {
            hdr.ina.worker_id = meta.up_worker;
            if (hdr.ina.op == OP_JOIN) {
                hdr.ina.seq = meta.up_nonce;
            }
            hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
            hdr.ethernet.dst_addr = meta.up_mac;
            hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
            hdr.ipv4.dst_addr = meta.up_ip;
            hdr.udp.src_port = INA_UDP_PORT;
            hdr.udp.dst_port = meta.up_udp_port;
            hdr.udp.checksum = 0;
        } else {
            if (meta.reply == reply_t.RESULT_MULTICAST) {
                meta.dest_worker = (worker_id_t) standard_metadata.egress_rid;
            } else {
                meta.dest_worker = hdr.ina.worker_id;
            }
            worker_table.apply();
            if (meta.reply == reply_t.REJECT) {
                hdr.lanes.setInvalid();
                hdr.udp.length = INA_REJECT_UDP_LENGTH;
                hdr.ipv4.total_len = 20 + INA_REJECT_UDP_LENGTH;
                truncate(INA_REJECT_FRAME_BYTES);
            }
        }
    }
}

#endif  // INA_WORKER_REWRITE_P4

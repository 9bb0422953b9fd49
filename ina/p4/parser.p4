// parser.p4: parser, checksum controls and deparser.

#ifndef INA_PARSER_P4
#define INA_PARSER_P4

// Ethernet / IPv4 without options / UDP to INA_UDP_PORT / INA header / lanes. Everything else
// stops early and is forwarded by L2 (Forward). A datagram to INA_UDP_PORT that is too short
// for the INA header and lanes ends with parser error PacketTooShort; v1model still runs the
// ingress, where Validate counts and drops it as MALFORMED.
parser InaParser(packet_in pkt,
                 out headers_t hdr,
                 inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (IPV4_IHL_NO_OPTIONS, IP_PROTOCOL_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_UDP_PORT: parse_ina;
            default: accept;
        }
    }

    state parse_ina {
        pkt.extract(hdr.ina);
        pkt.extract(hdr.lanes);
        transition accept;
    }
}

// The IPv4 checksum is not verified: the switch model (behind a UDP socket) never sees a
// packet with a bad one, and counting them here would make the two targets' counters differ.
control InaVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

// Every INA packet that leaves was rewritten by WorkerRewrite (new addresses): recompute its
// IPv4 checksum. Forwarded (non-INA) packets leave untouched, checksum included. The UDP
// checksum of INA replies is 0 ("none", allowed for UDP over IPv4), set by WorkerRewrite.
control InaComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ina.isValid() && hdr.ipv4.isValid(),
            {
                hdr.ipv4.version,
                hdr.ipv4.ihl,
                hdr.ipv4.diffserv,
                hdr.ipv4.total_len,
                hdr.ipv4.identification,
                hdr.ipv4.flags,
                hdr.ipv4.frag_offset,
                hdr.ipv4.ttl,
                hdr.ipv4.protocol,
                hdr.ipv4.src_addr,
                hdr.ipv4.dst_addr
            },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

control InaDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.ina);
        pkt.emit(hdr.lanes);
    }
}

#endif  // INA_PARSER_P4

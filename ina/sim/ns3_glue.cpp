// The C++ side of ina's ns-3 backend (ina/sim/ns3net.py), compiled by cppyy at import.
//
// Python keeps the protocol (the worker transport core, the switch Pipeline); ns-3 keeps the
// network (point-to-point links, device queues, IP, TCP cross traffic). This file is only the
// seam between them, kept in C++ so that a packet crosses into Python once, with its bytes:
//
//   - events: Python schedules "call me back with id N at time T" (ScheduleAt -> Fire);
//   - endpoints: one UDP socket per node; every datagram received is handed to Python with
//     the link it came over and the time it entered that link (Recv -> arrive);
//   - SendBatch: a batch of datagrams from a numpy array, each sent at its own time.
//
// The frame on the wire has the fast engine's size (ina.protocol.FRAME_OVERHEAD: Ethernet,
// IPv4, UDP): ns-3's point-to-point frame is IPv4 + UDP + a 2-byte PPP header, so each
// datagram carries a 12-byte trailer, which also carries its send time (8 bytes) and its
// link's id (4 bytes): the receiver measures each packet's delay without a side table.
//
// Cross traffic is recorded where it meets INA's packets: every TCP packet handed to a watched
// device (its arrival at the device queue, before tail drop) with its size on the wire, so
// the fast engine can replay the same arrivals into its own FIFO (ina.netem.CrossTrace).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

namespace ina_ns3 {
using namespace ns3;

const uint32_t TRAILER = 12; // 42 (Ethernet 14 + IPv4 20 + UDP 8) - 30 (PPP 2 + IPv4 + UDP)

std::function<void(uint64_t)> fire;                                  // event id
std::function<void(uint32_t, uint64_t, uint32_t, double)> arrive;    // link, bytes, length, sent

void Fire(uint64_t id) { fire(id); }

// Seconds to time steps (picoseconds: the resolution ns3net.load sets), rounded up so that
// nothing runs before the time it was asked for; a float's error on a whole picosecond
// is not a picosecond more.
int64_t Ticks(double t) {
  double x = t * 1e12;
  return (int64_t)std::ceil(x - std::max(1e-3, x * 4e-16));
}

void ScheduleAt(int64_t ticks, uint64_t id) {
  int64_t now = Simulator::Now().GetTimeStep();
  Simulator::Schedule(TimeStep(ticks > now ? ticks - now : 0), &Fire, id);
}

std::vector<Ptr<Socket>> sockets; // endpoints, by id
std::vector<uint8_t> rxbuf;

void Recv(Ptr<Socket> socket) {
  Address from;
  Ptr<Packet> p;
  while ((p = socket->RecvFrom(from))) {
    uint32_t n = p->GetSize();
    if (n < TRAILER) continue;
    rxbuf.resize(n);
    p->CopyData(rxbuf.data(), n);
    double sent;
    uint32_t link;
    std::memcpy(&sent, rxbuf.data() + n - TRAILER, 8);
    std::memcpy(&link, rxbuf.data() + n - 4, 4);
    arrive(link, (uint64_t)rxbuf.data(), n - TRAILER, sent);
  }
}

uint32_t AddEndpoint(Ptr<Node> node, uint16_t port) {
  Ptr<Socket> s = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
  s->SetAttribute("RcvBufSize", UintegerValue(1u << 30));
  s->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
  s->SetRecvCallback(MakeCallback(&Recv));
  sockets.push_back(s);
  return sockets.size() - 1;
}

void DoSend(uint32_t endpoint, Ptr<Packet> p, uint32_t dst, uint16_t port) {
  sockets[endpoint]->SendTo(p, 0, InetSocketAddress(Ipv4Address(dst), port));
}

// n datagrams: row i of `data` (row stride `stride` bytes), lengths[i] bytes, sent at
// times[i] seconds (not before now) from `endpoint` over link `link` to dst:port.
void SendBatch(uint32_t endpoint, uint32_t link, uint32_t dst, uint16_t port, uint64_t n,
               uint64_t times_ptr, uint64_t data_ptr, uint64_t stride, uint64_t lengths_ptr) {
  const double* times = (const double*)times_ptr;
  const uint8_t* data = (const uint8_t*)data_ptr;
  const int64_t* lengths = (const int64_t*)lengths_ptr;
  int64_t now = Simulator::Now().GetTimeStep();
  std::vector<uint8_t> b;
  for (uint64_t i = 0; i < n; i++) {
    int64_t at = Ticks(times[i]);
    if (at < now) at = now;
    double sent = at * 1e-12;
    b.assign(lengths[i] + TRAILER, 0);
    std::memcpy(b.data(), data + i * stride, lengths[i]);
    std::memcpy(b.data() + lengths[i], &sent, 8);
    std::memcpy(b.data() + lengths[i] + 8, &link, 4);
    Ptr<Packet> p = Create<Packet>(b.data(), b.size());
    Simulator::Schedule(TimeStep(at - now), &DoSend, endpoint, p, dst, port);
  }
}

struct Arrivals {
  std::vector<double> t;      // seconds
  std::vector<int64_t> bytes; // on the wire (PPP + IPv4 + TCP)
};
std::vector<Arrivals> watched; // by watch id: one per device (queue) of a Connect
int64_t next_stream = 0;       // RNG streams of the error models, fixed per build (see Connect)
uint64_t lost = 0;             // packets the error models dropped (random loss)

void OnLost(Ptr<const Packet>) { lost++; }

uint64_t Lost() { return lost; }

void OnMacTx(uint32_t watch, Ptr<const Packet> p) {
  uint8_t b[12];
  uint32_t n = p->CopyData(b, sizeof b);
  // MacTx fires with or without the 2-byte PPP header (0x0021: IPv4) in front, by version
  uint32_t ip = (n >= 2 && b[0] == 0x00 && b[1] == 0x21) ? 2 : 0;
  if (n < ip + 10 || b[ip + 9] != 6) return; // TCP only: INA's datagrams are UDP
  watched[watch].t.push_back(Simulator::Now().GetSeconds());
  watched[watch].bytes.push_back(p->GetSize() + 2 - ip);
}

uint64_t WatchCount(uint32_t watch) { return watched[watch].t.size(); }

// Copy a watch's arrivals into numpy arrays (float64 times, int64 sizes) of WatchCount items.
void WatchCopy(uint32_t watch, uint64_t times_ptr, uint64_t bytes_ptr) {
  const Arrivals& a = watched[watch];
  std::memcpy((void*)times_ptr, a.t.data(), a.t.size() * sizeof(double));
  std::memcpy((void*)bytes_ptr, a.bytes.data(), a.bytes.size() * sizeof(int64_t));
}

// One point-to-point link a <-> b: each side's device its own rate, queue (bytes, tail
// drop) and receive loss; no queue disc (the device queue is the buffer, as on a switch
// port). Returns {address of a, address of b} in the /30 `net`, then the watch ids of a's
// and b's devices (the cross traffic entering their queues: OnMacTx).
std::vector<uint32_t> Connect(Ptr<Node> a, Ptr<Node> b, double rate_a, double rate_b,
                              double delay_s, uint64_t buf_a, uint64_t buf_b, double loss_at_a,
                              double loss_at_b, uint32_t mtu, uint32_t net) {
  PointToPointHelper p2p;
  p2p.SetChannelAttribute("Delay", TimeValue(PicoSeconds((int64_t)std::llround(delay_s * 1e12))));
  p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
  NetDeviceContainer d = p2p.Install(a, b);
  double rates[2] = {rate_a, rate_b};
  uint64_t bufs[2] = {buf_a, buf_b};
  double losses[2] = {loss_at_a, loss_at_b};
  for (int i = 0; i < 2; i++) {
    Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(d.Get(i));
    dev->SetDataRate(DataRate((uint64_t)std::llround(rates[i])));
    dev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::BYTES, bufs[i]));
    if (losses[i] > 0) {
      Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
      em->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
      em->SetRate(losses[i]);
      // a stream of its own, numbered from 0 at each build: ns-3's automatic stream numbers
      // keep counting across Simulator::Destroy, so the losses would depend on what the
      // process simulated before
      em->AssignStreams(next_stream++);
      dev->SetReceiveErrorModel(em);
      dev->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&OnLost));
    }
  }
  uint32_t watch[2];
  for (int i = 0; i < 2; i++) {
    watch[i] = watched.size();
    watched.emplace_back();
    d.Get(i)->TraceConnectWithoutContext("MacTx", MakeBoundCallback(&OnMacTx, watch[i]));
  }
  Ipv4AddressHelper ip;
  ip.SetBase(Ipv4Address(net), Ipv4Mask("255.255.255.252"));
  Ipv4InterfaceContainer ifs = ip.Assign(d);
  TrafficControlHelper().Uninstall(d);
  return {ifs.GetAddress(0).Get(), ifs.GetAddress(1).Get(), watch[0], watch[1]};
}

// A TCP bulk flow (cross traffic) from `src` to dst:port over [start, stop) seconds from now.
void BulkFlow(Ptr<Node> src, uint32_t dst, uint16_t port, double start, double stop) {
  BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address(dst), port));
  bulk.SetAttribute("SendSize", UintegerValue(1448));
  ApplicationContainer app = bulk.Install(src);
  app.Start(Seconds(start));
  app.Stop(Seconds(stop));
}

std::vector<Ptr<PacketSink>> sinks;

void Sink(Ptr<Node> node, uint16_t port) {
  PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
  ApplicationContainer app = sink.Install(node);
  app.Start(Seconds(0));
  sinks.push_back(DynamicCast<PacketSink>(app.Get(0)));
}

// Bytes the cross traffic delivered so far (every sink).
uint64_t CrossBytes() {
  uint64_t total = 0;
  for (auto& s : sinks) total += s->GetTotalRx();
  return total;
}

void Setup(uint32_t seed) {
  RngSeedManager::SetSeed(1 + seed % 2147483646u); // ns-3 seeds must be nonzero
  RngSeedManager::SetRun(1);
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
}

void Routes() { Ipv4GlobalRoutingHelper::PopulateRoutingTables(); }

void Reset() {
  sockets.clear();
  sinks.clear();
  watched.clear();
  next_stream = 0;
  lost = 0;
  Simulator::Destroy();
}

} // namespace ina_ns3

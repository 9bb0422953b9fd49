"""gRPC plumbing of the switch model's P4Runtime service: handlers, the bind check, the server.

`add_to_server` registers a service like ``add_P4RuntimeServicer_to_server`` except that
``Read`` yields serialized ``ReadResponse`` bytes (`ina.switch_model.p4rt_wire` encodes
counter and register cells with numpy, not as protobuf objects). `bind_problem` says in one
line why an address cannot be bound, before gRPC would say it in a multi-line C++ error.
`ModelServer` is what `ina.switch_model.p4runtime_server.start_server` returns.
"""

from __future__ import annotations

import errno
import socket

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc


class ModelServer:
    """A running gRPC server with the model's P4Runtime service (see `start_server`)."""

    def __init__(
        self,
        server: grpc.Server,
        service: p4runtime_pb2_grpc.P4RuntimeServicer,
        port: int,
        host: str,
    ) -> None:
        self.server = server
        self.service = service
        self.port = port
        self.address = f"{host}:{port}"

    @property
    def lock(self):
        """The pipeline lock: hold it around ``Pipeline.process_batch``."""
        return self.service.pipeline_lock

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving; open streams are cancelled. Blocks until stopped."""
        self.server.stop(grace).wait()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _read_response_bytes(message: bytes | p4runtime_pb2.ReadResponse) -> bytes:
    """Read's response serializer: our Read yields ReadResponses serialized already."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def add_to_server(service: p4runtime_pb2_grpc.P4RuntimeServicer, server: grpc.Server) -> None:
    """Register ``service`` like ``add_P4RuntimeServicer_to_server``, except that Read's
    replies pass through as bytes (encoded by `p4rt_wire`, not built as protobuf objects)."""
    pb = p4runtime_pb2
    unary = grpc.unary_unary_rpc_method_handler
    handlers = {
        "Write": unary(
            service.Write, pb.WriteRequest.FromString, pb.WriteResponse.SerializeToString
        ),
        "Read": grpc.unary_stream_rpc_method_handler(
            service.Read, pb.ReadRequest.FromString, _read_response_bytes
        ),
        "SetForwardingPipelineConfig": unary(
            service.SetForwardingPipelineConfig,
            pb.SetForwardingPipelineConfigRequest.FromString,
            pb.SetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "GetForwardingPipelineConfig": unary(
            service.GetForwardingPipelineConfig,
            pb.GetForwardingPipelineConfigRequest.FromString,
            pb.GetForwardingPipelineConfigResponse.SerializeToString,
        ),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            service.StreamChannel,
            pb.StreamMessageRequest.FromString,
            pb.StreamMessageResponse.SerializeToString,
        ),
        "Capabilities": unary(
            service.Capabilities,
            pb.CapabilitiesRequest.FromString,
            pb.CapabilitiesResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers),)
    )


def bind_problem(address: str) -> str | None:
    """Why a TCP listener cannot bind ``address`` (``host:port``) now, or None.

    gRPC would find out too, but it logs a multi-line C++ error on stderr first; this
    check lets `ina switch` say it in one line. (gRPC's own bind stays the real guard.)"""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or int(port) == 0:
        return None  # let gRPC judge the address; port 0 is always free
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"cannot resolve {host!r}: {e.strerror}"
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                s.bind(sockaddr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return "the port is in use (another switch?)"
                return e.strerror or str(e)
    return None

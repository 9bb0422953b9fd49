"""Forwarding pipeline config of the switch model's P4Runtime service.

`PipelineConfig` is a part of `P4RuntimeService` (`ina.switch_model.p4runtime_server`). The
model *is* the program, so it starts with our P4Info installed (``preloaded``):
``p4runtime-shell`` works without ``--config``. ``SetForwardingPipelineConfig`` accepts only
a P4Info that matches ours (`ina.p4info.p4info_differences`; p4c's P4Info for the program
passes) and ignores ``p4_device_config`` (stored and returned, e.g. BMv2 JSON).
VERIFY_AND_COMMIT clears the forwarding state as on BMv2 (tables, groups, registers,
counters); RECONCILE_AND_COMMIT and COMMIT keep it; VERIFY_AND_SAVE keeps the config for a
later COMMIT. ``GetForwardingPipelineConfig`` answers with the parts its response type asks for.

The service provides ``pipeline_lock``, ``_p4info`` and the ``_clear_*`` methods of its
other parts; `_init_config` sets the installed and the saved config.
"""

from __future__ import annotations

import threading

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from ina.p4info import p4info_differences
from ina.switch_model.p4rt_values import SC, fail

_PIPE = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET = p4runtime_pb2.GetForwardingPipelineConfigRequest


class PipelineConfig:
    """The installed (and the saved) forwarding pipeline config (a part of `P4RuntimeService`)."""

    pipeline_lock: threading.Lock | threading.RLock
    _p4info: p4info_pb2.P4Info

    def _init_config(self, preloaded: bool) -> None:
        self._config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        if preloaded:
            self._config = p4runtime_pb2.ForwardingPipelineConfig(p4info=self._p4info)
        self._saved: p4runtime_pb2.ForwardingPipelineConfig | None = None

    def _set_pipeline(self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest) -> None:
        action = request.action
        if action in (
            _PIPE.VERIFY,
            _PIPE.VERIFY_AND_SAVE,
            _PIPE.VERIFY_AND_COMMIT,
            _PIPE.RECONCILE_AND_COMMIT,
        ):
            if not request.HasField("config"):
                raise fail(SC.INVALID_ARGUMENT, "no config given")
            diffs = p4info_differences(request.config.p4info, self._p4info)
            if diffs:
                raise fail(
                    SC.INVALID_ARGUMENT,
                    "the switch model runs only the INA program; this P4Info differs: "
                    + "; ".join(diffs),
                )
            cfg = p4runtime_pb2.ForwardingPipelineConfig()
            cfg.CopyFrom(request.config)
            if action == _PIPE.VERIFY:
                return
            if action == _PIPE.VERIFY_AND_SAVE:
                self._saved = cfg
                return
            with self.pipeline_lock:
                if action == _PIPE.VERIFY_AND_COMMIT:
                    self._clear_state()  # a new pipeline starts empty, as on BMv2
                self._config = cfg
                self._saved = None
        elif action == _PIPE.COMMIT:
            if request.HasField("config"):
                raise fail(SC.INVALID_ARGUMENT, "COMMIT takes no config")
            if self._saved is None:
                raise fail(SC.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
            with self.pipeline_lock:
                self._config, self._saved = self._saved, None
        else:
            raise fail(SC.INVALID_ARGUMENT, f"unsupported action {action}")

    def _get_pipeline(
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        reply = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        cfg = self._config
        if cfg is None:  # spec: config unset when the device has none
            return reply
        rt = request.response_type
        if rt == _GET.COOKIE_ONLY:
            if cfg.HasField("cookie"):
                reply.config.cookie.CopyFrom(cfg.cookie)
            else:
                reply.config.SetInParent()
        elif rt == _GET.P4INFO_AND_COOKIE:
            reply.config.p4info.CopyFrom(cfg.p4info)
            if cfg.HasField("cookie"):
                reply.config.cookie.CopyFrom(cfg.cookie)
        elif rt == _GET.DEVICE_CONFIG_AND_COOKIE:
            reply.config.p4_device_config = cfg.p4_device_config
            if cfg.HasField("cookie"):
                reply.config.cookie.CopyFrom(cfg.cookie)
        else:
            reply.config.CopyFrom(cfg)
        return reply

    def _clear_state(self) -> None:
        """Empty the forwarding state, as a new pipeline on BMv2 (caller holds the lock)."""
        self._clear_tables()
        self._clear_groups()
        self._clear_cells()

"""The driver's GPU recovery action (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, from
NVML 12.8 / driver R570): what must be done after an uncorrectable error before the GPU
can be trusted again.

A reset (GPU or bus), a reboot (node or system), or a drain followed by a reset is
GPU_RECOVERY_ACTION_REQUIRED, critical (the planner leaves the GPU out until it is done);
draining its peer-to-peer traffic or recovering its IMEX domain is the same code as an
error. A value this toolkit does not know is
GPU_RECOVERY_ACTION_UNKNOWN (info, naming it). An older driver without the field
(``supported`` false) or a value NVML could not give raises nothing: the facts' ``note``
says why. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..node.findings import Finding
from .gpu_finding import gpu_evidence, gpu_finding


@dataclass(frozen=True)
class RecoveryAction:
    severity: str
    meaning: str
    fix: str


# nvmlDeviceGpuRecoveryAction_t values that ask for something (0, none, asks nothing).
RECOVERY_ACTIONS: dict[int, RecoveryAction] = {
    1: RecoveryAction(
        "critical",
        "a GPU reset (a fault the GPU recovers from only by a reset)",
        "stop every process on GPU {index}, reset it (nvidia-smi -r -i {index}), then start "
        "the work again",
    ),
    2: RecoveryAction(
        "critical",
        "a node reboot (the fault may have left the operating system inconsistent)",
        "drain the node's work and reboot it",
    ),
    3: RecoveryAction(
        "error",
        "draining its peer-to-peer traffic",
        "stop the processes on GPU {index} that use peer-to-peer copies and turn off UVM "
        "persistence mode; then read the recovery action again (nvidia-smi -q -i {index}), "
        "which names what comes next",
    ),
    4: RecoveryAction(
        "critical",
        "draining its peer-to-peer traffic, then a GPU reset",
        "drain LingBot's work from GPU {index} (stop the processes that use peer-to-peer "
        "copies first), then reset it (nvidia-smi -r -i {index})",
    ),
    5: RecoveryAction(
        "error",
        "recovering its IMEX domain (multi-node NVLink memory export)",
        "restart the IMEX daemon of the node's NVLink domain (nvidia-imex), then read the "
        "recovery action again (nvidia-smi -q -i {index})",
    ),
    6: RecoveryAction(
        "critical",
        "a PCIe bus reset (a GPU reset is not enough)",
        "drain the node's work and reset the GPU's bus, or reboot the node",
    ),
    7: RecoveryAction(
        "critical",
        "a full system reboot (power cycle, not a warm reboot)",
        "drain the node's work and power-cycle it",
    ),
}


def recovery_action_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    """GPU_RECOVERY_ACTION_REQUIRED (critical; error for draining P2P) or
    GPU_RECOVERY_ACTION_UNKNOWN (info) for one GPU; nothing when there is no action, when
    the driver has no such field, or when NVML was not asked."""
    recovery = gpu.get("recovery_action")
    if not isinstance(recovery, Mapping) or not recovery.get("supported"):
        return []
    value = recovery.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or value == 0:
        return []
    index = gpu.get("index")
    evidence = gpu_evidence(gpu, recovery_action=value, name=recovery.get("name"))
    action = RECOVERY_ACTIONS.get(value)
    if action is None:
        return [
            gpu_finding(
                gpu,
                "GPU_RECOVERY_ACTION_UNKNOWN",
                "info",
                f"the driver asks for recovery action {value} ({recovery.get('name')}), which "
                "this toolkit does not know",
                f"read what the driver asks (nvidia-smi -q -i {index}) and NVIDIA's "
                "nvmlDeviceGpuRecoveryAction_t for the driver's version",
                evidence,
            )
        ]
    return [
        gpu_finding(
            gpu,
            "GPU_RECOVERY_ACTION_REQUIRED",
            action.severity,
            f"the driver asks for {action.meaning} before the GPU can be trusted again",
            action.fix.format(index=index),
            evidence,
        )
    ]

"""NVLinks trained down: a GPU with fewer active NVLinks than its model has.

An HGX baseboard's GPUs have all their NVLinks wired (to each other, or to NVSwitches); a
link that did not train (a connector, a retimer, an NVSwitch tray) halves or thirds what
peer copies over NVLink get, and nothing else on the node says so. The facts give each
GPU's NVLinks as NVML reports them (``nvlink``: how many have a state, how many are
active). The count a GPU should have comes from its model (NVLINKS_BY_MODEL, extended or
overridden per fleet with ``gpu_checks_nvlinks_by_model``); for a model not in the table,
from NVML's own count, but only once a link is active: a PCIe card without its NVLink
bridge lists its links, all inactive, and is not at fault. A GPU NVML gives no NVLink
state for (a PCIe GPU, a VM without its links) is not judged. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..node.findings import Finding
from .gpu_finding import gpu_evidence, gpu_finding

# NVML model names of GPUs whose NVLinks are always wired on their baseboard (SXM/OAM),
# with the links each has. PCIe cards with an NVLink bridge are left to what NVML says.
NVLINKS_BY_MODEL: Mapping[str, int] = {
    "Tesla V100-SXM2-16GB": 6,
    "Tesla V100-SXM2-32GB": 6,
    "NVIDIA A100-SXM4-40GB": 12,
    "NVIDIA A100-SXM4-80GB": 12,
    "NVIDIA A800-SXM4-80GB": 8,
    "NVIDIA H100 80GB HBM3": 18,
    "NVIDIA H800": 8,
    "NVIDIA H20": 18,
    "NVIDIA H200": 18,
    "NVIDIA B200": 18,
}


def expected_nvlinks(
    gpu: Mapping[str, Any], nvlinks_by_model: Mapping[str, int]
) -> tuple[int, str] | None:
    """(links the GPU should have active, where that number comes from), None when the GPU
    is not judged."""
    nvlink = gpu.get("nvlink")
    if not isinstance(nvlink, Mapping) or not nvlink.get("links"):
        return None
    model = gpu.get("model") or ""
    table = {**NVLINKS_BY_MODEL, **nvlinks_by_model}
    if model in table:
        return int(table[model]), f"a {model} has {table[model]}"
    if nvlink.get("active"):
        return int(nvlink["links"]), f"NVML lists {nvlink['links']} NVLinks for it"
    return None


def nvlink_findings(gpu: Mapping[str, Any], nvlinks_by_model: Mapping[str, int]) -> list[Finding]:
    """NVLINK_LINKS_DOWN for a GPU with fewer active NVLinks than it should have: a
    warning while some are active, an error when none is."""
    expected = expected_nvlinks(gpu, nvlinks_by_model)
    if expected is None:
        return []
    count, basis = expected
    active = int(gpu["nvlink"].get("active") or 0)
    if active >= count:
        return []
    index = gpu.get("index")
    return [
        Finding(
            code="NVLINK_LINKS_DOWN",
            severity="warning" if active else "error",
            subject=gpu["bus_id"],
            message=(
                f"GPU {index} ({gpu.get('uuid')}) has {active} of {count} NVLinks active "
                f"({basis}): links trained down or failed, so its peer copies over NVLink "
                f"get about {active}/{count} of their bandwidth"
            ),
            evidence={
                "index": index,
                "uuid": gpu.get("uuid"),
                "model": gpu.get("model"),
                "active": active,
                "expected": count,
                "links_listed": gpu["nvlink"].get("links"),
            },
            fix=(
                f"read nvidia-smi nvlink -s -i {index} (which links are down) and "
                f"nvidia-smi nvlink -e -i {index} (error counters); reset the GPU while it is "
                f"idle (nvidia-smi -r -i {index}); links that stay down need the baseboard "
                "serviced (connector, cable, NVSwitch tray)"
            ),
        )
    ]


# Error counters whose rise means a link that went down and up again (traffic stalled
# while it retrained): an error. The others (replays, CRC, ECC) are retried by the link and
# cost bandwidth: a warning.
NVLINK_ERRORS_LINK_DOWN = ("recovery",)


def nvlink_error_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    """NVLINK_ERRORS_RISING for a GPU whose NVLink error counters rose between two readings
    (nvlink.errors_earlier, nvlink.errors, errors_window_s apart: within one facts reading,
    or since the monitor's last run); an error when ``recovery`` rose, else a warning. A
    counter that fell was reset (the GPU was reset or the driver reloaded): not judged.
    NVLINK_ERRORS_UNKNOWN (info) for a GPU with active NVLinks whose counters could not be
    read: unknown, never healthy by silence."""
    nvlink = gpu.get("nvlink")
    if not isinstance(nvlink, Mapping) or "errors_earlier" not in nvlink:
        return []
    index = gpu.get("index")
    earlier = nvlink.get("errors_earlier") or {}
    latest = nvlink.get("errors") or {}
    if not earlier or not latest:
        if not nvlink.get("active"):
            return []
        message = "its NVLinks are active, but NVML did not give their error counters"
        return [
            gpu_finding(
                gpu,
                "NVLINK_ERRORS_UNKNOWN",
                "info",
                f"{message}: whether they are rising is unknown",
                f"read them with nvidia-smi nvlink -e -i {index}",
                gpu_evidence(gpu, model=gpu.get("model")),
            )
        ]
    shared = sorted(set(earlier) & set(latest))
    rises = {
        name: int(latest[name]) - int(earlier[name])
        for name in shared
        if int(latest[name]) > int(earlier[name])
    }
    if not rises or any(int(latest[name]) < int(earlier[name]) for name in shared):
        return []
    window_s = nvlink.get("errors_window_s")
    over = f"over {window_s} s" if window_s is not None else "between two readings"
    link_down = any(name in rises for name in NVLINK_ERRORS_LINK_DOWN)
    cost = (
        "a link went down and retrained, stalling the peer copies over it"
        if link_down
        else "its links retry data, which costs peer copies bandwidth"
    )
    words = ", ".join(f"{name} +{count}" for name, count in rises.items())
    return [
        gpu_finding(
            gpu,
            "NVLINK_ERRORS_RISING",
            "error" if link_down else "warning",
            f"NVLink error counters rose {over} ({words}): {cost}",
            f"read nvidia-smi nvlink -e -i {index} twice (which link's counters rise); "
            f"reset the GPU while it is idle (nvidia-smi -r -i {index}); a link whose "
            "counters keep rising needs the baseboard serviced (connector, cable, NVSwitch tray)",
            gpu_evidence(
                gpu, model=gpu.get("model"), rises=rises, counts=dict(latest), window_s=window_s
            ),
        )
    ]


# NVLink fabric states (facts gpus[].fabric) that leave an NVSwitch GPU without its peers.
FABRIC_NOT_READY = ("not_started", "in_progress")
FABRIC_KNOWN = ("not_supported", "completed", *FABRIC_NOT_READY)


def fabric_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    """NVLINK_FABRIC_NOT_READY (critical) for a GPU of an NVSwitch system whose fabric the
    fabric manager has not set up: CUDA does not start on such a system, so the planner
    leaves the GPU out until it is. A state this toolkit does not know is a note naming
    it (FABRIC_STATE_UNKNOWN, info), never ok by silence."""
    state = gpu.get("fabric")
    if not isinstance(state, str) or state in ("not_supported", "completed"):
        return []
    index = gpu.get("index")
    evidence = {"index": index, "uuid": gpu.get("uuid"), "fabric": state}
    if state not in FABRIC_KNOWN:
        return [
            Finding(
                code="FABRIC_STATE_UNKNOWN",
                severity="info",
                subject=gpu["bus_id"],
                message=f"GPU {index} reports NVLink fabric state {state!r}, which this "
                "toolkit does not know",
                evidence=evidence,
                fix=f"read nvidia-smi -q -i {index} (its Fabric section) and the fabric "
                "manager's log (journalctl -u nvidia-fabricmanager)",
            )
        ]
    return [
        Finding(
            code="NVLINK_FABRIC_NOT_READY",
            severity="critical",
            subject=gpu["bus_id"],
            message=f"GPU {index} ({gpu.get('uuid')}): its NVLink fabric is "
            f"{state.replace('_', ' ')}: on an NVSwitch system CUDA does not start until "
            "the fabric manager has set the fabric up, so the GPU is left out of the plan",
            evidence=evidence,
            fix="start the fabric manager (systemctl enable --now nvidia-fabricmanager), at the "
            "driver's own version (its package matches the driver's), and read its log "
            "(journalctl -u nvidia-fabricmanager); then run site.yml again",
        )
    ]

"""Recent Xid events (the kernel log's NVIDIA error lines) as findings, one per GPU and code.

What each Xid means follows NVIDIA's Xid catalogue; the severity says what it costs a
LingBot node: critical when the GPU is gone or must be reset before it can be trusted
(79 fallen off the bus, 95 uncontained ECC error, 119/120 GSP errors), an error when work
on it was lost or its memory or NVLink is failing, a warning for what an application or a
single event usually causes. An Xid code the table does not know is a note naming it,
never dropped. Events older than ``XID_RECENT_S`` are history (a reboot or a reset since
may have cleared them) and raise nothing. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..node.findings import Finding

XID_RECENT_S = 24 * 3600


@dataclass(frozen=True)
class XidMeaning:
    severity: str
    meaning: str
    fix: str


_RESET = "drain LingBot's work on GPU {index}, reset it (nvidia-smi -r -i {index}) or reboot"
_APP = "look at the process named in the evidence; repeated events on one GPU: reset it"
XID_TABLE: dict[int, XidMeaning] = {
    8: XidMeaning("warning", "GPU stopped processing (timeout)", _APP),
    13: XidMeaning("warning", "graphics engine exception", _APP),
    31: XidMeaning("warning", "GPU memory page fault", _APP),
    32: XidMeaning("warning", "invalid or corrupted push buffer stream", _APP),
    43: XidMeaning("warning", "GPU stopped processing (the application's channel)", _APP),
    45: XidMeaning("info", "preemptive cleanup after an earlier error", _APP),
    46: XidMeaning("warning", "GPU stopped processing", _RESET),
    48: XidMeaning("error", "double-bit ECC error", _RESET + "; repeated: return it"),
    61: XidMeaning("warning", "internal micro-controller warning", _RESET),
    62: XidMeaning("critical", "internal micro-controller halted", _RESET),
    63: XidMeaning(
        "warning",
        "ECC page retirement or row remap recorded",
        "reset GPU {index} when idle so the remap takes effect (nvidia-smi -r -i {index})",
    ),
    64: XidMeaning("error", "ECC page retirement or row remap failed", _RESET + "; then RMA"),
    69: XidMeaning("warning", "graphics engine class error", _APP),
    74: XidMeaning(
        "error",
        "NVLink error",
        "nvidia-smi nvlink -e -i {index} names the link; reset GPU {index} or reboot, and "
        "reseat or replace the link when it comes back",
    ),
    79: XidMeaning(
        "critical",
        "GPU has fallen off the bus",
        "drain the node and reboot it; a GPU that falls off again: check its power, seating "
        "and PCIe slot (lspci -vvv -s <bus id>), then RMA",
    ),
    92: XidMeaning(
        "warning", "high single-bit ECC error rate", "watch GPU {index}; RMA if it grows"
    ),
    94: XidMeaning("error", "contained ECC error (the application was stopped)", _RESET),
    95: XidMeaning("critical", "uncontained ECC error", _RESET),
    109: XidMeaning("warning", "context switch timeout", _APP),
    119: XidMeaning("critical", "GSP RPC timeout", _RESET),
    120: XidMeaning("critical", "GSP error", _RESET),
    121: XidMeaning("error", "C2C link error", _RESET),
    140: XidMeaning("critical", "unrecovered ECC error", _RESET),
    154: XidMeaning(
        "warning",
        "GPU recovery action changed",
        "nvidia-smi -q -i {index} names the recovery action; follow it",
    ),
}
UNKNOWN_XID = XidMeaning(
    "info",
    "an Xid code this toolkit does not know",
    "look the code up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)",
)


def xid_findings(facts: Mapping[str, Any], recent_s: float = XID_RECENT_S) -> list[Finding]:
    """GPU_XID_<code> per GPU and code seen within ``recent_s``; KERNEL_LOG_UNREADABLE (a
    note: Xid events are unknown, not absent) on a node with GPUs; XID_LINE_UNPARSED for
    Xid lines the toolkit cannot read."""
    kernel_log = facts.get("kernel_log")
    gpus = [gpu for gpu in facts.get("gpus") or [] if isinstance(gpu, Mapping)]
    if not isinstance(kernel_log, Mapping):
        return []
    if not kernel_log.get("readable"):
        return [_unreadable(kernel_log)] if gpus else []
    by_bus = {_xid_bus(gpu.get("bus_id")): gpu for gpu in gpus}
    grouped: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for event in kernel_log.get("xid_events") or []:
        code, age_s = event.get("xid"), event.get("age_s")
        if not isinstance(code, int) or isinstance(code, bool):
            continue
        if isinstance(age_s, (int, float)) and age_s > recent_s:
            continue
        grouped.setdefault((str(event.get("bus_id")), code), []).append(event)
    findings = [
        _xid_finding(code, events, by_bus.get(bus_id), bus_id)
        for (bus_id, code), events in grouped.items()
    ]
    if kernel_log.get("unparsed"):
        findings.append(_unparsed(kernel_log["unparsed"]))
    return findings


def _xid_bus(bus_id: Any) -> str:
    """'0000:41:00.0' -> '0000:41:00', the form the kernel log's Xid lines name."""
    return str(bus_id or "").lower().split(".", maxsplit=1)[0]


def _xid_finding(
    code: int, events: list[Mapping[str, Any]], gpu: Mapping[str, Any] | None, bus_id: str
) -> Finding:
    meaning = XID_TABLE.get(code, UNKNOWN_XID)
    last = events[-1]
    index = gpu.get("index") if gpu else None
    if gpu:
        names = [str(name) for name in (gpu.get("bus_id"), gpu.get("uuid")) if name]
        who = f"GPU {index} ({', '.join(names)})"
    else:
        who = f"the device at {bus_id} (no GPU the driver or the PCI bus lists)"
    when = f"last at {last.get('time')}" if last.get("time") else "time unknown"
    message = (
        f"{who}: Xid {code} ({meaning.meaning}), {len(events)} time(s) in the last "
        f"{XID_RECENT_S // 3600} h, {when}: {last.get('message') or 'no text'}"
    )
    return Finding(
        code=f"GPU_XID_{code}",
        severity=meaning.severity,
        subject=str(gpu.get("bus_id")) if gpu else bus_id,
        message=message,
        evidence={
            "index": index,
            "bus_id": gpu.get("bus_id") if gpu else bus_id,
            "uuid": gpu.get("uuid") if gpu else None,
            "xid": code,
            "count": len(events),
            "last_time": last.get("time"),
            "last_age_s": last.get("age_s"),
            "last_message": last.get("message"),
            "last_process": last.get("process"),
            "last_pid": last.get("pid"),
        },
        fix=meaning.fix.format(index=index if index is not None else "<index>"),
    )


def _unreadable(kernel_log: Mapping[str, Any]) -> Finding:
    return Finding(
        code="KERNEL_LOG_UNREADABLE",
        severity="info",
        subject="node",
        message=(
            f"the kernel log could not be read ({kernel_log.get('error')}): Xid events are "
            "unknown, not absent"
        ),
        evidence={"source": kernel_log.get("source"), "error": kernel_log.get("error")},
        fix=(
            "read it as root with CAP_SYSLOG (kernel.dmesg_restrict), outside a sandbox that "
            "sets ProtectKernelLogs"
        ),
    )


def _unparsed(lines: list[str]) -> Finding:
    return Finding(
        code="XID_LINE_UNPARSED",
        severity="info",
        subject="node",
        message=f"{len(lines)} Xid line(s) in the kernel log this toolkit cannot read: {lines[-1]}",
        evidence={"lines": list(lines)},
        fix="read them with dmesg | grep Xid; a line in a new format: report it to the toolkit",
    )

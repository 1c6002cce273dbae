"""Clock event (throttle) reasons: why the driver holds a GPU's clocks down, judged over
several readings.

gpu_facts reads NVML's clock event reasons ``CLOCK_EVENT_READINGS`` times, 100 ms apart,
and the facts give each GPU's ``clock_events``: per reason, how many of the readings NVML
answered had it set. A reason counts when it is sustained: set in at least three quarters
of the answered readings and in at least two of them, so that one sample (a clock change,
a brief spike) never raises a finding.

- HW slowdown (clocks cut by half or more) and HW thermal slowdown: GPU_CLOCKS_HW_SLOWDOWN
  (error), naming the cause when the driver gives one (HW thermal). The driver sets HW
  slowdown with an external power brake too: then the power brake's own finding says it.
- HW power brake slowdown (the power supply asserted the brake): GPU_CLOCKS_POWER_BRAKE
  (error).
- SW thermal slowdown (the driver lowering clocks to hold temperature):
  GPU_CLOCKS_THERMAL_SLOWDOWN (warning).
- A bit this toolkit does not know: GPU_CLOCK_EVENT_REASON_UNKNOWN (info, naming it).
- Idle, application clocks, the SW power cap, sync boost and display clock settings are how a
  healthy GPU runs: never a finding.
- Readings that could not be taken (fewer than two answered) leave the clocks unknown, never
  healthy: GPU_CLOCK_EVENTS_UNKNOWN (info).

Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..node.findings import Finding
from .gpu_finding import gpu_evidence, gpu_finding

# A reason is sustained when set in at least this share of the answered readings...
SUSTAINED_SHARE = 0.75
# ...and in at least this many of them (also the fewest answered readings that judge).
SUSTAINED_MIN_READINGS = 2
# How each reason reads in a message.
REASON_WORDS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown",
    "sw_thermal_slowdown": "SW thermal slowdown",
}


def sustained(count: int, answered: int) -> bool:
    """Set in at least SUSTAINED_SHARE of the answered readings and in at least
    SUSTAINED_MIN_READINGS of them."""
    return count >= SUSTAINED_MIN_READINGS and count >= SUSTAINED_SHARE * answered


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _counts(value: Any) -> dict[str, int]:
    """A map of readings per reason (or bit); empty when the facts give none."""
    return (
        {str(key): _count(count) for key, count in value.items()}
        if isinstance(value, Mapping)
        else {}
    )


def clock_event_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    """GPU_CLOCKS_HW_SLOWDOWN, GPU_CLOCKS_POWER_BRAKE (errors), GPU_CLOCKS_THERMAL_SLOWDOWN
    (warning), GPU_CLOCK_EVENT_REASON_UNKNOWN and GPU_CLOCK_EVENTS_UNKNOWN (info) for one
    GPU; nothing for a GPU whose facts have no ``clock_events`` (NVML was not asked)."""
    events = gpu.get("clock_events")
    if not isinstance(events, Mapping):
        return []
    answered = _count(events.get("readings_answered"))
    taken = _count(events.get("readings_taken"))
    reasons = _counts(events.get("reasons"))
    unknown = _counts(events.get("unknown_bits"))
    evidence = gpu_evidence(
        gpu,
        readings_answered=answered,
        readings_taken=taken,
        reasons=reasons,
        unknown_bits=unknown,
        error=events.get("error"),
    )
    index = gpu.get("index")

    def finding(code: str, severity: str, message: str, fix: str) -> Finding:
        return gpu_finding(gpu, code, severity, message, fix, evidence)

    if answered < SUSTAINED_MIN_READINGS:
        return [
            finding(
                "GPU_CLOCK_EVENTS_UNKNOWN",
                "info",
                f"why its clocks are held down is unknown: NVML answered {answered} of {taken} "
                f"clock event readings ({events.get('error') or 'no reading taken'})",
                f"read them by hand (nvidia-smi -q -d PERFORMANCE -i {index}); a driver or GPU "
                "that does not give clock event reasons leaves throttling unknown",
            )
        ]

    def seen(name: str) -> str:
        return f"{REASON_WORDS[name]} in {reasons.get(name, 0)} of {answered} readings"

    def held(name: str) -> bool:
        return sustained(reasons.get(name, 0), answered)

    findings = []
    brake = held("hw_power_brake_slowdown")
    thermal = held("hw_thermal_slowdown")
    if thermal or (held("hw_slowdown") and not brake):
        cause = (
            f"the temperature is too high ({seen('hw_thermal_slowdown')}, {seen('hw_slowdown')})"
            if thermal
            else f"the driver names no cause ({seen('hw_slowdown')}): too high a temperature, "
            "an external power brake, or power draw past the board's limit"
        )
        cooling = (
            f"check its temperature and the node's cooling (nvidia-smi -q -d "
            f"TEMPERATURE,PERFORMANCE -i {index}): fans, airflow, blocked inlets, the room"
        )
        findings.append(
            finding(
                "GPU_CLOCKS_HW_SLOWDOWN",
                "error",
                f"the hardware cut its clocks by half or more: {cause}",
                cooling
                if thermal
                else cooling + "; a GPU that is not hot: check the power supplies, the GPU's "
                "power cables and its power draw against its limit (nvidia-smi -q -d POWER)",
            )
        )
    if brake:
        findings.append(
            finding(
                "GPU_CLOCKS_POWER_BRAKE",
                "error",
                "the external power brake holds its clocks down "
                f"({seen('hw_power_brake_slowdown')}): the power supply asked the GPUs to draw "
                "less",
                "check the node's power supplies and their redundancy, the BMC's event log "
                "(ipmitool sel list) and the power feed; the brake lifts when the supply recovers",
            )
        )
    if held("sw_thermal_slowdown"):
        findings.append(
            finding(
                "GPU_CLOCKS_THERMAL_SLOWDOWN",
                "warning",
                f"the driver lowers its clocks to hold its temperature "
                f"({seen('sw_thermal_slowdown')})",
                f"check its temperature against its slowdown limit (nvidia-smi -q -d TEMPERATURE "
                f"-i {index}) and the node's cooling: fans, airflow, blocked inlets, the room",
            )
        )
    bits = sorted(
        (bit for bit, count in unknown.items() if sustained(count, answered)),
        key=lambda bit: (len(bit), bit),  # hex: shorter is smaller
    )
    if bits:
        counts = ", ".join(f"{bit} in {unknown[bit]} of {answered}" for bit in bits)
        findings.append(
            finding(
                "GPU_CLOCK_EVENT_REASON_UNKNOWN",
                "info",
                f"the driver gives clock event reason bit(s) this toolkit does not know: {counts} "
                "readings",
                f"look the bit up in the driver's nvml.h (nvmlClocksEventReason*) and read "
                f"nvidia-smi -q -d PERFORMANCE -i {index}",
            )
        )
    return findings

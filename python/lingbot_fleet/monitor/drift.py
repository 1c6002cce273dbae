"""The monitor's findings: the plan in force against what one run measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ..node.findings import Finding
from .judge import PairVerdict, PlanView


def drift_findings(
    plan: PlanView,
    facts: Mapping[str, Any],
    verdicts: Sequence[PairVerdict],
    recommended: Mapping[str, Sequence[PairVerdict]],
    consecutive_runs: int,
) -> list[Finding]:
    """The plan against what was measured: lost GPUs, unusable pairs, fallbacks."""
    findings: list[Finding] = []
    if plan.error:
        findings.append(
            Finding(
                code="MONITOR_PLAN_UNREADABLE",
                severity="error",
                subject="node",
                message=f"the plan in force cannot be read: {plan.error}",
                evidence={"plan_path": plan.path},
                fix="run the provision playbook again (role lingbot_service writes the plan)",
            )
        )
    elif not plan.present:
        findings.append(
            Finding(
                code="MONITOR_NO_PLAN",
                severity="info",
                subject="node",
                message=f"no plan in force at {plan.path}: no GPU pair is watched",
                evidence={"plan_path": plan.path},
                fix="run the provision playbook (role lingbot_service) to plan LingBot",
            )
        )
    # A GPU the driver lost is still in the facts (by bus id, without UUID) and the link
    # checks report it as GPU_LOST; this finding is for GPUs gone from the node entirely.
    present_uuids = {gpu.get("uuid") for gpu in facts.get("gpus") or []}
    lost_bus_ids = {gpu.get("bus_id") for gpu in facts.get("gpus") or [] if gpu.get("lost")}
    for gpu in plan.gpus:
        if gpu.uuid is None or gpu.uuid in present_uuids or gpu.bus_id in lost_bus_ids:
            continue
        findings.append(
            Finding(
                code="MONITOR_PLANNED_GPU_MISSING",
                severity="critical",
                subject=gpu.bus_id or gpu.uuid,
                message=(
                    f"GPU {gpu.index} ({gpu.uuid}) of instance {gpu.instance} is not on "
                    "the node any more"
                ),
                evidence={"instance": gpu.instance, "index": gpu.index, "uuid": gpu.uuid},
                fix="check the kernel log (Xid 79: fallen off the bus), reseat or replace "
                "the GPU, then run the provision playbook to plan again",
            )
        )
    for verdict in verdicts:
        if verdict.usable:
            continue
        findings.append(
            Finding(
                code="MONITOR_PATH_BELOW_THRESHOLD",
                severity="warning",
                subject=f"pair {verdict.src}-{verdict.dst}",
                message=(f"{verdict.reason} ({verdict.below_threshold_runs} consecutive run(s))"),
                evidence=asdict(verdict),
                fix=(
                    f"after {consecutive_runs} consecutive runs the monitor recommends the "
                    "single-GPU fallback; check the link findings and the kernel command "
                    "line (IOMMU), or re-plan with the provision playbook"
                ),
            )
        )
    for instance, pairs in recommended.items():
        if not pairs:
            continue
        names = ", ".join(f"{p.src}->{p.dst}" for p in pairs)
        findings.append(
            Finding(
                code="MONITOR_FALLBACK_RECOMMENDED",
                severity="error",
                subject=f"instance {instance}",
                message=(
                    f"instance {instance}: pair(s) {names} not usable for "
                    f"{max(p.below_threshold_runs for p in pairs)} consecutive runs "
                    f"(limit {consecutive_runs}); single-GPU fallback recommended"
                ),
                evidence={"pairs": [asdict(p) for p in pairs]},
                fix=(
                    "ansible-playbook playbooks/rollback.yml -l <node> -e rollback_confirm=true "
                    "-e lingbot_mode=single_gpu for the emergency fallback, then fix the path "
                    "and run the provision playbook to plan again"
                ),
            )
        )
    return findings


def probe_error_findings(probe: Mapping[str, Any]) -> list[Finding]:
    errors = list(probe.get("errors") or [])
    if not errors:
        return []
    return [
        Finding(
            code="MONITOR_PROBE_ERRORS",
            severity="error",
            subject="node",
            message=f"the probe could not measure everything: {'; '.join(errors)}",
            evidence={"errors": errors},
            fix="see each error's meaning; the monitor probes again on its next run",
        )
    ]

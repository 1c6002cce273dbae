"""Which GPUs LingBot may use at all: not lost, not in MIG mode, NUMA node known, measured
(when a probe is given), allowed by policy and free of findings at the ineligible severity."""

from __future__ import annotations

from dataclasses import dataclass

from ..node.findings import severity_rank
from .model import UNKNOWN_NUMA_NODE, GpuInput, PlanInputs
from .policy import PlanPolicy


@dataclass(frozen=True)
class Eligibility:
    index: int
    eligible: bool
    reasons: tuple[str, ...]
    link_health_rank: int  # 0 healthy; 1 + worst finding severity rank otherwise


def _selected(selectors: tuple[str, ...], gpu: GpuInput) -> bool:
    return any(
        selector == str(gpu.index) or (gpu.uuid is not None and selector == gpu.uuid)
        for selector in selectors
    )


def unknown_selectors(policy: PlanPolicy, inputs: PlanInputs) -> list[str]:
    """allow_gpus / exclude_gpus entries that name no GPU of this node."""
    known = {str(gpu.index) for gpu in inputs.gpus} | {gpu.uuid for gpu in inputs.gpus if gpu.uuid}
    notes = []
    for key, selectors in (
        ("allow_gpus", policy.allow_gpus or ()),
        ("exclude_gpus", policy.exclude_gpus),
    ):
        notes += [
            f"policy {key} names {selector!r}, which is no GPU of this node (indices "
            f"{', '.join(str(gpu.index) for gpu in inputs.gpus)}); it is ignored"
            for selector in selectors
            if selector not in known
        ]
    return notes


def _numa_reason(gpu: GpuInput, inputs: PlanInputs) -> str | None:
    if gpu.numa_node == UNKNOWN_NUMA_NODE:
        cause = (
            "pci=noacpi on the running kernel command line hides the ACPI NUMA information; "
            "remove it and reboot"
            if "pci=noacpi" in inputs.kernel_cmdline
            else "check the BIOS (ACPI SRAT) and the kernel command line"
        )
        count = inputs.numa_node_count
        nodes = f"{count} NUMA nodes" if count is not None else "an unknown number of NUMA nodes"
        return (
            f"its NUMA node is unknown (sysfs numa_node -1 on a machine with {nodes}), so "
            f"LingBot cannot be bound to it: {cause}"
        )
    return None


def judge_gpu(gpu: GpuInput, inputs: PlanInputs, policy: PlanPolicy) -> Eligibility:  # noqa: PLR0912 - one branch per eligibility rule
    problems: list[str] = []
    notes: list[str] = []
    if gpu.lost:
        problems.append("the driver lost it (GPU lost): reseat or replace it, then reboot")
    if gpu.mig_enabled:
        problems.append("it is in MIG mode; LingBot needs whole GPUs: nvidia-smi -i N -mig 0")
    numa_problem = _numa_reason(gpu, inputs)
    if numa_problem:
        problems.append(numa_problem)
    elif gpu.numa_node_assumed:
        notes.append("sysfs numa_node reads -1 but the machine has one NUMA node: node 0")
    if inputs.probe_present and not gpu.lost:
        if not gpu.in_probe:
            problems.append("the probe did not measure it; run the probe again")
        elif gpu.probe_error:
            problems.append(f"the probe could not measure it: {gpu.probe_error}")
    if policy.allow_gpus is not None and not _selected(policy.allow_gpus, gpu):
        problems.append("policy allow_gpus does not list it")
    if _selected(policy.exclude_gpus, gpu):
        problems.append("policy exclude_gpus lists it")
    limit = severity_rank(policy.ineligible_finding_severity)
    worst = -1
    for finding in gpu.findings:
        rank = severity_rank(finding.severity)
        worst = max(worst, rank)
        if rank >= limit:
            problems.append(
                f"finding {finding.code} ({finding.severity}) at or above "
                f"ineligible_finding_severity {policy.ineligible_finding_severity}"
            )
        elif rank >= severity_rank("warning"):
            notes.append(f"finding {finding.code} ({finding.severity}) lowers its link health")
    if problems:
        reasons = tuple(f"GPU {gpu.index} is not eligible: {problem}." for problem in problems)
    else:
        where = f"NUMA node {gpu.numa_node}"
        reasons = (f"GPU {gpu.index} is eligible: present, not in MIG mode, on {where}.",)
    reasons += tuple(f"GPU {gpu.index}: {note}." for note in notes)
    return Eligibility(gpu.index, not problems, reasons, worst + 1)


def judge_gpus(inputs: PlanInputs, policy: PlanPolicy) -> dict[int, Eligibility]:
    return {gpu.index: judge_gpu(gpu, inputs, policy) for gpu in inputs.gpus}

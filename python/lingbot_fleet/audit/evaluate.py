"""One node's audit record, computed on the controller from what the node module read.

Pure functions: `evaluate_node(node, policy)` turns the `lingbot_audit_node` result and
the policy (inventory variables) into the record fleet.json keeps per node: a facts
summary, the findings, the probe summary, the plan, drift and the pending reboot.
docs/audit.md lists every finding code the audit adds to the link checks. Every finding
carries the fleet's severity for its code (``lingbot_fleet_finding_severity``) before the
planner, the node's status and the exit status judge by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..boot.cmdline import (
    PolicyError,
    build_policy,
    check_policy,
    iommu_vendor_switch,
    parse_cmdline,
)
from ..boot.driver_modules import UNKNOWN
from ..facts import schema_problems
from ..gpu.linkcheck import LinkPolicy, check_links, load_from_probe, probe_gpu_findings
from ..gpu.probe import fill_skipped
from ..lingbot.config import ConfigError, build_config
from ..node.findings import (
    FINDING_SEVERITY_VARIABLE,
    Finding,
    override_severities,
    severity_overrides,
)
from ..plan import POLICY_KEYS, PlanInputError, build_plan

# Words of the boot entry that are not kernel policy: the image and the root device.
BOOT_ONLY_PREFIXES = ("BOOT_IMAGE=", "root=", "initrd=")
BOOT_ONLY_WORDS = frozenset({"ro", "rw"})
MAX_DRIFT_PATHS = 20


@dataclass(frozen=True)
class AuditPolicy:
    """The inventory variables the audit judges a node by (role prefixes stripped)."""

    link: LinkPolicy = field(default_factory=LinkPolicy)
    kernel_present: Mapping[str, Any] = field(default_factory=lambda: {"iommu": "pt"})
    kernel_absent: Sequence[str] = ("pci=noacpi",)
    kernel_iommu_vendor_switch: bool = False
    kernel_pcie_aspm_off: bool = False
    plan: Mapping[str, Any] = field(default_factory=dict)
    config_overrides: Mapping[str, Any] = field(default_factory=dict)
    # The fleet's severity per finding code (node.findings.severity_overrides).
    finding_severity: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_vars(cls, variables: Mapping[str, Any]) -> AuditPolicy:
        """From inventory variables: gpu_checks_*, kernel_cmdline_*, lingbot_service_* and
        lingbot_fleet_finding_severity (ValueError names a bad one)."""
        link_vars = {
            key.removeprefix("gpu_checks_"): value
            for key, value in variables.items()
            if key.startswith("gpu_checks_")
        }
        plan_vars = {
            key.removeprefix("lingbot_service_"): value
            for key, value in variables.items()
            if key.startswith("lingbot_service_")
            and key.removeprefix("lingbot_service_") in POLICY_KEYS
        }
        return cls(
            link=LinkPolicy.from_vars(link_vars),
            kernel_present=dict(variables.get("kernel_cmdline_present") or {}),
            kernel_absent=tuple(variables.get("kernel_cmdline_absent") or ()),
            kernel_iommu_vendor_switch=bool(variables.get("kernel_cmdline_iommu_vendor_switch")),
            kernel_pcie_aspm_off=bool(variables.get("kernel_cmdline_pcie_aspm_off")),
            plan=plan_vars,
            config_overrides=dict(variables.get("lingbot_service_config_overrides") or {}),
            finding_severity=severity_overrides(
                variables.get(FINDING_SEVERITY_VARIABLE, {}), FINDING_SEVERITY_VARIABLE
            ),
        )


def section_error(section: Any) -> str | None:
    if isinstance(section, Mapping) and set(section) == {"error"}:
        return str(section["error"])
    return None


# --- facts ----------------------------------------------------------------------------


def facts_summary(facts: Mapping[str, Any]) -> dict[str, Any]:
    """What the reports show of the facts: the driver's parts (NVML's version, the loaded
    kernel module's, the fabric manager's state and version on NVSwitch systems), the GPUs
    with their links, topology, P2P status."""
    gpus = []
    for gpu in facts.get("gpus") or []:
        pcie = gpu.get("pcie") or {}
        gpus.append(
            {
                "index": gpu.get("index"),
                "model": gpu.get("model"),
                "uuid": gpu.get("uuid"),
                "bus_id": gpu.get("bus_id"),
                "numa_node": gpu.get("numa_node"),
                "lost": bool(gpu.get("lost")),
                "persistence_mode": gpu.get("persistence_mode"),
                "link": {
                    key: pcie.get(key)
                    for key in (
                        "current_gen",
                        "current_width",
                        "max_gen",
                        "max_width",
                        "max_gen_gpu",
                        "max_width_gpu",
                    )
                },
                "upstream_port": (pcie.get("upstream_port") or {}).get("bdf"),
                "host_bridge": gpu.get("host_bridge"),
            }
        )
    fabric_manager = facts.get("fabric_manager")
    return {
        "driver_version": facts.get("driver_version"),
        "kernel_module_version": (facts.get("driver") or {}).get("kernel_module_version"),
        "fabric_manager": (
            {key: fabric_manager.get(key) for key in ("state", "version")}
            if isinstance(fabric_manager, Mapping)
            else None
        ),
        "iommu_mode": (facts.get("iommu") or {}).get("mode"),
        "numa_node_count": (facts.get("numa") or {}).get("node_count"),
        "sources": facts.get("sources"),
        "gpus": gpus,
        "topology": facts.get("topology") or [],
        "p2p_read": (facts.get("p2p") or {}).get("read") or [],
    }


def driver_parts_text(facts: Mapping[str, Any]) -> str:
    """'550.54.15 (kernel module 550.54.15; fabric manager active, 550.54.15)': NVML's
    version, then the loaded module's and the fabric manager's where the facts have them."""
    parts = []
    if facts.get("kernel_module_version"):
        parts.append(f"kernel module {facts['kernel_module_version']}")
    fabric_manager = facts.get("fabric_manager")
    if isinstance(fabric_manager, Mapping):
        state = fabric_manager.get("state") or "state unknown"
        parts.append(
            f"fabric manager {state}, {fabric_manager.get('version') or 'version unknown'}"
        )
    text = str(facts.get("driver_version") or "unknown")
    return f"{text} ({'; '.join(parts)})" if parts else text


def persistence_findings(facts: Mapping[str, Any]) -> list[Finding]:
    findings = []
    for gpu in facts.get("gpus") or []:
        if gpu.get("lost") or gpu.get("persistence_mode") is not False:
            continue
        findings.append(
            Finding(
                code="PERSISTENCE_MODE_OFF",
                severity="warning",
                subject=gpu.get("bus_id") or f"GPU {gpu.get('index')}",
                message=f"GPU {gpu.get('index')} has persistence mode off",
                evidence={"persistence_mode": False},
                fix="run site.yml --tags nvidia_persistence (nvidia-persistenced without "
                "--no-persistence-mode)",
            )
        )
    return findings


# --- probe ----------------------------------------------------------------------------


def probe_summary(probe: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The P2P matrix (GB/s, peer access on, unidirectional) and what failed."""
    indices = sorted({gpu.get("index") for gpu in probe.get("gpus") or []} - {None})
    position = {index: row for row, index in enumerate(indices)}
    matrix: list[list[float | None]] = [[None] * len(indices) for _ in indices]
    data_check_failed = []
    pair_errors = []
    for pair in probe.get("pairs") or []:
        src, dst = pair.get("src"), pair.get("dst")
        if src in position and dst in position:
            enabled = pair.get("p2p_enabled") or {}
            matrix[position[src]][position[dst]] = enabled.get("unidirectional_gbytes_per_s")
        if pair.get("data_check") == "failed":
            data_check_failed.append(f"{src}->{dst}")
        if pair.get("error"):
            pair_errors.append(f"{src}->{dst}: {pair['error']}")
    return {
        "source": source,
        "timestamp": probe.get("timestamp"),
        "duration_s": probe.get("duration_s"),
        "size_bytes": (probe.get("parameters") or {}).get("size_bytes"),
        "gpu_indices": indices,
        "p2p_gbytes_per_s": matrix,
        "h2d_gbytes_per_s": [
            gpu.get("h2d_gbytes_per_s")
            for gpu in sorted(probe.get("gpus") or [], key=lambda g: g.get("index", 0))
        ],
        "data_check_failed": data_check_failed,
        "errors": [str(e) for e in probe.get("errors") or []] + pair_errors,
    }


def probe_findings(
    summary: Mapping[str, Any] | None,
    probe: Mapping[str, Any] | None = None,
    facts: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """PROBE_MISSING; a data check that failed; a GPU the driver could not use (error or
    critical, subject its bus id: linkcheck.probe_gpu_findings); what else the probe
    could not measure (PROBE_ERRORS)."""
    if summary is None:
        return [
            Finding(
                code="PROBE_MISSING",
                severity="info",
                subject="node",
                message="no saved probe result: the plan is provisional",
                evidence={},
                fix="run site.yml (role p2p_probe) or the audit with -e audit_probe=true",
            )
        ]
    findings = probe_gpu_findings(probe, facts)
    for pair in summary["data_check_failed"]:
        findings.append(
            Finding(
                code="P2P_DATA_CHECK_FAILED",
                severity="error",
                subject=f"pair {pair}",
                message=f"peer copy {pair} reported success but the data did not arrive",
                evidence={"probe_timestamp": summary["timestamp"]},
                fix="do not use P2P on this pair: set iommu=pt (role kernel_cmdline), turn "
                "ACS redirect off in the BIOS, and probe again",
            )
        )
    if summary["errors"]:
        findings.append(
            Finding(
                code="PROBE_ERRORS",
                severity="warning",
                subject="node",
                message=(
                    f"the probe could not measure everything ({len(summary['errors'])} error(s))"
                ),
                evidence={"errors": summary["errors"][:MAX_DRIFT_PATHS]},
                fix="read the errors; a lost or busy GPU shows here",
            )
        )
    return findings


# --- kernel command line ----------------------------------------------------------------


def policy_words(words: Sequence[str] | None) -> list[str] | None:
    if words is None:
        return None
    return [w for w in words if w not in BOOT_ONLY_WORDS and not w.startswith(BOOT_ONLY_PREFIXES)]


def kernel_state(kernel: Mapping[str, Any], policy: AuditPolicy) -> dict[str, Any]:
    """Running against next boot (pending reboot) and both against the kernel_cmdline policy."""
    running = policy_words(kernel.get("running")) or []
    next_boot = policy_words(kernel.get("next_boot"))
    grub_defaults = kernel.get("grub_defaults")
    if section_error(grub_defaults) is not None:
        grub_defaults = None
    configured = next_boot if next_boot is not None else grub_defaults
    present = dict(policy.kernel_present)
    if policy.kernel_pcie_aspm_off:
        present.setdefault("pcie_aspm", "off")
    vendor = kernel.get("cpu_vendor")
    if policy.kernel_iommu_vendor_switch and vendor:
        try:
            switch = iommu_vendor_switch(vendor)
            present.setdefault(switch.name, switch.value)
        except PolicyError:
            pass
    cmdline_policy = build_policy(present, list(policy.kernel_absent))
    running_report = check_policy(parse_cmdline(" ".join(running)), cmdline_policy)
    state: dict[str, Any] = {
        "running": kernel.get("running"),
        "next_boot": kernel.get("next_boot"),
        "next_boot_source": kernel.get("next_boot_source"),
        "grub_defaults": grub_defaults,
        "missing_running": [p.render() for p in running_report.missing],
        "unwanted_running": [p.render() for p in running_report.unwanted],
        "pending_reboot": None,
        "added_on_reboot": [],
        "removed_on_reboot": [],
        "next_boot_compliant": None,
        "next_boot_driver": kernel.get("next_boot_driver"),
    }
    if configured is not None:
        state["pending_reboot"] = sorted(configured) != sorted(running)
        state["added_on_reboot"] = [w for w in configured if w not in running]
        state["removed_on_reboot"] = [w for w in running if w not in configured]
        state["next_boot_compliant"] = check_policy(
            parse_cmdline(" ".join(configured)), cmdline_policy
        ).compliant
    return state


def next_boot_driver_findings(state: Mapping[str, Any], gpus_on_bus: int) -> list[Finding]:
    """The next boot's kernel against the GPU driver (boot/driver_modules.py owns the
    judgement and its wording; kernel_cmdline refuses a reboot on the same one)."""
    driver = state.get("next_boot_driver")
    if not isinstance(driver, Mapping) or not gpus_on_bus:
        return []
    evidence = {key: driver.get(key) for key in ("kernel", "image", "modules", "state")}
    evidence["next_boot_source"] = state.get("next_boot_source")
    if driver.get("problem"):
        return [
            Finding(
                code="NEXT_BOOT_LOSES_GPU_DRIVER",
                severity="error",
                subject="node",
                message=f"next boot would lose the driver of {gpus_on_bus} GPU(s): "
                f"{driver['problem']}",
                evidence=evidence,
                fix=str(driver.get("fix")),
            )
        ]
    if driver.get("state") == UNKNOWN:
        return [
            Finding(
                code="NEXT_BOOT_DRIVER_UNKNOWN",
                severity="info",
                subject="node",
                message=str(driver.get("note") or "the next boot's kernel is not known"),
                evidence=evidence,
                fix="read the default boot entry (grubby --info=DEFAULT, or grub.cfg) and "
                "check /lib/modules/<its release> for the NVIDIA module",
            )
        ]
    return []


def kernel_findings(state: Mapping[str, Any]) -> list[Finding]:
    findings = []
    if state["missing_running"] or state["unwanted_running"]:
        if state["next_boot_compliant"]:
            fix = "the boot configuration is already right: reboot the node"
        else:
            fix = "run site.yml --tags kernel_cmdline, then reboot the node"
        problems = [f"{p} missing" for p in state["missing_running"]]
        problems += [f"{p} present" for p in state["unwanted_running"]]
        findings.append(
            Finding(
                code="KERNEL_PARAMS_NOT_IN_EFFECT",
                severity="error",
                subject="node",
                message="the running kernel does not follow the kernel_cmdline policy: "
                + ", ".join(problems),
                evidence={
                    "missing_running": list(state["missing_running"]),
                    "unwanted_running": list(state["unwanted_running"]),
                    "next_boot_compliant": state["next_boot_compliant"],
                },
                fix=fix,
            )
        )
    if state["pending_reboot"]:
        findings.append(
            Finding(
                code="REBOOT_PENDING",
                severity="warning",
                subject="node",
                message="the next boot changes the kernel command line: "
                + ", ".join(
                    [f"+{w}" for w in state["added_on_reboot"]]
                    + [f"-{w}" for w in state["removed_on_reboot"]]
                ),
                evidence={
                    "added_on_reboot": list(state["added_on_reboot"]),
                    "removed_on_reboot": list(state["removed_on_reboot"]),
                    "next_boot_source": state["next_boot_source"],
                },
                fix="reboot the node in a maintenance window (kernel_cmdline_reboot=if_required)",
            )
        )
    return findings


# --- drift: deployed LingBot configs against the plan -------------------------------------


def differing_paths(deployed: Any, planned: Any, prefix: str = "") -> list[str]:
    """Key paths where two documents differ (lists compared by position)."""
    if isinstance(deployed, Mapping) and isinstance(planned, Mapping):
        paths = []
        for key in sorted(set(deployed) | set(planned), key=str):
            where = f"{prefix}.{key}" if prefix else str(key)
            if key not in deployed:
                paths.append(f"{where} (missing)")
            elif key not in planned:
                paths.append(f"{where} (not in plan)")
            else:
                paths += differing_paths(deployed[key], planned[key], where)
        return paths
    if isinstance(deployed, list) and isinstance(planned, list):
        if len(deployed) != len(planned):
            return [f"{prefix or '.'} ({len(deployed)} items, plan {len(planned)})"]
        paths = []
        for position, (left, right) in enumerate(zip(deployed, planned, strict=True)):
            paths += differing_paths(left, right, f"{prefix}[{position}]")
        return paths
    same = deployed == planned and type(deployed) is type(planned)
    numbers = (deployed, planned)
    if all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        same = float(deployed) == float(planned)
    return [] if same else [prefix or "."]


def expected_config(instance: Mapping[str, Any], overrides: Mapping[str, Any]) -> Any:
    """The config.yaml lingbot_service writes for a planned instance (overrides merged)."""
    try:
        return build_config(
            instance["config"], overrides, instance.get("peer_access_threshold_gbytes_per_s")
        )
    except ConfigError:
        return instance.get("config")


def load_yaml(text: str) -> Any:
    """A deployed config.yaml; ValueError when it is no YAML, or when PyYAML is not there
    to read it (the one-node doctor runs with the standard library alone)."""
    try:
        import yaml  # noqa: PLC0415 - the doctor runs without it
    except ImportError:
        raise ValueError("PyYAML is not installed here, so the config was not compared") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(str(error)) from error


def drift_state(
    lingbot: Mapping[str, Any],
    plan: Mapping[str, Any] | None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    configs = lingbot.get("configs") or {}
    if not configs:
        return {"deployed": False, "drifted": False, "instances": []}
    planned = {
        i["name"]: expected_config(i, overrides or {}) for i in (plan or {}).get("instances") or []
    }
    instances = []
    for name in sorted(set(configs) | set(planned)):
        if name not in configs:
            instances.append({"name": name, "status": "missing", "differences": []})
            continue
        if name not in planned:
            instances.append({"name": name, "status": "not_in_plan", "differences": []})
            continue
        try:
            deployed = load_yaml(configs[name]["text"])
        except ValueError as error:
            instances.append(
                {"name": name, "status": "unreadable", "differences": [str(error).splitlines()[0]]}
            )
            continue
        paths = differing_paths(deployed, planned[name])
        instances.append(
            {
                "name": name,
                "status": "differs" if paths else "same",
                "differences": paths[:MAX_DRIFT_PATHS],
            }
        )
    return {
        "deployed": True,
        "drifted": any(i["status"] != "same" for i in instances),
        "instances": instances,
    }


def drift_message(instance: Mapping[str, Any]) -> str:
    text = f"LingBot instance {instance['name']}: {instance['status'].replace('_', ' ')}"
    if instance["differences"]:
        text += f" ({', '.join(instance['differences'][:3])})"
    return text


def drift_findings(drift: Mapping[str, Any]) -> list[Finding]:
    if not drift["deployed"]:
        return [
            Finding(
                code="LINGBOT_NOT_DEPLOYED",
                severity="info",
                subject="node",
                message="no LingBot config on the node",
                evidence={},
                fix="run site.yml to deploy the plan",
            )
        ]
    findings = []
    for instance in drift["instances"]:
        if instance["status"] == "same":
            continue
        findings.append(
            Finding(
                code="LINGBOT_CONFIG_DRIFT",
                severity="warning",
                subject=f"instance {instance['name']}",
                message=drift_message(instance),
                evidence={"status": instance["status"], "differences": instance["differences"]},
                fix="run site.yml to deploy the plan again (or find who changed the config)",
            )
        )
    return findings


# --- the plan the inputs give now against the deployed one --------------------------------

# What a provision run would change on the node: which instances, which GPUs in which order,
# where they are bound, which pairs use peer access and how the KV cache moves. Measured
# figures and reasons are left out: they move between probes without changing a decision.
PLAN_DECISION_KEYS = (
    "gpu_uuids",
    "numa_node",
    "peer_access",
    "peer_access_pairs",
    "kv_cache_strategy",
    "port",
)


def plan_decisions(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        str(instance.get("name")): {key: instance.get(key) for key in PLAN_DECISION_KEYS}
        for instance in plan.get("instances") or []
        if isinstance(instance, Mapping)
    }


def plan_changes(deployed: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    """The decisions a provision run would change, as key paths (empty when none)."""
    return differing_paths(plan_decisions(deployed), plan_decisions(fresh))


def plan_change_findings(deployed: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[Finding]:
    changes = plan_changes(deployed, fresh)
    if not changes:
        return []
    return [
        Finding(
            code="PLAN_WOULD_CHANGE",
            severity="warning",
            subject="node",
            message=(
                "the node's facts and probe now give a different plan from the deployed one "
                f"({', '.join(changes[:MAX_DRIFT_PATHS])}); a provision run would change LingBot"
            ),
            evidence={"changes": changes[:MAX_DRIFT_PATHS], "summary": fresh.get("summary")},
            fix=(
                "read the findings for the cause (a degraded link, a lost GPU); run site.yml "
                "--check --diff to see the change, then site.yml to apply it"
            ),
        )
    ]


# --- generations ------------------------------------------------------------------------


def generations_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "generation": row.get("generation"),
            "ok": bool(row.get("ok")),
            "committed": row.get("committed"),
            "run_id": row.get("run_id"),
            "files": len(row.get("files") or []),
            "kinds": list(row.get("kinds") or []),
            "error": row.get("error"),
        }
        for row in rows
    ]


def generation_findings(rows: Sequence[Mapping[str, Any]]) -> list[Finding]:
    return [
        Finding(
            code="GENERATION_DAMAGED",
            severity="warning",
            subject=f"generation {row['generation']}",
            message=f"generation {row['generation']} cannot be used for a rollback",
            evidence={"error": row.get("error")},
            fix=str(row.get("error") or "repair or remove the generation"),
        )
        for row in rows
        if not row.get("ok")
    ]


# --- the whole node -----------------------------------------------------------------------


def unreadable(section: str, error: str) -> Finding:
    return Finding(
        code="AUDIT_SECTION_UNREADABLE",
        severity="error",
        subject=section,
        message=f"the audit could not read {section} on the node: {error}",
        evidence={"error": error},
        fix="read the error; the rest of the audit of this node is still reported",
    )


def checked_facts(node: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, list[Finding]]:
    """(the node's facts document, or None when it is unreadable, and why as a finding)."""
    facts = node.get("facts")
    error = section_error(facts)
    if error is None and facts is not None:
        problems = schema_problems(facts)
        error = "; ".join(problems) if problems else None
    if error is not None:
        return None, [unreadable("facts", error)]
    return facts, []


def chosen_probe(
    node: Mapping[str, Any], fresh_probe: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any] | None, str, list[Finding]]:
    """(the probe result the audit uses, "fresh" or "saved", why the saved one is unreadable).

    A fresh probe is completed from the saved one where it skipped GPUs; without one the
    node's saved result is used.
    """
    saved_probe = node.get("probe")
    if section_error(saved_probe) is not None:
        saved_probe = None
    if fresh_probe:
        return fill_skipped(dict(fresh_probe), saved_probe), "fresh", []
    probe = node.get("probe")
    error = section_error(probe)
    if error is not None:
        return None, "saved", [unreadable("probe", error)]
    return probe, "saved", []


def node_plan(
    facts: Mapping[str, Any],
    probe: Mapping[str, Any] | None,
    policy: AuditPolicy,
    link_findings: Sequence[Finding],
    deployed_plan: Mapping[str, Any] | None,
) -> tuple[dict[str, Any] | None, str | None, list[Finding]]:
    """(the plan the inputs give now, why there is none, its findings) for one node.

    Planned as the deploy path plans: from the plan in force (its hysteresis, its
    instance names) and, unless the policy says, the layer count it was made with.
    """
    plan_policy = dict(policy.plan)
    deployed_layers = ((deployed_plan or {}).get("policy") or {}).get("model_num_layers")
    if plan_policy.get("model_num_layers") is None and deployed_layers is not None:
        plan_policy["model_num_layers"] = deployed_layers
    try:
        plan = build_plan(facts, probe, plan_policy, link_findings, deployed_plan)
    except PlanInputError as failure:
        finding = Finding(
            code="PLAN_INPUT_ERROR",
            severity="error",
            subject="node",
            message=f"the planner cannot plan this node: {failure}",
            evidence={},
            fix="follow the message; then audit again",
        )
        return None, str(failure), [finding]
    if not (plan.get("baseline") or {}).get("drifted_pairs"):
        return plan, None, []
    finding = Finding(
        code="P2P_BASELINE_DRIFT",
        severity="warning",
        subject="node",
        message=f"P2P bandwidth off the baseline: {plan['baseline']['drifted_pairs']}",
        evidence={"baseline": plan["baseline"]},
        fix="compare with a healthy node of the same model; reseat, check BIOS",
    )
    return plan, None, [finding]


def evaluate_node(
    node: Mapping[str, Any],
    policy: AuditPolicy,
    fresh_probe: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The node's audit record (the per-node entry of fleet.json, without host and status)."""

    def judged(found: list[Finding]) -> list[Finding]:
        """With the fleet's severities (findings judged once are left as they are)."""
        return override_severities(found, policy.finding_severity, FINDING_SEVERITY_VARIABLE)

    facts, findings = checked_facts(node)
    probe, probe_source, probe_unreadable = chosen_probe(node, fresh_probe)
    findings += probe_unreadable
    probe_info = probe_summary(probe, probe_source) if probe else None

    # The fleet's severities first: the planner judges the GPUs by them.
    link_findings = judged(check_links(facts, policy.link, load_from_probe(probe)) if facts else [])
    findings += link_findings
    if facts:
        findings += persistence_findings(facts)
    gpu_probe_findings = judged(probe_findings(probe_info, probe, facts))
    findings += gpu_probe_findings
    # The planner leaves out GPUs with findings by subject (bus id), as on the deploy path.
    link_findings = link_findings + [f for f in gpu_probe_findings if f.code == "PROBE_GPU_FAILED"]

    kernel = None
    if section_error(node.get("kernel")) is None and node.get("kernel"):
        kernel = kernel_state(node["kernel"], policy)
        findings += kernel_findings(kernel)
        findings += next_boot_driver_findings(kernel, len((facts or {}).get("gpus") or []))
    else:
        findings.append(unreadable("kernel", section_error(node.get("kernel")) or "missing"))

    lingbot = node.get("lingbot")
    readable_lingbot = lingbot if section_error(lingbot) is None else None
    deployed_plan = readable_lingbot.get("plan") if readable_lingbot is not None else None
    if section_error(deployed_plan) is not None or not isinstance(deployed_plan, Mapping):
        deployed_plan = None
    plan, plan_error = None, None
    if facts:
        plan, plan_error, plan_findings = node_plan(
            facts, probe, policy, link_findings, deployed_plan
        )
        findings += plan_findings

    drift = None
    if readable_lingbot is not None:
        # The configs are judged against the plan that deployed them (plan.json); the plan
        # the inputs give now is compared with that one on its own.
        drift = drift_state(readable_lingbot, deployed_plan or plan, policy.config_overrides)
        findings += drift_findings(drift)
        if deployed_plan and plan:
            findings += plan_change_findings(deployed_plan, plan)
    else:
        findings.append(unreadable("lingbot", section_error(lingbot) or "missing"))

    generations: list[dict[str, Any]] = []
    rows = node.get("generations")
    if isinstance(rows, list):
        generations = generations_summary(rows)
        findings += generation_findings(rows)
    else:
        findings.append(unreadable("generations", section_error(rows) or "missing"))

    return {
        "facts": facts_summary(facts) if facts else None,
        "findings": [finding.to_dict() for finding in judged(findings)],
        "probe": probe_info,
        "plan": plan,
        "plan_error": plan_error,
        "drift": drift,
        "kernel": kernel,
        "pending_reboot": (kernel or {}).get("pending_reboot"),
        "generations": generations,
    }

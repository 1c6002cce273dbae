"""Link and NUMA findings on the lab profiles and on edited copies of a healthy pair."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from facts_support import SMI_COMMAND, a6000_pair, boot_lab_node, load_profile

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.findings import Finding, at_or_above
from lingbot_fleet.linkcheck import LinkExpectation, LinkPolicy, check_links

POLICY = LinkPolicy()


def facts_of(raw: dict[str, Any], tmp_path: Path, lab_env: Any, cmdline: str | None = None):
    node = boot_lab_node(raw, tmp_path, cmdline=cmdline)
    lab_env(node)
    return node, gather_facts(node.root, smi_command=SMI_COMMAND)


def codes(findings: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.code, f.severity, f.subject) for f in findings]


def load_sample(bus_id: str, gen: int, pstate: str, load_s: float = 1.0) -> dict[str, Any]:
    """gpu_link_load's entry: one reading after `load_s` of copies, `pstate` at both ends."""
    reading = {"gen": gen, "width": 16, "performance_state": pstate, "load_s": load_s}
    reading |= {"pstate_before": pstate, "pstate_after": pstate}
    return {"bus_id": bus_id, "possible": True, "reading": reading}


def test_x8_profile_reports_the_narrow_slot(tmp_path: Path, lab_env: Any, lab_pynvml: Any) -> None:
    _node, facts = facts_of(load_profile("a6000-x8"), tmp_path, lab_env)
    findings = check_links(facts, POLICY)
    assert codes(findings) == [("PCIE_WIDTH_BELOW_EXPECTED", "error", "0000:02:00.0")]
    assert findings[0].evidence["current_width"] == 8
    assert findings[0].evidence["max_width"] == 8
    assert findings[0].fix.startswith("the slot offers only x8")


def test_gen3_profile_reports_the_generation(tmp_path: Path, lab_env: Any, lab_pynvml: Any) -> None:
    _node, facts = facts_of(load_profile("a6000-gen3"), tmp_path, lab_env)
    findings = check_links(facts, POLICY)
    assert [f.code for f in findings] == ["PCIE_GEN_BELOW_EXPECTED"] * 2
    assert [f.evidence["basis"] for f in findings] == ["negotiable_max"] * 2
    assert [f.evidence["max_gen"] for f in findings] == [3, 3]
    assert "Gen4" in findings[0].fix


def test_idle_gen1_profile_has_no_finding_at_rest_or_under_load(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    node, facts = facts_of(load_profile("a6000-idle-gen1"), tmp_path, lab_env)
    assert [gpu["pcie"]["current_gen"] for gpu in facts["gpus"]] == [1, 1]
    assert check_links(facts, POLICY) == []
    for gpu in facts["gpus"]:
        node.busy(gpu["index"], time.time() + 60)
    loaded = gather_facts(node.root, smi_command=SMI_COMMAND)
    load = {
        "gpus": [
            load_sample(g["bus_id"], g["pcie"]["current_gen"], g["performance_state"])
            for g in loaded["gpus"]
        ]
    }
    assert [s["reading"]["gen"] for s in load["gpus"]] == [4, 4]
    assert check_links(facts, POLICY, load) == []


def test_low_power_during_load_is_indeterminate_not_failed(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(a6000_pair(), tmp_path, lab_env)
    load = {"gpus": [load_sample("0000:41:00.0", 1, "P8")]}
    findings = check_links(facts, POLICY, load)
    assert codes(findings) == [("PCIE_GEN_INDETERMINATE", "info", "0000:41:00.0")]
    assert at_or_above(findings, "warning") == []


def test_gen_below_expected_under_load(tmp_path: Path, lab_env: Any, no_pynvml: None) -> None:
    _node, facts = facts_of(a6000_pair(), tmp_path, lab_env)
    load = {"gpus": [load_sample("0000:42:00.0", 2, "P0")]}
    findings = check_links(facts, POLICY, load)
    assert codes(findings) == [("PCIE_GEN_BELOW_EXPECTED", "error", "0000:42:00.0")]
    assert findings[0].evidence["basis"] == "under_load"
    assert findings[0].evidence["load"]["gen_under_load"] == 2


def test_model_expectation_overrides_the_gpu_maximum(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("a6000-gen3"), tmp_path, lab_env)
    policy = LinkPolicy.from_vars(
        {"expected_links": {"NVIDIA RTX A6000": {"gen": 3}}, "expected_link_default": {}}
    )
    assert policy.expected_by_model["NVIDIA RTX A6000"] == LinkExpectation(gen=3)
    assert check_links(facts, policy) == []


def test_chipset_profile_reports_the_pch_port(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("a6000-chipset"), tmp_path, lab_env)
    findings = check_links(facts, POLICY)
    assert codes(findings) == [
        ("PCIE_WIDTH_BELOW_EXPECTED", "error", "0000:04:00.0"),
        ("PCIE_GPU_BEHIND_CHIPSET", "warning", "0000:04:00.0"),
    ]
    assert findings[1].evidence["reasons"] == [
        "bridge 0000:00:1c.0 (0x8086:0x7a38) is a known chipset bridge"
    ]


def test_chipset_behind_a_narrow_uplink(tmp_path: Path, lab_env: Any, no_pynvml: None) -> None:
    """AMD style: CPU root port x4 -> chipset switch -> x16 slot with the GPU."""
    raw = a6000_pair()
    raw["pcie_ports"][1]["link"] = {"gen": 4, "width": 4, "max_gen": 4, "max_width": 4}
    raw["pcie_ports"].append(
        {
            "bdf": "0000:43:00.0",
            "kind": "switch_upstream",
            "parent": "0000:40:03.1",
            "vendor_id": 0x1B21,
            "device_id": 0x1180,
            "link": {"gen": 4, "width": 4, "max_gen": 4, "max_width": 4},
        }
    )
    raw["pcie_ports"].append(
        {
            "bdf": "0000:44:00.0",
            "kind": "switch_downstream",
            "parent": "0000:43:00.0",
            "vendor_id": 0x1B21,
            "device_id": 0x1180,
            "link": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
        }
    )
    raw["gpus"][1] = {**copy.deepcopy(raw["gpus"][1]), "bdf": "0000:45:00.0"}
    raw["gpus"][1]["parent"] = "0000:44:00.0"
    _node, facts = facts_of(raw, tmp_path, lab_env)
    findings = [f for f in check_links(facts, POLICY) if f.code == "PCIE_GPU_BEHIND_CHIPSET"]
    assert codes(findings) == [("PCIE_GPU_BEHIND_CHIPSET", "warning", "0000:45:00.0")]
    assert findings[0].evidence["reasons"] == [
        "bridge 0000:43:00.0 (0x1b21:0x1180) feeds the GPU's x16 slot through an x4 link",
        "bridge 0000:40:03.1 (0x1022:0x1483) feeds the GPU's x16 slot through an x4 link",
    ]


def test_healthy_profiles_have_no_link_finding(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    for name in ("a6000-phb", "a6000-dual-socket", "h100-sxm-nvswitch", "pcie-4gpu-two-switches"):
        _node, facts = facts_of(load_profile(name), tmp_path / name, lab_env)
        assert check_links(facts, POLICY) == [], name


def test_noacpi_on_two_sockets_is_an_error(tmp_path: Path, lab_env: Any, no_pynvml: None) -> None:
    raw = load_profile("a6000-dual-socket")
    _node, facts = facts_of(raw, tmp_path, lab_env, cmdline="BOOT_IMAGE=/vmlinuz ro pci=noacpi")
    findings = check_links(facts, LinkPolicy(numa_node_count=2))
    assert [(f.code, f.severity) for f in findings] == [("NUMA_NODE_MISSING", "error")] * 2
    assert findings[0].fix.startswith("remove pci=noacpi")
    # Without a policy value the count comes from /sys/devices/system/node (two here).
    from_sysfs = check_links(facts, POLICY)
    assert [(f.code, f.severity) for f in from_sysfs] == [("NUMA_NODE_MISSING", "error")] * 2
    facts["numa"]["node_count"] = None
    unknown_sockets = check_links(facts, POLICY)
    assert [(f.code, f.severity) for f in unknown_sockets] == [("NUMA_NODE_MISSING", "warning")] * 2


def test_dual_socket_numa_from_devices_without_noacpi(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("a6000-dual-socket"), tmp_path, lab_env)
    assert facts["numa"]["device_nodes"] == [0, 1]
    facts["gpus"][1]["numa_node"] = -1
    findings = check_links(facts, POLICY)
    assert [(f.code, f.severity) for f in findings] == [("NUMA_NODE_MISSING", "error")]
    assert "firmware" in findings[0].fix


def test_finding_refuses_unknown_severity() -> None:
    with pytest.raises(ValueError, match="unknown severity 'fatal'; use one of: info, warning"):
        Finding("X_Y", "fatal", "node", "m")


def test_acs_redirect_on_the_switch_is_reported_per_port(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("a6000-iommu-acs"), tmp_path, lab_env)
    acs = [f for f in check_links(facts, POLICY) if f.code == "PCIE_ACS_REDIRECT"]
    assert [f.subject for f in acs] == sorted(
        {b["bdf"] for g in facts["gpus"] for b in g["bridges"][:1]}
    )
    assert acs[0].severity == "warning"
    assert "request redirect" in acs[0].message
    assert acs[0].fix.startswith(
        f"turn ACS redirect off for this port (BIOS, or setpci -s {acs[0].subject}"
    )
    _node, healthy = facts_of(load_profile("pcie-4gpu-two-switches"), tmp_path / "b", lab_env)
    assert [f for f in check_links(healthy, POLICY) if f.code == "PCIE_ACS_REDIRECT"] == []

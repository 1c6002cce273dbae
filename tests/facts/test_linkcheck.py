"""Link and NUMA findings on the lab profiles and on edited copies of a healthy pair."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from facts_support import SMI_COMMAND, a6000_pair, boot_lab_node, load_profile

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.gpu.linkcheck import (
    LinkExpectation,
    LinkPolicy,
    check_links,
    host_copy_floor_gbytes_per_s,
)
from lingbot_fleet.node.findings import Finding, at_or_above

POLICY = LinkPolicy()


def facts_of(raw: dict[str, Any], tmp_path: Path, lab_env: Any, cmdline: str | None = None):
    node = boot_lab_node(raw, tmp_path, cmdline=cmdline)
    lab_env(node)
    return node, gather_facts(node.root, use_nvml=False, smi_command=SMI_COMMAND)


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


def test_gen_trained_below_capability_under_load(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(a6000_pair(), tmp_path, lab_env)
    load = {"gpus": [load_sample("0000:42:00.0", 2, "P0")]}
    findings = check_links(facts, POLICY, load)
    assert codes(findings) == [("PCIE_LINK_TRAINED_BELOW_CAPABILITY", "error", "0000:42:00.0")]
    assert findings[0].message == (
        "GPU 1 (NVIDIA RTX A6000) reached only Gen2 under load although GPU and slot can do "
        "Gen4, expected Gen4"
    )
    assert (findings[0].evidence["aspect"], findings[0].evidence["basis"]) == ("gen", "under_load")
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
        "where isolation between the devices behind the switch is not needed, add "
        f"{acs[0].subject} to pcie_acs_redirect_off_bridges (role pcie_acs"
    )
    _node, healthy = facts_of(load_profile("pcie-4gpu-two-switches"), tmp_path / "b", lab_env)
    assert [f for f in check_links(healthy, POLICY) if f.code == "PCIE_ACS_REDIRECT"] == []


def narrow_uplink(**uplink: int) -> dict[str, Any]:
    """The narrow-uplink profile with other values for both ends' trained link."""
    raw = load_profile("pcie-switch-narrow-uplink")
    for port in raw["pcie_ports"][:2]:
        port["link"].update(uplink)
    return raw


def test_facts_show_both_ends_of_every_bridge_link(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("pcie-switch-narrow-uplink"), tmp_path, lab_env)
    bridges = facts["gpus"][0]["bridges"]
    assert [(b["bdf"], b["port_type"], b["link"]) for b in bridges] == [
        ("0000:42:00.0", "switch_downstream", link_facts(4, 16, 4, 16)),
        ("0000:41:00.0", "switch_upstream", link_facts(4, 8, 4, 16)),
        ("0000:40:01.1", "root_port", link_facts(4, 8, 4, 16)),
    ]
    assert facts["gpus"][0]["pcie"]["current_width"] == 16


def link_facts(gen: int, width: int, max_gen: int, max_width: int) -> dict[str, int]:
    return {"current_gen": gen, "current_width": width, "max_gen": max_gen, "max_width": max_width}


def test_a_switch_uplink_trained_narrow_is_named_once(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("pcie-switch-narrow-uplink"), tmp_path, lab_env)
    findings = check_links(facts, POLICY)
    assert codes(findings) == [("PCIE_LINK_TRAINED_BELOW_CAPABILITY", "error", "0000:41:00.0")]
    [finding] = findings
    assert finding.message == (
        "The link switch upstream 0000:41:00.0 - root port 0000:40:01.1 trained at x8 although "
        "both ends can do x16 (below it: 0000:43:00.0, 0000:44:00.0)"
    )
    assert finding.fix == (
        "root port 0000:40:01.1 can do x16 but the link trained at x8: reseat the switch card, "
        "check the riser or cable, and look for PCIe (AER) errors of 0000:41:00.0 and "
        "0000:40:01.1 in the kernel log; then probe again"
    )
    assert finding.evidence["link"]["device_max_width"] == 16
    assert finding.evidence["link"]["port_max_width"] == 16
    assert (finding.evidence["aspect"], finding.evidence["basis"]) == ("width", "at_rest")
    # Without root the port types are unknown: the path's shape pairs the same two ends.
    for gpu in facts["gpus"]:
        for bridge in gpu["bridges"]:
            bridge["port_type"] = None
    assert codes(check_links(facts, POLICY)) == codes(findings)


def test_an_uplink_the_slot_wires_narrow_is_a_slot_finding(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    raw = narrow_uplink()
    raw["pcie_ports"][0]["link"]["max_width"] = 8
    _node, facts = facts_of(raw, tmp_path, lab_env)
    findings = check_links(facts, POLICY)
    assert codes(findings) == [("PCIE_WIDTH_BELOW_EXPECTED", "error", "0000:41:00.0")]
    assert findings[0].evidence["limited_by"] == "port"
    assert findings[0].message == (
        "The link switch upstream 0000:41:00.0 - root port 0000:40:01.1 runs at x8, expected "
        "x16: root port 0000:40:01.1 can do at most x8"
    )
    assert findings[0].fix.startswith("root port 0000:40:01.1 offers only x8: move the switch")


def test_an_uplink_idling_at_gen1_is_never_a_finding(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(narrow_uplink(gen=1, width=16), tmp_path, lab_env)
    assert check_links(facts, POLICY) == []
    raw = narrow_uplink(gen=3, width=16)
    raw["pcie_ports"][1]["link"]["max_gen"] = 3
    _node, gen3 = facts_of(raw, tmp_path / "gen3", lab_env)
    findings = check_links(gen3, POLICY)
    assert codes(findings) == [("PCIE_GEN_BELOW_EXPECTED", "error", "0000:41:00.0")]
    assert findings[0].evidence["basis"] == "negotiable_max"
    assert findings[0].message.endswith(
        "its ends can negotiate at most Gen3 (switch upstream 0000:41:00.0), expected Gen4 "
        "for 0000:43:00.0, 0000:44:00.0"
    )


def test_a_gpu_link_trained_below_its_slot_is_not_a_slot_finding(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    raw = a6000_pair()
    raw["gpus"][1]["link"]["width"] = 8
    _node, facts = facts_of(raw, tmp_path, lab_env)
    findings = check_links(facts, POLICY)
    assert codes(findings) == [("PCIE_LINK_TRAINED_BELOW_CAPABILITY", "error", "0000:42:00.0")]
    assert findings[0].message == (
        "GPU 1 (NVIDIA RTX A6000) trained at x8 although GPU and slot can do x16"
    )
    assert findings[0].evidence["current_width"] == 8
    assert findings[0].fix.startswith("root port 0000:40:03.1 can do x16 but the link trained")


def test_host_copy_floors_follow_the_raw_link_rate() -> None:
    assert host_copy_floor_gbytes_per_s(5, 16) == 47.3
    assert host_copy_floor_gbytes_per_s(4, 16) == 23.6
    assert host_copy_floor_gbytes_per_s(4, 8) == 11.8
    assert host_copy_floor_gbytes_per_s(3, 16) == 11.8
    assert host_copy_floor_gbytes_per_s(2, 16) == 6.0


def test_host_bandwidth_is_judged_against_what_the_path_can_do(
    tmp_path: Path, lab_env: Any, no_pynvml: None
) -> None:
    _node, facts = facts_of(load_profile("pcie-4gpu-two-switches"), tmp_path, lab_env)
    healthy = {
        g["bus_id"]: {"h2d_gbytes_per_s": 24.9, "d2h_gbytes_per_s": 26.3} for g in facts["gpus"]
    }
    assert check_links(facts, POLICY, host_copies=healthy) == []
    # Every link at full width, yet half the figure: a link below its generation under load.
    slow = {**healthy, "0000:63:00.0": {"h2d_gbytes_per_s": 12.3, "d2h_gbytes_per_s": 25.9}}
    [finding] = check_links(facts, POLICY, host_copies=slow)
    assert (finding.code, finding.subject) == ("PCIE_HOST_BANDWIDTH_BELOW_FLOOR", "0000:63:00.0")
    assert finding.message == (
        "GPU 2 (NVIDIA L40S) copies 12.3 GB/s host-to-device, below the 23.6 GB/s floor of "
        "its path (Gen4 x16: 31.5 GB/s raw x 0.75)"
    )
    assert finding.fix.startswith("every link on the path trained at full width: read the links")
    # GPU 1's x8 slot is its own finding and its x8 figures meet the x8 floor; the same
    # figures on GPU 0's x16 path do not.
    _node, x8 = facts_of(load_profile("a6000-x8"), tmp_path / "x8", lab_env)
    figures = {"h2d_gbytes_per_s": 12.7, "d2h_gbytes_per_s": 13.3}
    judged = check_links(x8, POLICY, host_copies={g["bus_id"]: figures for g in x8["gpus"]})
    assert codes(judged) == [
        ("PCIE_HOST_BANDWIDTH_BELOW_FLOOR", "error", "0000:01:00.0"),
        ("PCIE_WIDTH_BELOW_EXPECTED", "error", "0000:02:00.0"),
    ]

"""The facts match the lab profile they were gathered on, with NVML and with nvidia-smi."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from facts_support import SMI_COMMAND, LabNode, a6000_pair, boot_lab_node, profile_paths

from lingbot_fleet.facts import FACTS_SCHEMA_VERSION, gather_facts, schema_problems

PORT_TYPES = {
    "root_port": "root_port",
    "chipset_port": "root_port",
    "switch_upstream": "switch_upstream",
    "switch_downstream": "switch_downstream",
}
PROFILE_IDS = [path.stem for path in profile_paths()]


def expected_bridges(node: LabNode, bdf: str) -> tuple[list[str], str]:
    from lingbot_lab.hwstate import ancestors

    chain = ancestors(node.profile, bdf)
    return chain[:-1], chain[-1]


def assert_matches_state(facts: dict[str, Any], node: LabNode) -> None:
    state = node.state
    assert schema_problems(facts) == []
    assert facts["schema_version"] == FACTS_SCHEMA_VERSION
    assert facts["kernel"]["cmdline"] == state["boot"]["cmdline"]
    assert facts["iommu"]["mode"] == state["boot"]["iommu_mode"]
    assert len(facts["gpus"]) == len(state["gpus"])
    ports = {port["bdf"]: port for port in node.profile["pcie_ports"]}
    for gpu, want in zip(facts["gpus"], state["gpus"], strict=True):
        assert gpu["index"] == want["index"]
        assert gpu["bus_id"] == want["bdf"]
        assert gpu["lost"] == want["lost"]
        assert gpu["numa_node"] == want["numa_node"]
        assert gpu["local_cpulist"] == want["cpu_list"]
        assert gpu["iommu_group"] == want["iommu_group"]
        bridges, host_bridge = expected_bridges(node, want["bdf"])
        assert [bridge["bdf"] for bridge in gpu["bridges"]] == bridges
        assert gpu["host_bridge"] == host_bridge
        for bridge in gpu["bridges"]:
            port = ports[bridge["bdf"]]
            assert bridge["port_type"] == PORT_TYPES[port["kind"]]
            assert bridge["acs_status"] == "read"
            acs = {key: value for key, value in bridge["acs"].items() if key in port["acs"]}
            assert acs == port["acs"]
            assert bridge["link"]["max_width"] == port["link"]["max_width"]
            assert bridge["link"]["max_gen"] == port["link"]["max_gen"]
        link = want["link"]
        assert gpu["pcie"]["max_gen_gpu"] == link["max_gen_gpu"]
        assert gpu["pcie"]["max_width_gpu"] == link["max_width_gpu"]
        assert gpu["pcie"]["upstream_port"]["bdf"] == bridges[0]
        if want["lost"]:
            continue
        assert gpu["uuid"] == want["uuid"]
        assert gpu["model"] == want["name"]
        assert gpu["pcie"]["current_gen"] == link["gen_idle"]
        assert gpu["pcie"]["current_width"] == link["width"]
        assert gpu["pcie"]["max_gen"] == link["max_gen"]
        assert gpu["pcie"]["max_width"] == link["max_width"]
        assert gpu["performance_state"] == "P8"
        assert gpu["persistence_mode"] == bool(want["persistence_default"])
        assert gpu["mig_mode"] in ({0: "disabled", 1: "enabled"}[want["mig_mode"]], None)
    lost = {gpu["index"] for gpu in state["gpus"] if gpu["lost"]}
    for pair in state["pairs"]:
        a, b = pair["a"], pair["b"]
        if a in lost or b in lost:
            continue
        assert facts["topology"][a][b] == pair["topology"], (a, b)
        for kind in ("read", "write", "nvlink", "atomics"):
            assert facts["p2p"][kind][a][b] == pair["p2p_status"][kind], (kind, a, b)


def gather(node: LabNode, use_nvml: bool) -> dict[str, Any]:
    return gather_facts(node.root, use_nvml=use_nvml, smi_command=SMI_COMMAND)


@pytest.fixture(params=PROFILE_IDS or [pytest.param(None, marks=pytest.mark.skip("no profiles"))])
def profile_node(request: pytest.FixtureRequest, tmp_path: Path, lab_env: Any) -> LabNode:
    from facts_support import load_profile

    node = boot_lab_node(load_profile(request.param), tmp_path)
    lab_env(node)
    return node


@pytest.fixture
def pair_node(tmp_path: Path, lab_env: Any) -> LabNode:
    node = boot_lab_node(a6000_pair(), tmp_path)
    lab_env(node)
    return node


def test_profile_facts_through_nvml(profile_node: LabNode, lab_pynvml: Any) -> None:
    facts = gather(profile_node, True)
    assert facts["sources"]["gpus"] == "nvml"
    assert facts["notes"] == []
    assert_matches_state(facts, profile_node)


def test_profile_facts_through_nvidia_smi(profile_node: LabNode, no_pynvml: None) -> None:
    facts = gather(profile_node, True)
    assert facts["sources"]["gpus"] == "nvidia-smi"
    assert facts["notes"][0].startswith("NVML not used: pynvml is not importable")
    assert_matches_state(facts, profile_node)


def test_pair_facts_both_sources_agree(pair_node: LabNode, lab_pynvml: Any) -> None:
    through_nvml = gather(pair_node, True)
    through_smi = gather(pair_node, False)
    assert_matches_state(through_nvml, pair_node)
    assert_matches_state(through_smi, pair_node)
    for doc in (through_nvml, through_smi):
        for gpu in doc["gpus"]:
            gpu["mig_mode"] = None
            # NVLink state, memory health, clock event reasons and the recovery action
            # come from NVML alone (no NVLink here).
            assert gpu.pop("nvlink", None) is None
            for key in ("memory", "fabric", "clock_events", "recovery_action"):
                gpu.pop(key, None)
    strip = ("sources", "notes")
    assert {k: v for k, v in through_nvml.items() if k not in strip} == {
        k: v for k, v in through_smi.items() if k not in strip
    }


def test_under_load_nvml_reports_load_generation_and_p0(
    pair_node: LabNode, lab_pynvml: Any
) -> None:
    pair_node.busy(1, time.time() + 60)
    facts = gather(pair_node, True)
    assert [gpu["pcie"]["current_gen"] for gpu in facts["gpus"]] == [1, 4]
    assert [gpu["performance_state"] for gpu in facts["gpus"]] == ["P8", "P0"]


def test_without_nvml_or_nvidia_smi_sysfs_still_answers(
    pair_node: LabNode, no_pynvml: None
) -> None:
    facts = gather_facts(pair_node.root, smi_command=["/nonexistent/nvidia-smi"])
    assert facts["sources"]["gpus"] == "sysfs"
    assert facts["notes"][1].startswith("nvidia-smi not usable: /nonexistent/nvidia-smi")
    assert [gpu["bus_id"] for gpu in facts["gpus"]] == ["0000:41:00.0", "0000:42:00.0"]
    assert facts["gpus"][0]["uuid"] is None
    assert facts["gpus"][0]["pcie"]["current_width"] == 16
    assert facts["topology"] == []


def test_iommu_off_and_noacpi_as_the_kernel_shows_them(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    cmdline = "BOOT_IMAGE=/boot/vmlinuz ro amd_iommu=off pci=noacpi"
    node = boot_lab_node(a6000_pair(), tmp_path, cmdline=cmdline)
    lab_env(node)
    facts = gather(node, True)
    assert facts["iommu"] == {"mode": "off", "group_types": [], "groups": {}}
    assert [gpu["numa_node"] for gpu in facts["gpus"]] == [-1, -1]
    assert facts["p2p"]["read"] == [["X", "CNS"], ["CNS", "X"]]
    assert_matches_state(facts, node)


def test_numactl_is_found_on_the_path_under_the_root(tmp_path: Path) -> None:
    from lingbot_fleet.facts.document import find_program

    sbin = tmp_path / "usr" / "sbin"
    sbin.mkdir(parents=True)
    (sbin / "numactl").write_text("#!/bin/sh\n")
    assert find_program("numactl", tmp_path, path="/usr/bin") is None
    (sbin / "numactl").chmod(0o755)
    assert find_program("numactl", tmp_path, path="/usr/bin") == "/usr/sbin/numactl"
    (tmp_path / "usr" / "bin").mkdir()
    (tmp_path / "usr" / "bin" / "numactl").write_text("#!/bin/sh\n")
    (tmp_path / "usr" / "bin" / "numactl").chmod(0o755)
    assert find_program("numactl", tmp_path, path="/usr/bin") == "/usr/bin/numactl"


def test_the_host_section_is_optional_but_checked_when_there(pair_node: LabNode) -> None:
    facts = gather_facts(pair_node.root, use_nvml=False, smi_command=SMI_COMMAND)
    assert set(facts["host"]) == {"numactl_path"}
    assert schema_problems({key: value for key, value in facts.items() if key != "host"}) == []
    assert schema_problems({**facts, "host": {}}) == ["host: missing key numactl_path"]

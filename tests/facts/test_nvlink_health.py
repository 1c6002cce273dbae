"""NVLinks trained down, through the lab's libnvidia-ml (fault nvlink_down): the facts
count each GPU's active NVLinks, and gpu_checks (the audit alike) names the GPU and the
count (gpu/nvlink.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from facts_support import SMI_COMMAND, boot_lab_node, load_profile

from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.node_document import collect_node
from lingbot_fleet.facts import gather_facts
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links
from lingbot_fleet.gpu.nvlink import fabric_findings, nvlink_findings

H100 = "h100-sxm-nvswitch"


def h100_facts(tmp_path: Path, lab_env: Any, faults: list[dict[str, Any]]) -> dict[str, Any]:
    profile = load_profile(H100)
    profile["faults"] = faults
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    return gather_facts(root=str(node.root), use_nvml=True)


def nvlink_codes(facts: dict[str, Any], policy: LinkPolicy | None = None) -> list[Any]:
    findings = check_links(facts, policy or LinkPolicy())
    return [f for f in findings if f.code == "NVLINK_LINKS_DOWN"]


def test_a_gpu_trained_12_of_18_nvlinks_is_named_with_the_count(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts = h100_facts(tmp_path, lab_env, [{"kind": "nvlink_down", "gpu": 1, "links": 6}])
    assert [{k: gpu["nvlink"][k] for k in ("links", "active")} for gpu in facts["gpus"][:3]] == [
        {"links": 18, "active": 18},
        {"links": 18, "active": 12},
        {"links": 18, "active": 18},
    ]
    # The topology NVML gives takes the trained links: NV12 to and from GPU 1 only.
    assert facts["topology"][0][1] == "NV12"
    assert facts["topology"][1][2] == "NV12"
    assert facts["topology"][0][2] == "NV18"
    [finding] = nvlink_codes(facts)
    gpu = facts["gpus"][1]
    assert (finding.severity, finding.subject) == ("warning", gpu["bus_id"])
    assert finding.message == (
        f"GPU 1 ({gpu['uuid']}) has 12 of 18 NVLinks active (a NVIDIA H100 80GB HBM3 has 18): "
        "links trained down or failed, so its peer copies over NVLink get about 12/18 of "
        "their bandwidth"
    )
    assert finding.evidence["active"] == 12
    assert "nvidia-smi nvlink -s -i 1" in finding.fix


def test_every_nvlink_trained_is_no_finding(tmp_path: Path, lab_env: Any, lab_pynvml: Any) -> None:
    facts = h100_facts(tmp_path, lab_env, [])
    assert {gpu["nvlink"]["active"] for gpu in facts["gpus"]} == {18}
    assert nvlink_codes(facts) == []


def test_a_gpu_with_no_nvlink_active_is_an_error(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts = h100_facts(tmp_path, lab_env, [{"kind": "nvlink_down", "gpu": 3, "links": 18}])
    [finding] = nvlink_codes(facts)
    assert (finding.severity, finding.evidence["active"]) == ("error", 0)


def test_a_pcie_gpu_without_nvlink_is_not_judged(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    node = boot_lab_node(load_profile("a6000-phb"), tmp_path)
    lab_env(node)
    facts = gather_facts(root=str(node.root), use_nvml=True)
    assert {gpu["nvlink"] is None for gpu in facts["gpus"]} == {True}
    assert nvlink_codes(facts) == []


GPU = {"index": 0, "bus_id": "0000:18:00.0", "uuid": "GPU-1", "lost": False}


@pytest.mark.parametrize(
    ("model", "nvlink", "table", "expected"),
    [
        # A PCIe card whose NVLink bridge is not fitted: its links listed, none active.
        ("NVIDIA RTX A6000", {"links": 4, "active": 0}, {}, None),
        # A bridged pair with one link down: NVML's own count for a model not in the table.
        ("NVIDIA RTX A6000", {"links": 4, "active": 3}, {}, ("warning", 4)),
        # The fleet's table over the built-in one.
        ("NVIDIA H100 80GB HBM3", {"links": 18, "active": 16}, {"NVIDIA H100 80GB HBM3": 16}, None),
        ("NVIDIA H200", {"links": 18, "active": 17}, {}, ("warning", 18)),
        # NVML gives no NVLink state (a VM given one GPU): not judged, whatever the model.
        ("NVIDIA H200", None, {}, None),
    ],
)
def test_the_count_a_gpu_should_have(
    model: str, nvlink: Any, table: dict[str, int], expected: Any
) -> None:
    findings = nvlink_findings({**GPU, "model": model, "nvlink": nvlink}, table)
    got = (findings[0].severity, findings[0].evidence["expected"]) if findings else None
    assert got == expected


def test_the_fleet_table_comes_from_the_role_variable() -> None:
    policy = LinkPolicy.from_vars({"nvlinks_by_model": {"NVIDIA H100 80GB HBM3": "16"}})
    assert policy.nvlinks_by_model == {"NVIDIA H100 80GB HBM3": 16}


# --- the NVLink fabric of an NVSwitch system ------------------------------------------------


def test_a_fabric_set_up_reads_completed_and_pcie_gpus_have_none(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts = h100_facts(tmp_path, lab_env, [])
    assert {gpu["fabric"] for gpu in facts["gpus"]} == {"completed"}
    assert [f for f in check_links(facts, LinkPolicy()) if "FABRIC" in f.code] == []


def test_the_fabric_manager_down_is_critical_and_no_gpu_is_planned(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    """Fault test: the fabric manager never set the fabric up (its service down): every
    GPU's fabric is not started, CUDA refuses to start (the probe says so), and the plan
    leaves the GPUs out until it runs."""
    profile = load_profile(H100)
    profile["faults"] = [{"kind": "fabric_manager_down"}]
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    record = evaluate_node(
        collect_node(root=str(node.root), use_nvml=True, smi_command=SMI_COMMAND), AuditPolicy()
    )
    fabric = [f for f in record["findings"] if f["code"] == "NVLINK_FABRIC_NOT_READY"]
    assert len(fabric) == 8
    assert {f["severity"] for f in fabric} == {"critical"}
    assert "its NVLink fabric is not started" in fabric[0]["message"]
    assert "nvidia-fabricmanager" in fabric[0]["fix"]
    planned = [
        gpu
        for instance in (record["plan"] or {}).get("instances") or []
        for gpu in instance["gpus"]
    ]
    assert planned == [], record["plan"]


def test_a_fabric_state_the_toolkit_does_not_know_is_a_note() -> None:
    [note] = fabric_findings({**GPU, "fabric": "unknown 7"})
    assert (note.code, note.severity) == ("FABRIC_STATE_UNKNOWN", "info")
    assert "'unknown 7'" in note.message
    assert fabric_findings({**GPU, "fabric": None}) == []
    assert fabric_findings({**GPU, "fabric": "not_supported"}) == []


@pytest.mark.parametrize("count", [0, -2, 19, "many", True, 1.5])
def test_a_table_count_that_is_no_link_count_is_refused_naming_the_model(count: Any) -> None:
    with pytest.raises(ValueError, match=r"^gpu_checks_nvlinks_by_model\['NVIDIA H200'\] is "):
        LinkPolicy.from_vars({"nvlinks_by_model": {"NVIDIA H200": count}})

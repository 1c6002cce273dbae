"""GPU memory health through the lab's libnvidia-ml (faults row_remap_pending,
row_remap_failed, ecc_uncorrected, pages_retired): the facts read ECC, row remapping and
page retirement, gpu_checks and the audit name the GPU, and the planner leaves a GPU whose
remap failed, or which has retired as many pages as NVIDIA replaces a GPU at, out."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from facts_support import SMI_COMMAND, boot_lab_node, load_profile

from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.node_document import collect_node
from lingbot_fleet.facts import gather_facts
from lingbot_fleet.gpu.linkcheck import LinkPolicy, check_links
from lingbot_fleet.gpu.memory_health import memory_findings

MEMORY_CODES = (
    "ROW_REMAP_FAILED",
    "ROW_REMAP_PENDING",
    "RETIRED_PAGES_LIMIT",
    "RETIRED_PAGES_PENDING",
    "ECC_UNCORRECTED_ERRORS",
)


def lab_root(tmp_path: Path, lab_env: Any, *faults: dict[str, Any]) -> Path:
    profile = copy.deepcopy(load_profile("pcie-4gpu-two-switches"))
    profile["faults"] = list(faults)
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    return node.root


def memory_codes(facts: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (f.code, f.severity, f.subject)
        for f in check_links(facts, LinkPolicy())
        if f.code in MEMORY_CODES
    ]


def test_healthy_memory_reads_as_such_and_raises_nothing(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    facts = gather_facts(root=str(lab_root(tmp_path, lab_env)), use_nvml=True)
    assert facts["gpus"][0]["memory"] == {
        "ecc_enabled": True,
        "uncorrected_volatile": 0,
        "uncorrected_aggregate": 0,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failed": False},
        # An Ampere-or-later GPU: page retirement is not supported (row remapping is).
        "retired_pages": None,
    }
    assert memory_codes(facts) == []


def test_a_pending_remap_and_uncorrected_errors_are_named(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    root = lab_root(
        tmp_path,
        lab_env,
        {"kind": "row_remap_pending", "gpu": 0},
        {"kind": "ecc_uncorrected", "gpu": 2, "count": 3},
    )
    facts = gather_facts(root=str(root), use_nvml=True)
    bus = [gpu["bus_id"] for gpu in facts["gpus"]]
    assert memory_codes(facts) == [
        ("ROW_REMAP_PENDING", "warning", bus[0]),
        ("ECC_UNCORRECTED_ERRORS", "error", bus[0]),
        ("ECC_UNCORRECTED_ERRORS", "error", bus[2]),
    ]
    [pending] = [f for f in check_links(facts, LinkPolicy()) if f.code == "ROW_REMAP_PENDING"]
    assert pending.fix.startswith("reset the GPU while nothing uses it (nvidia-smi -r -i 0)")
    [errors] = [
        f
        for f in check_links(facts, LinkPolicy())
        if f.subject == bus[2] and f.code in MEMORY_CODES
    ]
    assert f"GPU 2 ({facts['gpus'][2]['uuid']}): 3 uncorrectable ECC error(s)" in errors.message


def test_a_failed_remap_is_critical_and_the_gpu_is_not_planned(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    root = lab_root(tmp_path, lab_env, {"kind": "row_remap_failed", "gpu": 1})
    record = evaluate_node(
        collect_node(root=str(root), use_nvml=True, smi_command=SMI_COMMAND), AuditPolicy()
    )
    failed = [f for f in record["findings"] if f["code"] == "ROW_REMAP_FAILED"]
    bus_1 = record["facts"]["gpus"][1]["bus_id"]
    assert [(f["severity"], f["subject"]) for f in failed] == [("critical", bus_1)]
    assert "return it to the vendor" in failed[0]["fix"]
    planned = {index for instance in record["plan"]["instances"] for index in instance["gpus"]}
    assert 1 not in planned
    assert planned, record["plan"]


def test_retired_pages_pending_and_at_the_limit_are_named_and_the_limit_is_not_planned(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    root = lab_root(
        tmp_path,
        lab_env,
        {"kind": "pages_retired", "gpu": 0, "single_bit": 3, "pending": True},
        {"kind": "pages_retired", "gpu": 2, "single_bit": 40, "double_bit": 19},
        {"kind": "pages_retired", "gpu": 3, "single_bit": 45, "double_bit": 15},
    )
    record = evaluate_node(
        collect_node(root=str(root), use_nvml=True, smi_command=SMI_COMMAND), AuditPolicy()
    )
    gpus = record["facts"]["gpus"]
    facts = gather_facts(root=str(root), use_nvml=True)
    assert [gpu["memory"]["retired_pages"] for gpu in facts["gpus"]] == [
        {"single_bit": 3, "double_bit": 0, "pending": True},
        None,
        {"single_bit": 40, "double_bit": 19, "pending": False},
        {"single_bit": 45, "double_bit": 15, "pending": False},
    ]
    named = [
        (f["code"], f["severity"], f["subject"])
        for f in record["findings"]
        if f["code"] in MEMORY_CODES
    ]
    # 59 pages retired is below the limit; 60 is at it.
    assert named == [
        ("RETIRED_PAGES_PENDING", "warning", gpus[0]["bus_id"]),
        ("RETIRED_PAGES_LIMIT", "critical", gpus[3]["bus_id"]),
    ]
    [limit] = [f for f in record["findings"] if f["code"] == "RETIRED_PAGES_LIMIT"]
    assert "60 memory pages retired" in limit["message"]
    assert "nvidia-smi -q -d PAGE_RETIREMENT -i 3" in limit["fix"]
    planned = {index for instance in record["plan"]["instances"] for index in instance["gpus"]}
    assert 3 not in planned
    assert {0, 2} <= planned, record["plan"]


def test_what_nvml_does_not_give_is_unknown_and_raises_nothing() -> None:
    gpu = {"index": 0, "bus_id": "0000:41:00.0", "uuid": "GPU-1"}
    unknown = {
        "ecc_enabled": None,
        "uncorrected_volatile": None,
        "uncorrected_aggregate": None,
        "remapped_rows": None,
        "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
    }
    assert memory_findings({**gpu, "memory": unknown}) == []
    assert memory_findings(gpu) == []

"""The audit on lab trees: the node module through AnsiballZ, evaluation, the CLI end to end."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from facts_support import LAB_SMI, REPO_ROOT, LabNode, boot_lab_node, load_profile

from lingbot_fleet.audit.cli import add_audit_parser
from lingbot_fleet.audit.evaluate import AuditPolicy, evaluate_node
from lingbot_fleet.audit.node_document import collect_node

ANSIBLE = REPO_ROOT / ".venv" / "bin" / "ansible"
NODE_PYTHON = Path("/usr/bin/python3")


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    def boot(profile: str) -> LabNode:
        node = boot_lab_node(load_profile(profile), tmp_path)
        monkeypatch.setenv("LINGBOT_LAB_ROOT", str(node.lab_root))
        monkeypatch.setenv("LINGBOT_LAB_LIB", str(REPO_ROOT / "lab" / "node"))
        return node

    return boot


def collect(node: LabNode) -> dict[str, Any]:
    return collect_node(
        root=str(node.root), use_nvml=False, smi_command=[str(NODE_PYTHON), str(LAB_SMI)]
    )


def codes(record: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((f["code"], f["subject"]) for f in record["findings"])


def test_noacpi_node_findings(lab: Any) -> None:
    record = evaluate_node(collect(lab("a6000-noacpi")), AuditPolicy())
    assert codes(record) == [
        ("KERNEL_PARAMS_NOT_IN_EFFECT", "node"),
        ("LINGBOT_NOT_DEPLOYED", "node"),
        ("NUMA_NODE_MISSING", "0000:18:00.0"),
        ("NUMA_NODE_MISSING", "0000:32:00.0"),
        ("PERSISTENCE_MODE_OFF", "0000:18:00.0"),
        ("PERSISTENCE_MODE_OFF", "0000:32:00.0"),
        ("PROBE_MISSING", "node"),
    ]
    kernel = next(f for f in record["findings"] if f["code"] == "KERNEL_PARAMS_NOT_IN_EFFECT")
    assert kernel["evidence"]["missing_running"] == ["iommu=pt"]
    assert kernel["evidence"]["unwanted_running"] == ["pci=noacpi"]
    assert record["plan"]["mode"] == "none"


def test_x8_node_has_the_width_finding_and_a_plan(lab: Any) -> None:
    record = evaluate_node(collect(lab("a6000-x8")), AuditPolicy())
    width = [f for f in record["findings"] if f["code"] == "PCIE_WIDTH_BELOW_EXPECTED"]
    assert [(f["subject"], f["evidence"]["current_width"]) for f in width] == [("0000:02:00.0", 8)]
    assert record["plan"]["provisional"] is True


def test_pending_reboot_from_grub_cfg(lab: Any) -> None:
    node = lab("a6000-phb")
    running = (node.root / "proc" / "cmdline").read_text().split()
    grub_cfg = node.root / "boot" / "grub" / "grub.cfg"
    grub_cfg.parent.mkdir(parents=True)
    grub_cfg.write_text(f"menuentry 'x' {{\n  linux {' '.join(running)} iommu=pt\n}}\n")
    record = evaluate_node(collect(node), AuditPolicy())
    assert record["pending_reboot"] is True
    assert record["kernel"]["added_on_reboot"] == ["iommu=pt"]
    assert record["kernel"]["removed_on_reboot"] == []
    kernel = next(f for f in record["findings"] if f["code"] == "KERNEL_PARAMS_NOT_IN_EFFECT")
    assert kernel["fix"] == "the boot configuration is already right: reboot the node"
    assert ("REBOOT_PENDING", "node") in codes(record)


def test_config_drift_against_the_plan(lab: Any) -> None:
    node = lab("a6000-phb")
    plan = evaluate_node(collect(node), AuditPolicy())["plan"]
    for instance in plan["instances"]:
        config_dir = node.root / "etc" / "lingbot" / instance["name"]
        config_dir.mkdir(parents=True)
        (config_dir / "config.yaml").write_text(yaml.safe_dump(instance["config"]))
    assert evaluate_node(collect(node), AuditPolicy())["drift"]["drifted"] is False
    first = plan["instances"][0]
    changed = {**first["config"], "debug_mode": True}
    (node.root / "etc" / "lingbot" / first["name"] / "config.yaml").write_text(
        yaml.safe_dump(changed)
    )
    record = evaluate_node(collect(node), AuditPolicy())
    assert [i for i in record["drift"]["instances"] if i["status"] != "same"] == [
        {"name": first["name"], "status": "differs", "differences": ["debug_mode"]}
    ]
    drift = next(f for f in record["findings"] if f["code"] == "LINGBOT_CONFIG_DRIFT")
    assert drift["message"] == f"LingBot instance {first['name']}: differs (debug_mode)"


def tree_checksums(root: Path) -> dict[str, str]:
    sums = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            sums[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


@pytest.mark.skipif(not NODE_PYTHON.exists(), reason="needs /usr/bin/python3 as the node Python")
def test_node_module_through_ansible_changes_nothing(lab: Any, tmp_path: Path) -> None:
    node = lab("a6000-phb")
    before = tree_checksums(node.root)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_LIBRARY": str(REPO_ROOT / "roles" / "fleet_audit" / "library"),
    }
    args = {"root": str(node.root), "use_nvml": False, "nvidia_smi": str(LAB_SMI)}
    argv = [str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local", "--check"]
    argv += ["-m", "lingbot_audit_node", "-a", json.dumps(args)]
    argv += ["-e", f"ansible_python_interpreter={NODE_PYTHON}", "--tree", str(tmp_path / "tree")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "tree" / "localhost").read_text())
    assert result["changed"] is False
    assert [g["bus_id"] for g in result["audit"]["facts"]["gpus"]] == [
        "0000:41:00.0",
        "0000:42:00.0",
    ]
    assert result["audit"]["plan"]["mode"] == "single_gpu"
    assert tree_checksums(node.root) == before


@pytest.mark.skipif(not NODE_PYTHON.exists(), reason="needs /usr/bin/python3 as the node Python")
def test_cli_end_to_end_lists_unreachable_nodes(lab: Any, tmp_path: Path, capsys: Any) -> None:
    node = lab("a6000-x8")
    hosts: dict[str, Any] = {f"n{i}": {"ansible_connection": "local"} for i in range(3)}
    hosts["dead"] = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    group_vars = {
        "ansible_python_interpreter": str(NODE_PYTHON),
        "fleet_audit_root": str(node.root),
        "gpu_facts_use_nvml": False,
        "gpu_facts_nvidia_smi": str(LAB_SMI),
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"gpu-nodes": {"hosts": hosts, "vars": group_vars}}}})
    )
    parser = argparse.ArgumentParser()
    add_audit_parser(parser.add_subparsers())
    report_dir = tmp_path / "report"
    args = parser.parse_args(
        ["audit", "-i", str(inventory), "-l", "n*:dead", "--report-dir", str(report_dir)]
    )
    before = tree_checksums(node.root)
    assert args.func(args) == 2
    assert tree_checksums(node.root) == before
    fleet = json.loads((report_dir / "fleet.json").read_text())
    assert fleet["schema_version"] == 1
    assert [(n["host"], n["status"]) for n in fleet["nodes"]] == [
        ("dead", "unreachable"),
        ("n0", "findings"),
        ("n1", "findings"),
        ("n2", "findings"),
    ]
    assert fleet["findings_by_code"][0]["code"] == "KERNEL_PARAMS_NOT_IN_EFFECT"
    err = capsys.readouterr().err
    assert "audit: dead unreachable" in err
    parser_args = parser.parse_args(
        [
            "audit",
            "-i",
            str(inventory),
            "-l",
            "n1",
            "--report-dir",
            str(report_dir),
            "--fail-on",
            "critical",
        ]
    )
    assert parser_args.func(parser_args) == 0


def test_missing_inventory_exits_3(tmp_path: Path, capsys: Any) -> None:
    parser = argparse.ArgumentParser()
    add_audit_parser(parser.add_subparsers())
    args = parser.parse_args(
        ["audit", "-i", str(tmp_path / "nope.yml"), "--report-dir", str(tmp_path)]
    )
    assert args.func(args) == 3
    assert "does not exist; pass -i with an inventory file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("inventory", "message"),
    [
        ("all:\n  hosts:\n    elsewhere:\n", "no host of group gpu-nodes in "),
        # Ansible only warns about a source it cannot parse: the warning names it.
        ("all: [unclosed\n", "Failed to parse inventory"),
    ],
)
def test_an_inventory_without_gpu_nodes_exits_3_and_writes_no_report(
    tmp_path: Path, capsys: Any, inventory: str, message: str
) -> None:
    # The inventory is read while the playbook starts; its verdict still decides.
    (tmp_path / "hosts.yml").write_text(inventory)
    parser = argparse.ArgumentParser()
    add_audit_parser(parser.add_subparsers())
    reports = tmp_path / "reports"
    args = parser.parse_args(
        ["audit", "-i", str(tmp_path / "hosts.yml"), "--report-dir", str(reports)]
    )
    assert args.func(args) == 3
    assert message in capsys.readouterr().err
    assert not reports.exists()

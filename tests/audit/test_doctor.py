"""`lingbot-fleet doctor` on lab trees: the facts, the checks and a short probe through the
lab's driver libraries and nvidia-smi, the audit's codes, and the standard library alone."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from facts_support import (
    LAB_LIB,
    LAB_SMI,
    REPO_ROOT,
    SMI_COMMAND,
    LabNode,
    boot_lab_node,
    cuda_library,
    load_profile,
)

from lingbot_fleet.audit.doctor import examine, render_text
from lingbot_fleet.audit.fleet import EXIT_FINDINGS


def lab_node(tmp_path: Path, lab_env: Any, name: str, *faults: dict) -> LabNode:
    profile = copy.deepcopy(load_profile(name))
    profile["faults"] = list(faults)
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    return node


def private_libcuda(tmp_path: Path) -> str:
    """A private copy: the lab's libcuda reads the node once per process."""
    private = tmp_path / "driver" / "libcuda.so.1"
    private.parent.mkdir()
    shutil.copy(cuda_library(), private)
    return str(private)


def tree_sums(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.md5(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def codes(document: dict[str, Any]) -> set[str]:
    return {finding["code"] for finding in document["findings"]}


def test_the_doctor_measures_every_path_and_judges_like_the_audit(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    node = lab_node(tmp_path, lab_env, "a6000-phb")
    before = tree_sums(node.root)
    document = examine(
        root=str(node.root), smi_command=SMI_COMMAND, cuda_library=private_libcuda(tmp_path)
    )
    assert tree_sums(node.root) == before
    probe = document["probe_document"]
    assert [gpu["error"] for gpu in probe["gpus"]] == [None, None]
    assert all(gpu["h2d_gbytes_per_s"] for gpu in probe["gpus"])
    assert [(p["src"], p["dst"]) for p in probe["pairs"]] == [(0, 1), (1, 0)]
    assert all(p["p2p_enabled"]["unidirectional_gbytes_per_s"] for p in probe["pairs"])
    assert probe["parameters"]["size_bytes"] == 64 << 20
    assert document["probe"]["source"] == "fresh"
    assert "PROBE_MISSING" not in codes(document)
    assert document["facts"]["driver_version"] == node.state["driver"]["version"]
    text = render_text(document)
    assert text.startswith(f"lingbot-fleet doctor: {document['host']}\n")
    assert "  GPU 0  NVIDIA RTX A6000  0000:41:00.0  NUMA 0  PCIe Gen" in text
    assert "peer copies (GB/s, peer access on):" in text
    assert text.splitlines()[-1].startswith(f"verdict: {document['status']} (")
    assert "kernel: no default boot entry was found" in text
    # No NVSwitch: no fabric manager in the driver's line.
    version = node.state["driver"]["version"]
    assert f"driver {version} (kernel module {version}) (GPUs read through" in text


def test_a_node_without_its_driver_is_critical_and_not_probed(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    node = lab_node(tmp_path, lab_env, "a6000-phb", {"kind": "driver_not_loaded"})
    document = examine(root=str(node.root), smi_command=SMI_COMMAND)
    assert document["probe_document"] is None
    assert document["probe_note"] == "not run: the NVIDIA driver does not answer"
    assert "GPU_DRIVER_NOT_LOADED" in codes(document)
    assert document["status"] == "findings"


def test_nvlinks_trained_down_are_named(tmp_path: Path, lab_env: Any, lab_pynvml: Any) -> None:
    node = lab_node(
        tmp_path, lab_env, "h100-sxm-nvswitch", {"kind": "nvlink_down", "gpu": 5, "links": 6}
    )
    document = examine(root=str(node.root), probe=False, smi_command=SMI_COMMAND)
    [finding] = [f for f in document["findings"] if f["code"] == "NVLINK_LINKS_DOWN"]
    assert finding["evidence"]["index"] == 5
    assert "has 12 of 18 NVLinks active" in finding["message"]
    text = render_text(document)
    assert "NVLINK_LINKS_DOWN" in text
    # The driver's parts: NVML's version, the loaded module's, the fabric manager's.
    version = node.state["driver"]["version"]
    assert (
        f"driver {version} (kernel module {version}; fabric manager active, {version}) "
        "(GPUs read through nvml)"
    ) in text


def test_the_command_runs_on_the_standard_library_alone(tmp_path: Path, lab_env: Any) -> None:
    """python3 -S: no site-packages, so no pynvml, no PyYAML, no Ansible; the driver is
    read through nvidia-smi (the lab's, first on PATH)."""
    node = lab_node(tmp_path, lab_env, "a6000-noacpi")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(LAB_SMI)
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT / "python"),
        "LINGBOT_LAB_ROOT": str(node.lab_root),
        "LINGBOT_LAB_LIB": str(LAB_LIB),
    }
    done = subprocess.run(
        [
            *(sys.executable, "-S", "-m", "lingbot_fleet.cli"),
            *("doctor", "--json", "--no-probe", "--root", str(node.root)),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=120,
    )
    assert done.returncode == EXIT_FINDINGS, done.stderr
    document = json.loads(done.stdout)
    assert document["facts"]["sources"]["gpus"] == "nvidia-smi"
    assert document["probe_note"] == "not run (--no-probe)"
    assert {"NUMA_NODE_MISSING", "KERNEL_PARAMS_NOT_IN_EFFECT"} <= codes(document)

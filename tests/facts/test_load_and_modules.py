"""libcuda binding, the link-under-load sample, the role modules through AnsiballZ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from facts_support import (
    LAB_SMI,
    REPO_ROOT,
    LabNode,
    a6000_pair,
    boot_lab_node,
    cuda_library,
    load_profile,
    nvml_library,
)

from lingbot_fleet.cuda import CudaDriver, CudaError, host_to_device_load
from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.load import link_under_load
from lingbot_fleet.linkcheck import LinkPolicy, check_links

ANSIBLE = REPO_ROOT / ".venv" / "bin" / "ansible"
# A node's Python: the system interpreter, which has neither lingbot_fleet nor pynvml, so
# the module runs only on what AnsiballZ ships (pynvml is found through nvml_python_path).
NODE_PYTHON = Path("/usr/bin/python3")
VENV_SITE_PACKAGES = str(next((REPO_ROOT / ".venv" / "lib").glob("python3*/site-packages")))


@pytest.fixture
def idle_gen1_node(tmp_path: Path, lab_env: Any) -> LabNode:
    node = boot_lab_node(load_profile("a6000-idle-gen1"), tmp_path)
    lab_env(node)
    return node


def test_cuda_binding_reports_devices_and_copies(idle_gen1_node: LabNode) -> None:
    driver = CudaDriver(str(cuda_library()))
    assert driver.device_count() == 2
    assert driver.pci_bus_id(driver.device(1)) == idle_gen1_node.state["gpus"][1]["bdf"]
    result = host_to_device_load(driver, 0, 1 << 20, 0.05)
    assert result.copies >= 1
    assert result.copied_bytes == result.copies << 20
    assert result.elapsed_ms > 0
    busy_file = idle_gen1_node.lab_root / "run" / "lingbot-lab" / "busy" / "0"
    assert busy_file.exists()


def test_cuda_errors_name_the_call(idle_gen1_node: LabNode) -> None:
    driver = CudaDriver(str(cuda_library()))
    with pytest.raises(CudaError, match=r"^cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE"):
        driver.device(7)


def test_missing_libcuda_is_a_clear_error() -> None:
    with pytest.raises(
        CudaError, match=r"dlopen failed: LIBRARY_NOT_FOUND .*is the driver installed"
    ):
        CudaDriver("/nonexistent/libcuda.so.1")


def test_link_under_load_sees_gen4_and_p0_on_idle_gen1(
    idle_gen1_node: LabNode, lab_pynvml: Any
) -> None:
    load = link_under_load(
        cuda_library=str(cuda_library()), duration_s=0.2, size_bytes=1 << 20, interval_s=0.02
    )
    assert load["possible"] is True
    assert load["sampler"] == "nvml"
    assert [gpu["bus_id"] for gpu in load["gpus"]] == ["0000:21:00.0", "0000:22:00.0"]
    for gpu in load["gpus"]:
        assert {s["gen"] for s in gpu["samples"] if s.get("pstate") == "P0"} == {4}
    facts = gather_facts(idle_gen1_node.root)
    assert check_links(facts, LinkPolicy(), load) == []


def test_link_under_load_without_libcuda_says_why(idle_gen1_node: LabNode, lab_pynvml: Any) -> None:
    load = link_under_load(cuda_library="/nonexistent/libcuda.so.1")
    assert load["possible"] is False
    assert "LIBRARY_NOT_FOUND" in load["reason"]


@pytest.fixture(autouse=True)
def _node_python() -> None:
    if not NODE_PYTHON.exists():
        pytest.skip(f"{NODE_PYTHON} (a Python without lingbot_fleet) is needed")


def run_module(
    node: LabNode, module: str, args: dict[str, Any], nvml: bool, tree: Path
) -> dict[str, Any]:
    """One ad-hoc module call through AnsiballZ, as a node would run it."""
    library_dirs = ":".join(
        str(REPO_ROOT / "roles" / r / "library") for r in ("gpu_facts", "gpu_checks")
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_LIBRARY": library_dirs,
        "LINGBOT_LAB_ROOT": str(node.lab_root),
        "LINGBOT_LAB_LIB": str(REPO_ROOT / "lab" / "node"),
    }
    if nvml:
        env["LD_LIBRARY_PATH"] = str(nvml_library().parent)
    argv = [
        str(ANSIBLE),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-m",
        module,
        "-a",
        json.dumps(args),
        "-e",
        f"ansible_python_interpreter={NODE_PYTHON}",
        "--tree",
        str(tree),
    ]
    result = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False
    )
    assert (tree / "localhost").exists(), result.stdout + result.stderr
    return {**json.loads((tree / "localhost").read_text()), "ansible_rc": result.returncode}


@pytest.mark.parametrize("nvml", [True, False], ids=["nvml", "nvidia-smi"])
def test_gpu_facts_module_in_one_call(tmp_path: Path, lab_env: Any, nvml: bool) -> None:
    node = boot_lab_node(a6000_pair(), tmp_path)
    lab_env(node)
    args = {
        "root": str(node.root),
        "nvidia_smi": str(LAB_SMI),
        "nvml": "auto" if nvml else "off",
        "nvml_python_path": [VENV_SITE_PACKAGES],
    }
    result = run_module(node, "gpu_facts", args, nvml, tmp_path / "tree")
    assert result["ansible_rc"] == 0, result.get("msg")
    facts = result["ansible_facts"]["lingbot_gpu"]
    assert facts["sources"]["gpus"] == ("nvml" if nvml else "nvidia-smi")
    assert [gpu["uuid"] for gpu in facts["gpus"]] == [g["uuid"] for g in node.state["gpus"]]
    assert facts["topology"] == [["X", "PHB"], ["PHB", "X"]]


def test_gpu_link_check_module_fails_on_error_findings(tmp_path: Path, lab_env: Any) -> None:
    node = boot_lab_node(load_profile("a6000-x8"), tmp_path)
    lab_env(node)
    facts = gather_facts(node.root, nvml="off", smi_command=[sys.executable, str(LAB_SMI)])
    failing = run_module(node, "gpu_link_check", {"facts": facts}, False, tmp_path / "t1")
    assert failing["ansible_rc"] == 2
    assert failing["msg"].startswith("1 finding(s) at or above error: PCIE_WIDTH_BELOW_EXPECTED")
    args = {"facts": facts, "fail_on": "never"}
    reporting = run_module(node, "gpu_link_check", args, False, tmp_path / "t2")
    assert reporting["ansible_rc"] == 0
    assert reporting["counts"] == {"info": 0, "warning": 0, "error": 1, "critical": 0}

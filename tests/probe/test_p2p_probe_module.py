"""The p2p_probe module through AnsiballZ (ansible localhost -c local), as a node runs it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from facts_support import REPO_ROOT, LabNode, boot_lab_node, load_profile, nvml_library
from probe_support import assert_close, state_pair

ANSIBLE = REPO_ROOT / ".venv" / "bin" / "ansible"
# The system interpreter has neither lingbot_fleet nor pynvml: the module runs on what
# AnsiballZ ships, and finds pynvml through nvml_python_path.
NODE_PYTHON = Path("/usr/bin/python3")
VENV_SITE_PACKAGES = str(next((REPO_ROOT / ".venv" / "lib").glob("python3*/site-packages")))
LIBRARY = REPO_ROOT / "roles" / "p2p_probe" / "library"


@pytest.fixture(autouse=True)
def _node_python() -> None:
    if not NODE_PYTHON.exists():
        pytest.skip(f"{NODE_PYTHON} (a Python without lingbot_fleet) is needed")


@pytest.fixture
def node(tmp_path: Path) -> LabNode:
    return boot_lab_node(load_profile("a6000-phb"), tmp_path)


def run_p2p_probe(
    node: LabNode, args: dict[str, Any], tree: Path, check: bool = False
) -> dict[str, Any]:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_MODULE_UTILS": str(REPO_ROOT / "python"),
        "LINGBOT_LAB_ROOT": str(node.lab_root),
        "LINGBOT_LAB_LIB": str(REPO_ROOT / "lab" / "node"),
        "LD_LIBRARY_PATH": str(nvml_library().parent),
    }
    module_args = {
        "root": str(node.root),
        "cuda_library": str(nvml_library().parent / "libcuda.so.1"),
        "nvml_python_path": [VENV_SITE_PACKAGES],
        "repetitions": 3,
        "latency_repetitions": 10,
        **args,
    }
    argv = [
        str(ANSIBLE),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-M",
        str(LIBRARY),
        "-m",
        "p2p_probe",
        "-a",
        json.dumps(module_args),
        "-e",
        f"ansible_python_interpreter={NODE_PYTHON}",
        "--tree",
        str(tree),
        *(["--check"] if check else []),
    ]
    result = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False
    )
    assert (tree / "localhost").exists(), result.stdout + result.stderr
    return {**json.loads((tree / "localhost").read_text()), "ansible_rc": result.returncode}


def test_module_measures_and_saves_latest(node: LabNode, tmp_path: Path) -> None:
    save_dir = tmp_path / "saved"
    result = run_p2p_probe(node, {"save_dir": str(save_dir)}, tmp_path / "t1")
    assert result["ansible_rc"] == 0, result.get("msg")
    assert result["changed"] is False
    probe = result["probe"]
    assert result["ansible_facts"]["lingbot_probe"] == probe
    assert probe["notes"] == []  # NVML found through nvml_python_path
    assert [gpu["link_under_load"]["gen"] for gpu in probe["gpus"]] == [4, 4]
    pair = probe["pairs"][0]
    assert_close(
        pair["p2p_enabled"]["unidirectional_gbytes_per_s"],
        state_pair(node, 0, 1)["p2p"]["gbytes_per_s"],
    )
    assert json.loads((save_dir / "latest.json").read_text()) == probe
    copies = sorted(save_dir.glob("probe-*.json"))
    assert [str(path) for path in copies] == [result["saved"]["copy"]]
    assert result["msg"] == f"measured; saved {save_dir}/latest.json and {copies[0]}"

    again = run_p2p_probe(node, {"save_dir": str(save_dir), "read_only": True}, tmp_path / "t2")
    assert again["ansible_rc"] == 0, again.get("msg")
    assert again["probe"] == probe
    assert again["saved"] == {}


def test_check_mode_measures_but_writes_nothing(node: LabNode, tmp_path: Path) -> None:
    save_dir = tmp_path / "saved"
    result = run_p2p_probe(node, {"save_dir": str(save_dir)}, tmp_path / "t", check=True)
    assert result["ansible_rc"] == 0, result.get("msg")
    assert result["changed"] is False
    assert len(result["probe"]["pairs"]) == 2
    assert result["saved"] == {}
    assert result["msg"] == f"measured; check mode: nothing written to {save_dir}"
    assert not save_dir.exists()


def test_read_only_without_a_saved_result_says_so(node: LabNode, tmp_path: Path) -> None:
    save_dir = tmp_path / "empty"
    result = run_p2p_probe(node, {"save_dir": str(save_dir), "read_only": True}, tmp_path / "t")
    assert result["ansible_rc"] == 0
    assert result["probe"] is None
    assert result["msg"] == (
        f"no saved probe result at {save_dir}/latest.json; run the p2p_probe role without "
        "read_only to measure"
    )


def test_bad_arguments_fail_with_the_reason(node: LabNode, tmp_path: Path) -> None:
    result = run_p2p_probe(node, {"pairs": [[0]], "keep": 0}, tmp_path / "t")
    assert result["ansible_rc"] == 2
    assert result["msg"] == (
        "pairs: [0] is not a GPU pair; write [src, dst] or 'src-dst' with NVML indices"
    )
    result = run_p2p_probe(node, {"size_mib": 0, "keep": 0}, tmp_path / "t2")
    assert result["msg"] == "size_mib must be at least 1, not 0; keep must be at least 1, not 0"

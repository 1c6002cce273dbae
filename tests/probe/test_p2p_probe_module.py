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


def test_save_false_measures_and_writes_nothing(node: LabNode, tmp_path: Path) -> None:
    save_dir = tmp_path / "saved"
    save_dir.mkdir()
    (save_dir / "latest.json").write_text('{"schema_version": 1, "timestamp": "planner"}\n')
    args = {"save_dir": str(save_dir), "save": False, "size_mib": 8}
    result = run_p2p_probe(node, args, tmp_path / "t")
    assert result["ansible_rc"] == 0, result.get("msg")
    assert len(result["probe"]["pairs"]) == 2
    assert result["saved"] == {}
    assert result["msg"] == f"measured; save is false: nothing written to {save_dir}"
    assert sorted(path.name for path in save_dir.iterdir()) == ["latest.json"]
    assert json.loads((save_dir / "latest.json").read_text())["timestamp"] == "planner"


def test_check_mode_leaves_the_gpus_that_serve_lingbot_alone(node: LabNode, tmp_path: Path) -> None:
    serving = node.state["gpus"][1]
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"instances": [{"name": "lingbot-0", "gpu_uuids": [serving["uuid"]]}]})
    )
    args = {"save_dir": str(tmp_path / "saved"), "plan_path": str(plan), "size_mib": 8}
    busy = node.lab_root / "run" / "lingbot-lab" / "busy"
    result = run_p2p_probe(node, args, tmp_path / "t1", check=True)
    assert result["ansible_rc"] == 0, result.get("msg")
    gpus = result["probe"]["gpus"]
    assert gpus[1]["skipped"] == (
        f"serves LingBot (instance lingbot-0 of {plan}); check mode runs no copies on it "
        "(probe_serving_gpus measures it)"
    )
    assert gpus[1]["error"] is None and gpus[1]["h2d_gbytes_per_s"] is None
    assert gpus[0]["skipped"] is None and gpus[0]["h2d_gbytes_per_s"] is not None
    assert all(
        pair["skipped"] and pair["p2p_disabled"] is None for pair in result["probe"]["pairs"]
    )
    assert not (busy / "1").exists()
    asked = run_p2p_probe(node, {**args, "probe_serving_gpus": True}, tmp_path / "t2", check=True)
    assert asked["probe"]["gpus"][1]["skipped"] is None
    assert asked["probe"]["gpus"][1]["h2d_gbytes_per_s"] is not None
    assert (busy / "1").exists()
    # Outside check mode the plan does not matter: the probe measures every GPU.
    (busy / "1").unlink()
    applied = run_p2p_probe(node, args, tmp_path / "t3")
    assert [gpu["skipped"] for gpu in applied["probe"]["gpus"]] == [None, None]
    # With a saved result on the same GPUs, check mode takes the left-out entries from it,
    # so the planner sees the figures it would otherwise see.
    (busy / "1").unlink()
    filled = run_p2p_probe(node, args, tmp_path / "t4", check=True)["probe"]
    stamp = applied["probe"]["timestamp"]
    assert filled["gpus"][1] == {**applied["probe"]["gpus"][1], "from_probe": stamp}
    assert [pair.get("from_probe") for pair in filled["pairs"]] == [stamp, stamp]
    assert filled["notes"][-1] == (
        f"entries left out are taken from the saved probe of {stamp} (from_probe)"
    )
    assert not (busy / "1").exists()


def test_parameters_from_a_saved_probe_compare_like_with_like(
    node: LabNode, tmp_path: Path
) -> None:
    previous = tmp_path / "previous.json"
    parameters = {
        "size_bytes": 4 << 20,
        "repetitions": 2,
        "copies_per_sample": 2,
        "warmup_copies": 0,
        "latency_size_bytes": 4,
        "latency_repetitions": 5,
    }
    previous.write_text(json.dumps({"timestamp": "2026-11-30T22:55:00Z", "parameters": parameters}))
    args = {"save": False, "parameters_from": str(previous), "size_mib": 16, "repetitions": 7}
    result = run_p2p_probe(node, args, tmp_path / "t1")
    assert result["ansible_rc"] == 0, result.get("msg")
    used = result["probe"]["parameters"]
    assert {key: used[key] for key in parameters} == parameters
    assert result["probe"]["notes"] == [
        f"figure parameters taken from {previous} (the probe of 2026-11-30T22:55:00Z)"
    ]
    missing = run_p2p_probe(
        node, {**args, "parameters_from": str(tmp_path / "none.json")}, tmp_path / "t2"
    )
    assert missing["probe"]["parameters"]["size_bytes"] == 16 << 20
    assert missing["probe"]["parameters"]["repetitions"] == 7
    assert missing["probe"]["notes"][0].startswith(
        f"parameters_from {tmp_path / 'none.json'} not used"
    )

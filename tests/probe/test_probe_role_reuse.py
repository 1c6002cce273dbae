"""The gpu_facts and p2p_probe roles on localhost (connection local): on a converged node
the probe task is answered on the controller, without a module call."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from lingbot_fleet.controller.playbook_run import PlaybookRun, run_playbook
from lingbot_fleet.facts.sysfs import iommu_facts
from lingbot_fleet.gpu.probe import ProbeParameters, path_config, save_probe

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE_TASK = "Measure the GPU paths and save the result"


def run_roles(tmp_path: Path, save_dir: Path, **variables: Any) -> PlaybookRun:
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "gpu_facts_install_nvml": False,
            "gpu_facts_use_nvml": False,
            "gpu_facts_nvidia_smi": str(tmp_path / "no-nvidia-smi"),
            "p2p_probe_save_dir": str(save_dir),
            "p2p_probe_cuda_library": str(tmp_path / "no-libcuda.so.1"),
            **variables,
        },
        "roles": ["p2p_probe"],
    }
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    return run_playbook(
        playbook,
        inventory="localhost,",
        cmdline=["-c", "local"],
        envvars={
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles"),
            "ANSIBLE_MODULE_UTILS": str(REPO_ROOT / "python"),
            "ANSIBLE_ACTION_PLUGINS": str(REPO_ROOT / "plugins" / "action"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        },
        timeout_s=300,
    )


def saved_on_this_host(save_dir: Path, age_s: float, **parameters: Any) -> dict[str, Any]:
    """A probe of this host's GPUs (none: the machine has no NVIDIA GPU) taken age_s ago."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age_s))
    document = {
        "schema_version": 1,
        "timestamp": stamp,
        "parameters": {**ProbeParameters().document(), **parameters},
        # This host's paths as gpu_facts reads them: its IOMMU mode, no GPU bridges.
        "path_config": path_config({"iommu": iommu_facts("/"), "gpus": []}),
        "gpus": [],
        "pairs": [],
        "errors": [],
        "notes": [],
    }
    save_probe(document, save_dir, keep=10)
    return document


def probe_copies(save_dir: Path) -> list[str]:
    return sorted(path.name for path in save_dir.glob("probe-*.json"))


def test_a_converged_node_makes_no_probe_module_call(tmp_path: Path) -> None:
    save_dir = tmp_path / "probe"
    saved = saved_on_this_host(save_dir, age_s=3600)
    before = probe_copies(save_dir)
    done = run_roles(tmp_path, save_dir)
    assert done.rc == 0, done.stdout
    [task] = done.results("localhost", task=PROBE_TASK)
    # A module's answer carries its invocation; the controller's answer has none.
    assert "invocation" not in task.result
    assert task.result["probe"] == saved
    assert task.result["msg"].startswith(f"reused the probe of {saved['timestamp']} (1.0 h old")
    assert probe_copies(save_dir) == before
    assert json.loads((save_dir / "latest.json").read_text()) == saved


def test_a_stale_or_other_probe_runs_the_module_once(tmp_path: Path) -> None:
    for name, age_s, parameters in (("stale", 2 * 86400, {}), ("sizes", 60, {"size_bytes": 8})):
        save_dir = tmp_path / name / "probe"
        saved = saved_on_this_host(save_dir, age_s, **parameters)
        done = run_roles(tmp_path / name, save_dir)
        assert done.rc == 0, done.stdout
        [task] = done.results("localhost", task=PROBE_TASK)
        assert "invocation" in task.result, name
        assert task.result["msg"].startswith(f"measured; saved {save_dir}/latest.json"), name
        assert len(probe_copies(save_dir)) == 2, name
        assert json.loads((save_dir / "latest.json").read_text()) != saved

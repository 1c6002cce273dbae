"""provision.yml and rollout.yml change a node with the same roles, in the same order, both
reading the node first with the options the GPU roles' gpu_facts dependency reads it with,
so that dependency answers from the first reading (plugins/action/gpu_facts.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHANGE_PLAYS = {
    "playbooks/provision.yml": "Provision the GPU nodes, a batch at a time",
    "playbooks/rollout.yml": "Change each batch of nodes and gate every node before the next batch",
}
CHANGE_ROLES = (
    "gpu_facts",
    "kernel_cmdline",
    "nvidia_persistence",
    "pcie_acs",
    "p2p_probe",
    "gpu_checks",
    "lingbot_service",
    "topo_monitor",
)


def change_play_tasks(playbook: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "rollout" / "change_play_tasks.py"),
            playbook,
            CHANGE_PLAYS[playbook],
        ],
        cwd=REPO,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "PYTHONPATH": os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")]),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def role_order(tasks: list[dict[str, Any]]) -> list[str]:
    """The roles of the change, each where its own tasks first run (dependencies aside)."""
    order: list[str] = []
    for task in tasks:
        role = task["role"]
        if role in CHANGE_ROLES and role not in order:
            order.append(role)
    return order


@pytest.fixture(scope="module")
def plays() -> dict[str, list[dict[str, Any]]]:
    return {playbook: change_play_tasks(playbook) for playbook in CHANGE_PLAYS}


def test_both_playbooks_change_a_node_with_the_same_roles_in_the_same_order(
    plays: dict[str, list[dict[str, Any]]],
) -> None:
    provision, rollout = plays["playbooks/provision.yml"], plays["playbooks/rollout.yml"]
    assert role_order(provision) == list(CHANGE_ROLES)
    assert role_order(rollout) == list(CHANGE_ROLES)
    change = [(task["role"], task["action"]) for task in provision if task["role"]]
    assert [(task["role"], task["action"]) for task in rollout if task["role"]] == change


@pytest.mark.parametrize("playbook", sorted(CHANGE_PLAYS))
def test_the_node_is_read_first_with_the_options_of_every_later_reading(
    plays: dict[str, list[dict[str, Any]]], playbook: str
) -> None:
    tasks = plays[playbook]
    actions = [task["action"] for task in tasks]
    readings = [task["args"] for task in tasks if task["action"] == "gpu_facts"]
    assert actions.index("gpu_facts") < actions.index("kernel_cmdline")
    # The first reading, then the dependency of each of the four GPU roles.
    assert len(readings) == 5
    first = readings[0]
    assert first["reuse_in_run"] == "run-1"
    # nvidia_persistence's defaults reach the first reading, as they reach the dependency's.
    assert first["persistence_unit"] == "nvidia-persistenced.service"
    assert all(reading == first for reading in readings[1:]), readings

"""Run a playbook on localhost (connection local) and read back what its tasks saved."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ROLE = REPO_ROOT / "roles" / "lingbot_service"
ANSIBLE_PLAYBOOK = REPO_ROOT / ".venv" / "bin" / "ansible-playbook"


def run_playbook(
    tmp_path: Path,
    tasks: list[dict[str, Any]],
    *,
    variables: dict[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    library: list[Path] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``tasks`` on localhost; each task may save results with `save_result`."""
    play = {
        "hosts": "localhost",
        "gather_facts": False,
        "vars": variables or {},
        "tasks": tasks,
    }
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    libraries = [ROLE / "library", *(library or [])]
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_LIBRARY": ":".join(str(path) for path in libraries),
        "ANSIBLE_MODULE_UTILS": str(REPO_ROOT / "python"),
        "ANSIBLE_ACTION_PLUGINS": str(REPO_ROOT / "plugins" / "action"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_PYTHON_INTERPRETER": str(REPO_ROOT / ".venv" / "bin" / "python"),
    }
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(playbook)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


def save(name: str, tmp_path: Path) -> dict[str, Any]:
    """A task that writes the registered variable ``name`` as JSON beside the playbook."""
    return {
        "name": f"Save {name}",
        "ansible.builtin.copy": {
            "content": "{{ " + name + " | to_json }}",
            "dest": str(tmp_path / f"{name}.json"),
            "mode": "0644",
        },
        "check_mode": False,
        "diff": False,
    }


def saved(name: str, tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / f"{name}.json").read_text())

"""Run a playbook on localhost (connection local) and read back what its tasks saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lingbot_fleet.controller.playbook_run import PlaybookRun
from lingbot_fleet.controller.playbook_run import run_playbook as run_with_events

REPO_ROOT = Path(__file__).resolve().parents[2]
ROLE = REPO_ROOT / "roles" / "lingbot_service"


def run_playbook(
    tmp_path: Path,
    tasks: list[dict[str, Any]],
    *,
    variables: dict[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    library: list[Path] | None = None,
) -> PlaybookRun:
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
    return run_with_events(
        playbook,
        inventory="localhost,",
        cmdline=["-c", "local", *(["--check"] if check else []), *(["--diff"] if diff else [])],
        envvars={
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_LIBRARY": ":".join(str(path) for path in libraries),
            "ANSIBLE_MODULE_UTILS": str(REPO_ROOT / "python"),
            "ANSIBLE_ACTION_PLUGINS": str(REPO_ROOT / "plugins" / "action"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_PYTHON_INTERPRETER": str(REPO_ROOT / ".venv" / "bin" / "python"),
        },
        timeout_s=300,
    )


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

"""Helpers for the lab integration tests: run playbooks, read the recap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lingbot_fleet.lab import layout


def run_playbook(playbook: str, limit: str, *extra: str) -> subprocess.CompletedProcess:
    """ansible-playbook against the lab inventory; returns the finished process."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(layout.REPO_ROOT / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(layout.LAB_INVENTORY),
            str(layout.REPO_ROOT / playbook),
            "-l",
            limit,
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=layout.REPO_ROOT,
        env=env,
        timeout=600,
    )


def recap(output: str, host: str) -> dict[str, int]:
    """The PLAY RECAP counters of one host (summed over plays)."""
    for line in output.splitlines():
        if line.startswith(host) and "ok=" in line:
            return {key: int(value) for key, value in (f.split("=") for f in line.split()[2:])}
    raise AssertionError(f"no PLAY RECAP line for {host} in:\n{output}")

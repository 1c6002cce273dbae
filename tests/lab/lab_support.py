"""Helpers for the lab integration tests: run playbooks through ansible-runner's events."""

from __future__ import annotations

from lingbot_fleet.lab import layout
from lingbot_fleet.playbook_run import PlaybookRun
from lingbot_fleet.playbook_run import run_playbook as run_with_events

ANSIBLE_ENV = {"ANSIBLE_CONFIG": str(layout.REPO_ROOT / "ansible.cfg")}


def run_playbook(playbook: str, limit: str, *extra: str, timeout_s: int = 900) -> PlaybookRun:
    """A playbook of the repository against the lab inventory; what its events said."""
    return run_with_events(
        layout.REPO_ROOT / playbook,
        inventory=layout.LAB_INVENTORY,
        limit=limit,
        cmdline=extra,
        envvars=ANSIBLE_ENV,
        timeout_s=timeout_s,
    )


def recap(run: PlaybookRun, host: str) -> dict[str, int]:
    """The host's recap counters, with ansible-playbook's names (failed, unreachable)."""
    counts = run.host_recap(host)
    return {**counts, "failed": counts["failures"], "unreachable": counts["dark"]}

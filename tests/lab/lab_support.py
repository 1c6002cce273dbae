"""Helpers for the lab integration tests: run playbooks through ansible-runner's events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lingbot_fleet.controller.playbook_run import PlaybookRun
from lingbot_fleet.controller.playbook_run import run_playbook as run_with_events
from lingbot_fleet.lab import layout

ANSIBLE_ENV = {"ANSIBLE_CONFIG": str(layout.REPO_ROOT / "ansible.cfg")}


# Run the path monitor once on a lab node (shared with the molecule scenarios).
RUN_MONITOR_ONCE = Path(__file__).with_name("run_monitor_once.sh").read_text()


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


def run_audit(spec, report_dir: Path) -> subprocess.CompletedProcess:
    """`lingbot-fleet audit -l <node>` with its reports in ``report_dir``."""
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "lingbot-fleet"),
            "audit",
            "-i",
            str(layout.LAB_INVENTORY),
            "-l",
            spec.name,
            "--report-dir",
            str(report_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def audited_node(report_dir: Path) -> dict:
    """The one node of the audit's fleet.json."""
    [node] = json.loads((report_dir / "fleet.json").read_text())["nodes"]
    return node


def audit_findings(spec, report_dir: Path) -> list[str]:
    """The codes of the findings `lingbot-fleet audit -l <node>` reports for one node."""
    done = run_audit(spec, report_dir)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return sorted(finding["code"] for finding in audited_node(report_dir)["findings"])

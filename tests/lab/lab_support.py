"""Helpers for the lab integration tests: run playbooks through ansible-runner's events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def audit_findings(spec, report_dir: Path) -> list[str]:
    """The codes of the findings `lingbot-fleet audit -l <node>` reports for one node."""
    done = subprocess.run(
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
    assert done.returncode in (0, 1), done.stdout + done.stderr
    [node] = json.loads((report_dir / "fleet.json").read_text())["nodes"]
    return sorted(finding["code"] for finding in node["findings"])


def rollback_to_zero(spec) -> None:
    """playbooks/rollback.yml to generation 0: the node as before the toolkit touched it."""
    done = run_playbook(
        "playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true", "-e", "rollback_to=0"
    )
    assert done.rc == 0, done.stdout[-4000:]


# Every running lingbot@ instance of a node (argv, numactl request, CUDA environment) and
# the plan in force, as one JSON document (BootedLab.python).
RUNNING = r"""
import json, subprocess
units = subprocess.run(["systemctl", "list-units", "lingbot@*", "--no-legend", "--plain",
                        "--state=running"], capture_output=True, text=True).stdout.split()
out = {}
for unit in [u for u in units if u.startswith("lingbot@")]:
    pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit],
                         capture_output=True, text=True).stdout.strip()
    env = dict(line.split("=", 1) for line in
               open(f"/proc/{pid}/environ").read().split("\0") if "=" in line)
    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
    out[unit] = {"argv": argv, "numactl": env.get("LINGBOT_LAB_NUMACTL_REQUEST"),
                 "visible": env.get("CUDA_VISIBLE_DEVICES"), "order": env.get("CUDA_DEVICE_ORDER")}
out["plan"] = json.load(open("/etc/lingbot/plan.json"))
print(json.dumps(out))
"""


def argument(argv: list[str], option: str) -> str:
    return argv[argv.index(option) + 1]

"""Run a playbook (or an ad-hoc module) through ansible-runner and keep what its events say.

The one way the toolkit's tools and tests run Ansible: a private data dir per run, every
event consumed as it arrives (nothing scraped from callback text), the runner's status
mapped to the result. ``PlaybookRun`` has, per host, the recap counters and, per task, the
result, the module's return values and the time the task took on that host.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The recap counters ansible-playbook prints per host.
RECAP_KEYS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")
_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_item_on_ok": "item_ok",
    "runner_item_on_failed": "item_failed",
}


@dataclass(frozen=True)
class TaskResult:
    host: str
    task: str
    action: str
    play: str
    outcome: str  # ok, failed, skipped, unreachable, item_ok, item_failed
    changed: bool
    duration_s: float
    result: Mapping[str, Any]


@dataclass
class PlaybookRun:
    rc: int
    status: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)
    tasks: list[TaskResult] = field(default_factory=list)
    stdout: str = ""

    def results(self, host: str, task: str | None = None, action: str | None = None):
        """The host's task results (items excluded), filtered by task name or action."""
        return [
            t
            for t in self.tasks
            if t.host == host
            and not t.outcome.startswith("item_")
            and (task is None or t.task == task)
            and (action is None or t.action.rsplit(".", 1)[-1] == action)
        ]

    def changed_tasks(self, host: str) -> list[str]:
        return [t.task for t in self.results(host) if t.changed]

    def failed_tasks(self, host: str) -> list[TaskResult]:
        return [t for t in self.results(host) if t.outcome in ("failed", "unreachable")]

    def host_recap(self, host: str) -> dict[str, int]:
        if host not in self.recap:
            raise KeyError(f"{host} has no recap in this run (hosts: {sorted(self.recap)})")
        return self.recap[host]


def _environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    environment = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    for name in ("ANSIBLE_CONFIG", "PATH", "HOME"):
        if name in os.environ:
            environment[name] = os.environ[name]
    environment.update(extra or {})
    # ansible-playbook of this Python's environment, whatever PATH the caller gives.
    bin_dir = os.path.dirname(sys.executable)
    path = environment.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        environment["PATH"] = bin_dir + os.pathsep + path
    return environment


class _Collector:
    def __init__(self, run: PlaybookRun) -> None:
        self.run = run

    def handle(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_stats":
            for key in RECAP_KEYS:
                for host, count in (data.get(key) or {}).items():
                    self.run.recap.setdefault(host, dict.fromkeys(RECAP_KEYS, 0))[key] = count
            for host in data.get("processed") or {}:
                self.run.recap.setdefault(host, dict.fromkeys(RECAP_KEYS, 0))
        elif kind in _RESULT_EVENTS and data.get("host"):
            result = data.get("res") or {}
            self.run.tasks.append(
                TaskResult(
                    host=data["host"],
                    task=data.get("task") or "",
                    action=data.get("task_action") or "",
                    play=data.get("play") or "",
                    outcome=_RESULT_EVENTS[kind],
                    changed=bool(result.get("changed")),
                    duration_s=float(data.get("duration") or 0.0),
                    result=result,
                )
            )
        return False  # keep no event files in the private data dir


def run_playbook(
    playbook: str | Path,
    *,
    inventory: str | Path,
    limit: str | None = None,
    extravars: Mapping[str, Any] | None = None,
    cmdline: Sequence[str] = (),
    envvars: Mapping[str, str] | None = None,
    forks: int | None = None,
    timeout_s: int | None = None,
) -> PlaybookRun:
    """Run ``playbook`` and return what its events said (never raises for a failed play)."""
    import ansible_runner  # noqa: PLC0415 - keep ansible-runner out of import time

    run = PlaybookRun(rc=-1, status="unstarted")
    collector = _Collector(run)
    private = tempfile.mkdtemp(prefix="lingbot-fleet-run-")
    try:
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=str(Path(playbook).resolve()),
            # A file or directory, or a host list such as "localhost,".
            inventory=str(Path(inventory).resolve()) if Path(inventory).exists() else inventory,
            limit=limit,
            extravars=dict(extravars or {}),
            cmdline=shlex.join(cmdline) or None,
            envvars=_environment(envvars),
            forks=forks,
            timeout=timeout_s,
            event_handler=collector.handle,
            quiet=True,
            project_dir=os.getcwd(),
        )
        run.rc = runner.rc
        run.status = runner.status
        with open(runner.stdout.name, encoding="utf-8", errors="replace") as handle:
            run.stdout = handle.read()
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return run


def task_profile(run: PlaybookRun) -> list[tuple[str, float, int]]:
    """(task, seconds summed over its runs, how many runs), slowest first. A task name
    runs once per host, and more than once where a role runs twice in a play."""
    totals: dict[str, list[float]] = {}
    for task in run.tasks:
        if task.outcome.startswith("item_"):
            continue
        totals.setdefault(task.task, []).append(task.duration_s)
    rows = [(name, sum(times), len(times)) for name, times in totals.items()]
    return sorted(rows, key=lambda row: row[1], reverse=True)

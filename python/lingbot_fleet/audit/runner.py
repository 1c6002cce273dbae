"""Drive the audit playbook through ansible-runner and collect each host's result.

The playbook is the collection's (lingbot.fleet.audit), found by
lingbot_fleet.controller.collection: the one the wheel carries, a checkout's, or the installed
collection.

Results come from the runner's events, never from files on the nodes: `runner_on_ok` of
the lingbot_audit_node task carries the host's audit record, `runner_on_unreachable` and
`runner_on_failed` say why a host has none. Hosts of the inventory (after the limit) that
never report are listed as failed by fleet.py, never dropped.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..controller.collection import CollectionNotFoundError, Content, find_content
from ..node.findings import severity_rank
from .fleet import STATUS_FAILED, STATUS_UNREACHABLE, AuditOutcome, node_status

PLAYBOOK_NAME = "audit"
HOST_GROUP = "gpu-nodes"
AUDIT_ACTION = "lingbot_audit_node"
# ansible-playbook exit codes that still mean "the playbook ran": some hosts failed (2)
# or were unreachable (4).
PLAYBOOK_RAN_RCS = (0, 2, 4)


class AuditError(Exception):
    """The audit itself could not run (exit status 3)."""


@dataclass(frozen=True)
class AuditRun:
    inventory: str
    limit: str | None = None
    forks: int = 50
    threshold: str = "error"
    fresh_probe: bool = False
    strategy: str = "linear"


def audit_content() -> Content:
    """The content the audit runs; AuditError naming the fix when there is none."""
    try:
        return find_content()
    except CollectionNotFoundError as error:
        raise AuditError(str(error)) from error


def _ansible_environment() -> None:
    for key, value in audit_content().environment.items():
        os.environ.setdefault(key, value)
    bin_dir = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(bin_dir, "ansible-playbook")):
        path = os.environ.get("PATH", "")
        if bin_dir not in path.split(os.pathsep):
            os.environ["PATH"] = bin_dir + os.pathsep + path


def require_inventory(inventory: str) -> None:
    if not os.path.exists(inventory):
        raise AuditError(f"inventory {inventory} does not exist; pass -i with an inventory file")


def inventory_hosts(inventory: str, limit: str | None) -> list[str]:
    """The hosts of gpu-nodes in the inventory, after the limit (as ansible-playbook sees them)."""
    _ansible_environment()
    from ansible.errors import AnsibleError  # noqa: PLC0415 - keep ansible out of import time
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    require_inventory(inventory)
    try:
        manager = InventoryManager(loader=DataLoader(), sources=[inventory])
        if limit:
            manager.subset(limit)
        return sorted(host.name for host in manager.get_hosts(HOST_GROUP))
    except AnsibleError as error:
        raise AuditError(f"cannot read inventory {inventory}: {error}") from error


class EventCollector:
    """Turns runner events into an AuditOutcome and reports each finished host."""

    def __init__(
        self,
        outcome: AuditOutcome,
        threshold: str,
        on_host: Callable[[str, str], None] = lambda _host, _status: None,
    ) -> None:
        self.outcome = outcome
        self.threshold = threshold
        self.on_host = on_host

    def _settled(self, host: str) -> bool:
        o = self.outcome
        return host in o.records or host in o.unreachable or host in o.failed

    def handle(self, event: Mapping[str, Any]) -> bool:
        """Runner's event_handler; returns False so runner keeps no event files."""
        kind = event.get("event")
        data = event.get("event_data") or {}
        host = data.get("host")
        if host is None or self._settled(host):
            return False
        result = data.get("res") or {}
        if kind == "runner_on_ok" and data.get("task_action", "").endswith(AUDIT_ACTION):
            if "audit" in result:
                self.outcome.records[host] = result["audit"]
                self.on_host(host, node_status(result["audit"], self.threshold))
        elif kind == "runner_on_unreachable":
            self.outcome.unreachable[host] = str(result.get("msg") or "unreachable")
            self.on_host(host, STATUS_UNREACHABLE)
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            task = data.get("task") or "a task"
            self.outcome.failed[host] = f"{task}: {result.get('msg') or 'failed'}"
            self.on_host(host, STATUS_FAILED)
        return False


class _HostsReading:
    """``inventory_hosts`` in a thread: ansible's inventory parse (a good part of the
    audit's own cost) runs while ansible-playbook starts, not before it."""

    def __init__(self, run: AuditRun) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._future = self._pool.submit(inventory_hosts, run.inventory, run.limit)
        self._pool.shutdown(wait=False)

    def hosts(self) -> list[str]:
        return self._future.result()


def run_audit(
    run: AuditRun,
    on_host: Callable[[str, str], None] | None = None,
    on_hosts: Callable[[list[str]], None] | None = None,
) -> tuple[AuditOutcome, float]:
    """Run the playbook on every host; (outcome, seconds). AuditError when it cannot run.

    ``on_hosts`` gets the inventory's hosts (after the limit) once, before the first
    ``on_host``; ``on_host`` each host as it finishes, with its status.
    """
    import ansible_runner  # noqa: PLC0415

    severity_rank(run.threshold)
    require_inventory(run.inventory)
    content = audit_content()
    playbook = content.playbook(PLAYBOOK_NAME)
    _ansible_environment()  # before the thread: the runner's child needs the PATH too
    reading = _HostsReading(run)
    outcome = AuditOutcome(hosts=[])
    announced: list[bool] = []

    def announce() -> bool:
        if not announced:
            try:
                hosts = reading.hosts()
            except AuditError:
                return False  # raised after the run, with the playbook's own word
            announced.append(True)
            if on_hosts is not None:
                on_hosts(hosts)
        return True

    def host_done(host: str, status: str) -> None:
        if on_host is not None and announce():
            on_host(host, status)

    collector = EventCollector(outcome, run.threshold, host_done)
    private_dir = tempfile.mkdtemp(prefix="lingbot-audit-")
    started = time.monotonic()
    try:
        runner = ansible_runner.run(
            private_data_dir=private_dir,
            project_dir=str(playbook.parent.parent)
            if content.source == "checkout"
            else os.getcwd(),
            playbook=str(playbook),
            inventory=os.path.abspath(run.inventory),
            limit=run.limit,
            forks=run.forks,
            extravars={"audit_probe": run.fresh_probe},
            envvars={**content.environment, "ANSIBLE_STRATEGY": run.strategy},
            event_handler=collector.handle,
            quiet=True,
        )
        elapsed = time.monotonic() - started
        outcome.hosts = reading.hosts()
        if not outcome.hosts:
            scope = f" with limit {run.limit!r}" if run.limit else ""
            raise AuditError(f"no host of group {HOST_GROUP} in {run.inventory}{scope}")
        announce()
        if runner.status not in ("successful", "failed") or runner.rc not in PLAYBOOK_RAN_RCS:
            tail = runner.stdout.read()[-2000:] if runner.stdout else ""
            raise AuditError(
                f"ansible-playbook {playbook} ended with status {runner.status}, exit "
                f"code {runner.rc}:\n{tail}"
            )
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)
    return outcome, elapsed

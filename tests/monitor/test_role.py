"""The topo_monitor role on localhost: one module call, check mode, idempotence, refusals.

Runs the real role (action plugin, module, systemd-analyze) against a temp tree; systemctl
is a stand-in that keeps the timer's state in files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lingbot_fleet.controller import nodeapp
from lingbot_fleet.controller.playbook_run import PlaybookRun
from lingbot_fleet.controller.playbook_run import run_playbook as run_with_events
from lingbot_fleet.monitor.config import load_config

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "topo_monitor"
SERVICE = "lingbot-fleet-monitor.service"
TIMER = "lingbot-fleet-monitor.timer"

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze"
)

FAKE_SYSTEMCTL = """#!/bin/sh
# Stand-in for systemctl on a host without systemd: logs each call and keeps the timer's
# enabled and active state as files in $SYSTEMCTL_STATE.
echo "$*" >> "$SYSTEMCTL_LOG"
case "$1" in
  show)
    if [ -e "$SYSTEMCTL_STATE/enabled" ]; then file=enabled; else file=disabled; fi
    if [ -e "$SYSTEMCTL_STATE/active" ]; then active=active; else active=inactive; fi
    printf 'LoadState=loaded\\nUnitFileState=%s\\nActiveState=%s\\n' "$file" "$active" ;;
  enable) touch "$SYSTEMCTL_STATE/enabled" ;;
  start|restart) touch "$SYSTEMCTL_STATE/active" ;;
esac
exit 0
"""


class Node:
    """A temp tree standing in for the node, and ansible-playbook runs against it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "node"
        self.root.mkdir()
        self.generations = tmp_path / "lingbot-fleet-generations"
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        (self.bin / "systemctl").write_text(FAKE_SYSTEMCTL)
        (self.bin / "systemctl").chmod(0o755)
        self.state = tmp_path / "systemctl-state"
        self.state.mkdir()
        self.log = tmp_path / "systemctl.log"
        self.variables: dict[str, Any] = {
            "__topo_monitor_app": str(self.app),
            "__topo_monitor_config_path": str(self.config),
            "__topo_monitor_state_dir": str(self.root / "state"),
            "__topo_monitor_unit_dir": str(self.root / "units"),
            "__topo_monitor_obsolete_paths": [str(self.root / "opt" / "lib")],
            "topo_monitor_textfile_dir": str(self.root / "textfile"),
            "topo_monitor_python": sys.executable,
            "topo_monitor_extra_writable_paths": ["/run/lingbot-lab"],
            "generations_dir": str(self.generations),
        }

    @property
    def app(self) -> Path:
        return self.root / "sbin" / "lingbot-fleet-monitor"

    @property
    def config(self) -> Path:
        return self.root / "etc" / "monitor.json"

    def unit(self, name: str) -> Path:
        return self.root / "units" / name

    def files(self) -> list[str]:
        return sorted(str(path.relative_to(self.root)) for path in self.root.rglob("*"))

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def play(
        self, *options: str, run_id: str | None = None, commit: bool = True, **variables: Any
    ) -> PlaybookRun:
        """Open a generation, run the role, commit (unless ``commit`` is false)."""
        play = [
            {"name": "Open", "hosts": "localhost", "gather_facts": False, "roles": ["generations"]},
            {
                "name": "Monitor",
                "hosts": "localhost",
                "gather_facts": False,
                "roles": ["topo_monitor"],
            },
        ]
        return run_playbook(
            self.tmp,
            play,
            {**self.variables, **({"generations_run_id": run_id} if run_id else {}), **variables},
            *options,
            environment={
                "PATH": f"{self.bin}:{os.environ.get('PATH', '')}",
                "SYSTEMCTL_LOG": str(self.log),
                "SYSTEMCTL_STATE": str(self.state),
            },
        )


def run_playbook(
    tmp_path: Path,
    play: list[dict[str, Any]],
    extra_vars: dict[str, Any],
    *options: str,
    environment: dict[str, str] | None = None,
) -> PlaybookRun:
    inventory = tmp_path / "hosts.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": host}}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    (tmp_path / "extra.json").write_text(json.dumps(extra_vars))
    return run_with_events(
        playbook,
        inventory=inventory,
        cmdline=["-e", f"@{tmp_path / 'extra.json'}", *options],
        envvars={
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            **(environment or {}),
        },
        timeout_s=300,
    )


def recap(done: PlaybookRun) -> str:
    assert done.rc == 0, done.stdout
    return done.stdout.split("PLAY RECAP")[1]


def uploads(done: PlaybookRun) -> list[str]:
    """The zipapp uploads of the run (the local connection logs every PUT at -vvv)."""
    return [
        line
        for line in done.stdout.splitlines()
        if line.startswith("<localhost> PUT ") and line.endswith("/lingbot-fleet-monitor.pyz")
    ]


def obsolete_tree(node: Node) -> list[Path]:
    """What the role installed before the zipapp: modules copied one by one."""
    files = [
        node.root / "opt/lib/lingbot_fleet/__init__.py",
        node.root / "opt/lib/lingbot_fleet/facts/smi.py",
        node.root / "opt/lib/lingbot_fleet/__pycache__/__init__.cpython-311.pyc",
    ]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {path.name}\n")
    return files


@needs_systemd_analyze
def test_first_run_installs_and_records_everything_second_run_touches_nothing(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    old = obsolete_tree(node)

    first = node.play("-vvv", run_id="run-1", commit=False)
    assert "changed=1" in recap(first)
    assert len(uploads(first)) == 1
    assert node.app.read_bytes() == nodeapp.build(interpreter=sys.executable)
    assert oct(node.app.stat().st_mode & 0o777) == "0o755"
    config = load_config(node.config)
    assert (config.consecutive_runs, config.size_mib) == (3, 16)
    assert config.textfile_dir == str(node.root / "textfile")
    service = node.unit(SERVICE).read_text()
    assert f"\nExecStart={sys.executable} {node.app} --config {node.config}\n" in service
    assert f"\nReadWritePaths={node.root}/state {node.root}/textfile -/run/lingbot-lab\n" in (
        service
    )
    assert "\nOnUnitActiveSec=5min\n" in node.unit(TIMER).read_text()
    for directory in ("state", "textfile", "etc"):
        assert (node.root / directory).is_dir()
    assert not (node.root / "opt" / "lib").exists()
    assert node.calls() == [
        "daemon-reload",
        f"show --property=LoadState --property=UnitFileState --property=ActiveState {TIMER}",
        f"enable {TIMER}",
        f"start {TIMER}",
    ]
    manifest = json.loads((node.generations / "pending/run-1/manifest.json").read_text())
    recorded = {entry["path"] for entry in manifest["files"]}
    assert recorded == {
        str(node.app),
        str(node.config),
        str(node.unit(SERVICE)),
        str(node.unit(TIMER)),
        *(str(path) for path in old),
    }

    node.log.unlink()
    second = node.play("-vvv", run_id="run-2")
    assert "changed=0" in recap(second)
    assert uploads(second) == []
    # One module call: the only commands it ran are read-only: systemctl show of the timer
    # to decide, and of the units it watched, for the receipt of a call that changed nothing.
    assert second.stdout.count("Using module file") == 1
    assert [call.split()[0] for call in node.calls()] == ["show", "show"]
    assert not (node.generations / "pending" / "run-2").exists()


@needs_systemd_analyze
def test_a_changed_interval_rewrites_the_timer_and_restarts_it(tmp_path: Path) -> None:
    node = Node(tmp_path)
    recap(node.play())
    node.log.unlink()
    app = node.app.stat().st_mtime_ns

    done = node.play("-vvv", topo_monitor_interval="10min")
    assert "changed=1" in recap(done)
    assert "\nOnUnitActiveSec=10min\n" in node.unit(TIMER).read_text()
    assert node.app.stat().st_mtime_ns == app and uploads(done) == []
    assert [call.split()[0] for call in node.calls()] == ["daemon-reload", "show", "restart"]


@needs_systemd_analyze
def test_check_mode_writes_nothing_and_shows_every_change(tmp_path: Path) -> None:
    node = Node(tmp_path)
    obsolete_tree(node)
    before = node.files()

    done = node.play("--check", "--diff", "-vvv")
    assert "changed=1" in recap(done)
    assert node.files() == before
    assert not node.generations.exists()
    assert uploads(done) == []
    assert [call.split()[0] for call in node.calls()] == ["show"]
    out = done.stdout
    for sentence in (
        f"would create {node.app}",
        f"would create {node.config}",
        f"would create {node.unit(SERVICE)}",
        f"would create the directory {node.root}/state",
        f"would remove the directory {node.root}/opt/lib",
        "would reload the systemd units",
        f"would enable {TIMER}",
        f"would start {TIMER}",
    ):
        assert sentence in out
    checksum = hashlib.sha256(nodeapp.build(interpreter=sys.executable)).hexdigest()
    assert f"+(zipapp, sha256 {checksum})" in out
    assert '+    "consecutive_runs": 3,' in out
    assert f"+{node.root}/opt/lib/lingbot_fleet/facts/smi.py" not in out  # listed, not diffed
    assert f"-{node.root}/opt/lib/lingbot_fleet/facts/smi.py" in out


@needs_systemd_analyze
def test_check_mode_after_a_config_change_shows_it_and_writes_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path)
    recap(node.play())
    config = node.config.read_text()

    done = node.play("--check", "--diff", topo_monitor_consecutive_runs=5)
    assert "changed=1" in recap(done)
    assert '-    "consecutive_runs": 3,\n+    "consecutive_runs": 5,' in done.stdout
    assert node.config.read_text() == config


def test_a_configuration_the_monitor_refuses_fails_before_anything_is_written(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    done = node.play(topo_monitor_size_mib=0)
    assert done.rc != 0
    assert (
        f"configuration {node.config}: size_mib must be at least 1, not 0; nothing was written"
    ) in done.stdout
    assert node.files() == []


@needs_systemd_analyze
def test_units_systemd_refuses_are_not_written(tmp_path: Path) -> None:
    node = Node(tmp_path)
    done = node.play(topo_monitor_interval="5 fortnights")
    assert done.rc != 0
    assert "systemd-analyze verify refused the monitor's units; nothing was written" in done.stdout
    assert "lingbot-fleet-monitor.timer:" in done.stdout
    assert node.files() == []


def test_role_syntax(tmp_path: Path) -> None:
    play = [{"name": "Monitor", "hosts": "localhost", "roles": ["topo_monitor"]}]
    done = run_playbook(tmp_path, play, {}, "--syntax-check")
    assert done.rc == 0, done.stdout


def test_defaults_match_the_argument_specs_and_the_policy_check_knows_them() -> None:
    from lingbot_fleet.controller.policy import check_policy, load_role_specs

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = load_role_specs(REPO / "roles")["topo_monitor"]
    assert sorted(defaults) == sorted(specs)
    problems = [
        str(p) for p in check_policy({"topo_monitor_consecutive_run": 3}, {"topo_monitor": specs})
    ]
    assert problems == [
        "topo_monitor_consecutive_run: unknown variable of role topo_monitor (did you mean "
        "topo_monitor_consecutive_runs? see roles/topo_monitor/README.md)"
    ]

"""The topo_monitor role: the modules it installs, its rendered files, check mode."""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lingbot_fleet.monitor import MonitorConfig

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "lingbot_fleet"
ROLE = REPO / "roles" / "topo_monitor"
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
# Optional on the nodes and imported lazily (facts.nvml.load_pynvml).
OPTIONAL_IMPORTS = {"pynvml"}


def module_file(name: str) -> Path:
    """'lingbot_fleet.facts.smi' -> python/lingbot_fleet/facts/smi.py (or the package's)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imports_of(path: Path, package: str) -> tuple[set[str], set[str]]:
    """(lingbot_fleet modules, other top-level modules) imported anywhere in the file."""
    ours: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = ours if alias.name.startswith("lingbot_fleet") else others
                target.add(alias.name if target is ours else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                ours.add(module)
                for alias in node.names:
                    if module_file(f"{module}.{alias.name}").exists():
                        ours.add(f"{module}.{alias.name}")
            elif node.module and node.module.startswith("lingbot_fleet"):
                ours.add(node.module)
            elif node.module and node.module != "__future__":
                others.add(node.module.split(".")[0])
    return ours, others


def import_closure(start: str) -> tuple[set[Path], set[str]]:
    """Every lingbot_fleet file `start` needs (with its packages' __init__), other imports."""
    seen: set[Path] = set()
    others: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(1, len(parts)):
            todo_init = module_file(".".join(parts[:depth]))
            if todo_init not in seen:
                todo.append(".".join(parts[:depth]))
        path = module_file(name)
        if path in seen:
            continue
        seen.add(path)
        package = name if path.name == "__init__.py" else ".".join(parts[:-1])
        ours, theirs = imports_of(path, package)
        others |= theirs
        todo.extend(ours)
    return seen, others


def test_the_installed_modules_are_exactly_what_the_monitor_imports() -> None:
    files, _others = import_closure("lingbot_fleet.monitor")
    needed = sorted(str(path.relative_to(PACKAGE)) for path in files)
    assert ROLE_VARS["__topo_monitor_modules"] == needed


def test_the_installed_modules_need_only_the_standard_library() -> None:
    _files, others = import_closure("lingbot_fleet.monitor")
    outside = others - set(sys.stdlib_module_names) - OPTIONAL_IMPORTS
    assert outside == set()


# ---- rendering the role's files --------------------------------------------------------


def ansible_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        }
    )
    return env


def run_playbook(
    tmp_path: Path,
    play: list[dict[str, Any]],
    extra_vars: dict[str, Any],
    *options: str,
    environment: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                        }
                    }
                }
            }
        )
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    (tmp_path / "extra.json").write_text(json.dumps(extra_vars))
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory),
        str(playbook),
        "-e",
        f"@{tmp_path / 'extra.json'}",
        *options,
    ]
    return subprocess.run(
        argv,
        check=False,
        env={**ansible_env(tmp_path), **(environment or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    """The role's config, units and launcher rendered from its defaults and vars."""
    out = tmp_path / "out"
    (out / "units").mkdir(parents=True)
    tasks: list[dict[str, Any]] = [
        {
            "name": "Render the configuration",
            "ansible.builtin.copy": {
                "content": "{{ __topo_monitor_config | to_nice_json(sort_keys=true) }}\n",
                "dest": str(out / "monitor.json"),
                "mode": "0644",
            },
        },
        {
            "name": "Render the launcher",
            "ansible.builtin.template": {
                "src": str(ROLE / "templates" / "lingbot-fleet-monitor.sh.j2"),
                "dest": str(out / "lingbot-fleet-monitor"),
                "mode": "0755",
            },
        },
    ]
    for unit in ("lingbot-fleet-monitor.service", "lingbot-fleet-monitor.timer"):
        tasks.append(
            {
                "name": f"Render {unit}",
                "ansible.builtin.template": {
                    "src": str(ROLE / "templates" / f"{unit}.j2"),
                    "dest": str(out / "units" / unit),
                    "mode": "0644",
                },
            }
        )
    play = [
        {
            "name": "Render the topo_monitor files",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
            "tasks": tasks,
        }
    ]
    extra = {
        "role_path": str(ROLE),
        "__topo_monitor_launcher": str(out / "lingbot-fleet-monitor"),
        "__topo_monitor_lib_dir": str(tmp_path / "lib"),
        "topo_monitor_extra_writable_paths": ["/run/lingbot-lab"],
        "gpu_checks_expected_links": {"NVIDIA RTX A6000": {"gen": 4, "width": 16}},
    }
    done = run_playbook(tmp_path, play, extra)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_rendered_configuration_is_accepted_by_the_monitor(rendered: Path) -> None:
    raw = json.loads((rendered / "monitor.json").read_text())
    config = MonitorConfig.from_mapping(raw)
    assert raw["size_mib"] == 16 and raw["consecutive_runs"] == 3
    assert raw["time_budget_s"] == 30.0
    assert raw["auto_fallback"] is False
    assert raw["nvidia_smi"] == ["nvidia-smi"]
    assert raw["nvml_python_path"] == ["/opt/lingbot-fleet/venv/lib/python3*/site-packages"]
    assert config.expected_links == {"NVIDIA RTX A6000": {"gen": 4, "width": 16}}
    assert config.plan_path == "/etc/lingbot/plan.json"
    assert config.textfile_dir == "/var/lib/prometheus/node-exporter"
    assert config.state_dir == "/var/lib/lingbot-fleet/monitor"


def test_rendered_units(rendered: Path) -> None:
    service = (rendered / "units" / "lingbot-fleet-monitor.service").read_text()
    timer = (rendered / "units" / "lingbot-fleet-monitor.timer").read_text()
    assert "\nType=oneshot\n" in service
    assert f"\nExecStart={rendered / 'lingbot-fleet-monitor'}\n" in service
    assert "\nNice=10\n" in service and "\nIOSchedulingClass=idle\n" in service
    assert (
        "\nReadWritePaths=/var/lib/lingbot-fleet/monitor /var/lib/prometheus/node-exporter "
        "-/run/lingbot-lab\n"
    ) in service
    assert "\nOnBootSec=2min\nOnUnitActiveSec=5min\nRandomizedDelaySec=30s\n" in timer
    assert "\nUnit=lingbot-fleet-monitor.service\n" in timer
    assert "\nWantedBy=timers.target\n" in timer
    launcher = (rendered / "lingbot-fleet-monitor").read_text()
    assert launcher.startswith("#!/bin/sh\n")
    assert launcher.rstrip().endswith(
        "exec /usr/bin/python3 -m lingbot_fleet.monitor --config "
        '/etc/lingbot-fleet/monitor.json "$@"'
    )


def verify(unit_file: Path, unit_name: str) -> subprocess.CompletedProcess[str]:
    """The role's validate command, filled in the way Ansible does (Python's %)."""
    command = ROLE_VARS["__topo_monitor_verify_command"] + " " + unit_name
    return subprocess.run(
        shlex.split(command % str(unit_file)), capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_units_pass_the_roles_verification_and_a_broken_one_does_not(rendered: Path) -> None:
    service = rendered / "units" / "lingbot-fleet-monitor.service"
    # The temp file Ansible validates has no unit suffix; the command names it.
    candidate = rendered / "source"
    shutil.copy(service, candidate)
    done = verify(candidate, "lingbot-fleet-monitor.service")
    assert done.returncode == 0, done.stdout + done.stderr
    candidate.write_text(service.read_text().replace("Nice=10", "Nicety=10"))
    done = verify(candidate, "lingbot-fleet-monitor.service")
    assert done.returncode != 0
    assert "Unknown key 'Nicety' in section [Service]" in done.stdout


def test_role_syntax(tmp_path: Path) -> None:
    play = [{"name": "Monitor", "hosts": "localhost", "roles": ["topo_monitor"]}]
    done = run_playbook(tmp_path, play, {}, "--syntax-check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_mode_writes_nothing_and_reports_every_change(tmp_path: Path) -> None:
    root = tmp_path / "node"
    for directory in ("lib/lingbot_fleet/facts", "lib/lingbot_fleet/parsers", "etc", "units"):
        (root / directory).mkdir(parents=True)
    (root / "sbin").mkdir()
    before = sorted(str(path) for path in root.rglob("*"))
    extra = {
        "__topo_monitor_lib_dir": str(root / "lib"),
        "__topo_monitor_config_path": str(root / "etc" / "monitor.json"),
        "__topo_monitor_launcher": str(root / "sbin" / "lingbot-fleet-monitor"),
        "__topo_monitor_state_dir": str(root / "state"),
        "__topo_monitor_unit_dir": str(root / "units"),
        "topo_monitor_textfile_dir": str(root / "textfile"),
        "generations_dir": str(tmp_path / "generations"),
    }
    play = [
        {"name": "Open", "hosts": "localhost", "gather_facts": False, "roles": ["generations"]},
        {"name": "Monitor", "hosts": "localhost", "gather_facts": False, "roles": ["topo_monitor"]},
    ]
    done = run_playbook(tmp_path, play, extra, "--check", "--diff")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(str(path) for path in root.rglob("*")) == before
    assert not (tmp_path / "generations").exists()
    out = done.stdout
    for module in ROLE_VARS["__topo_monitor_modules"]:
        assert f"changed: [localhost] => (item={module})" in out
    for task in (
        "Install the monitor's launcher",
        "Write the monitor's configuration",
        "Write the monitor's service unit",
        "Write the monitor's timer unit",
    ):
        assert f"TASK [topo_monitor : {task}]" in out
    assert "skipping: [localhost]" in out.split("Enable and start the monitor's timer")[1]


FAKE_SYSTEMCTL = """#!/bin/sh
# Stand-in for systemctl on a host without systemd: logs each call, reports the timer
# loaded, enabled and active.
echo "$*" >> "$SYSTEMCTL_LOG"
case "$1" in
  show) printf 'Id=%s\\nLoadState=loaded\\nActiveState=active\\nUnitFileState=enabled\\n' "$2" ;;
  is-enabled) echo enabled ;;
  is-active) echo active ;;
esac
exit 0
"""


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_real_run_validates_records_and_is_idempotent(tmp_path: Path) -> None:
    """A real run into a temp tree (systemctl stubbed): files, checks, second run unchanged."""
    root = tmp_path / "node"
    (root / "sbin").mkdir(parents=True)
    (root / "units").mkdir()
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "systemctl").write_text(FAKE_SYSTEMCTL)
    (fake_bin / "systemctl").chmod(0o755)
    log = tmp_path / "systemctl.log"
    extra = {
        "__topo_monitor_lib_dir": str(root / "lib"),
        "__topo_monitor_config_path": str(root / "etc" / "monitor.json"),
        "__topo_monitor_launcher": str(root / "sbin" / "lingbot-fleet-monitor"),
        "__topo_monitor_state_dir": str(root / "state"),
        "__topo_monitor_unit_dir": str(root / "units"),
        "topo_monitor_textfile_dir": str(root / "textfile"),
        "topo_monitor_python": sys.executable,
        "generations_dir": str(tmp_path / "generations"),
        "generations_run_id": "run-1",
    }
    play = [
        {"name": "Open", "hosts": "localhost", "gather_facts": False, "roles": ["generations"]},
        {"name": "Monitor", "hosts": "localhost", "gather_facts": False, "roles": ["topo_monitor"]},
    ]
    environment = {"PATH": f"{fake_bin}:{os.environ.get('PATH', '')}", "SYSTEMCTL_LOG": str(log)}

    def run() -> subprocess.CompletedProcess[str]:
        return run_playbook(tmp_path, play, extra, environment=environment)

    first = run()
    assert first.returncode == 0, first.stdout + first.stderr
    for module in ROLE_VARS["__topo_monitor_modules"]:
        installed = root / "lib" / "lingbot_fleet" / module
        assert installed.read_bytes() == (PACKAGE / module).read_bytes()
    config = MonitorConfig.from_mapping(json.loads((root / "etc" / "monitor.json").read_text()))
    assert config.consecutive_runs == 3
    assert oct((root / "sbin" / "lingbot-fleet-monitor").stat().st_mode & 0o777) == "0o755"
    calls = log.read_text().splitlines()
    assert "daemon-reload" in calls
    assert "restart lingbot-fleet-monitor.timer" in calls
    manifest = json.loads(
        (tmp_path / "generations" / "pending" / "run-1" / "manifest.json").read_text()
    )
    recorded = {entry["path"] for entry in manifest["files"]}
    assert str(root / "units" / "lingbot-fleet-monitor.timer") in recorded
    assert str(root / "lib" / "lingbot_fleet" / "monitor.py") in recorded
    assert len(recorded) == len(ROLE_VARS["__topo_monitor_modules"]) + 4

    log.unlink()
    second = run()
    assert second.returncode == 0, second.stdout + second.stderr
    recap = second.stdout.split("PLAY RECAP")[1]
    assert "changed=0" in recap, second.stdout
    assert "daemon-reload" not in log.read_text().splitlines()


def test_defaults_match_the_argument_specs_and_the_policy_check_knows_them() -> None:
    from lingbot_fleet.policy import check_policy, load_role_specs

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

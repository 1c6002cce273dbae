"""Run roles/lingbot_service/library/lingbot_service.py in this process, on a temp root.

The module imports lingbot_fleet as ``ansible.module_utils.lingbot_fleet`` (AnsiballZ's
name for it); here that name is the same package the tests import. systemctl and
journalctl are replaced by a recorder that answers ``systemctl show`` from a table; the
module's warnings land in the result's ``warnings``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from lingbot_fleet.lingbot import service as service_code
from lingbot_fleet.node import nodefiles

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE_PATH = REPO_ROOT / "roles" / "lingbot_service" / "library" / "lingbot_service.py"

# tests/conftest.py maps ansible.module_utils.lingbot_fleet onto lingbot_fleet.


def load_module() -> Any:
    spec = importlib.util.spec_from_file_location("lingbot_service_module", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SERVICE = load_module()
# What the module does lives in the package; tests patch its readers there.
SERVICE_CODE = service_code
REAL_RUN_COMMAND = nodefiles.run_command
MUTATING = ("daemon-reload", "enable", "disable", "start", "restart", "reset-failed", "stop")


@dataclass
class FakeSystemd:
    """Records every command; ``systemctl show`` answers from ``units`` (name -> props)."""

    units: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)
    journal: str = "lingbot: error: the journal line\n"
    # Each start gives the unit a new main process and invocation, as systemd does.
    starts: int = 0

    def __call__(self, argv: list[str], *, check: bool = True) -> nodefiles.CommandResult:
        argv = list(argv)
        tool = os.path.basename(argv[0])
        if tool == "systemd-analyze":
            return REAL_RUN_COMMAND(argv, check=check)
        self.calls.append(argv)
        if tool == "systemctl" and argv[1] == "show":
            blocks = []
            for unit in argv[argv.index("--") + 1 :]:
                props = {
                    "Id": unit,
                    "LoadState": "loaded",
                    "ActiveState": "inactive",
                    "UnitFileState": "disabled",
                }
                props.update(self.units.get(unit, {}))
                blocks.append("\n".join(f"{key}={value}" for key, value in props.items()))
            return nodefiles.CommandResult(0, "\n\n".join(blocks) + "\n", "")
        if tool == "systemctl":
            self.apply(argv)
        if tool == "journalctl":
            return nodefiles.CommandResult(0, self.journal, "")
        return nodefiles.CommandResult(0, "", "")

    def apply(self, argv: list[str]) -> None:
        verb = argv[1]
        units = [word for word in argv[2:] if word.endswith(".service")]
        for unit in units:
            props = self.units.setdefault(unit, {})
            if verb in ("start", "restart"):
                self.starts += 1
                props["ActiveState"] = "active"
                props["MainPID"] = str(1000 + self.starts)
                props["InvocationID"] = f"{self.starts:032x}"
            elif verb == "enable":
                props["UnitFileState"] = "enabled"
            elif verb == "disable":
                props["UnitFileState"] = "disabled"
                props["ActiveState"] = "inactive"
                props["MainPID"] = "0"
                props["InvocationID"] = ""

    def mutating(self) -> list[list[str]]:
        return [
            call
            for call in self.calls
            if os.path.basename(call[0]) != "systemctl" or call[1] in MUTATING
        ]

    def verbs(self) -> list[str]:
        return [" ".join(call[1:]) for call in self.mutating()]


@dataclass
class Done:
    failed: bool
    result: dict[str, Any]

    @property
    def msg(self) -> str:
        return str(self.result.get("msg", ""))


class _ExitError(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


def run(
    monkeypatch: pytest.MonkeyPatch,
    args: dict[str, Any],
    systemd: FakeSystemd,
    *,
    check_mode: bool = False,
    diff: bool = True,
) -> Done:
    """Call the module's run_module() with ``args``; returns what it would have printed."""
    monkeypatch.setattr(SERVICE_CODE, "run_command", systemd)
    monkeypatch.setattr(nodefiles, "run_command", systemd)
    full = {**args, "_ansible_check_mode": check_mode, "_ansible_diff": diff}

    def exit_json(self: Any, **result: Any) -> None:
        raise _ExitError({"failed": False, **result})

    def fail_json(self: Any, msg: str, **result: Any) -> None:
        raise _ExitError({"failed": True, "msg": msg, **result})

    warnings: list[str] = []

    def warn(self: Any, warning: str, **_: Any) -> None:
        warnings.append(warning)

    monkeypatch.setattr(SERVICE.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(SERVICE.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(SERVICE.AnsibleModule, "warn", warn)
    with patch_module_args(full):
        try:
            SERVICE.run_module()
        except _ExitError as done:
            result = json.loads(json.dumps({**done.result, "warnings": warnings}, default=str))
            return Done(bool(result.pop("failed")), result)
    raise AssertionError("the module returned without exit_json or fail_json")


def tree(root: Path) -> dict[str, tuple[str, int]]:
    """Every file and directory under root -> (content or '<dir>', mode)."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = "/" + str(path.relative_to(root))
        if path.is_dir():
            found[relative] = ("<dir>", path.stat().st_mode & 0o7777)
        else:
            found[relative] = (path.read_text(errors="replace"), path.stat().st_mode & 0o7777)
    return found


def node_arguments(tmp_path: Path) -> dict[str, Any]:
    """A node root with numactl and a model (32 layers); the module's arguments for it."""
    root = tmp_path / "root"
    # numactl at a host path (systemd-analyze verify checks ExecStart on this machine) and
    # at the same path under the root (the module checks it there).
    numactl = tmp_path / "bin" / "numactl"
    for path in (numactl, root / str(numactl).lstrip("/")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    (root / "srv" / "model").mkdir(parents=True)
    (root / "srv" / "model" / "config.json").write_text('{"num_hidden_layers": 32}\n')
    return {
        "root": str(root),
        "numactl": str(numactl),
        "python": sys.executable,
        "model_path": "/srv/model",
        "user": "root",
        "group": "root",
        "device_groups": [],
    }

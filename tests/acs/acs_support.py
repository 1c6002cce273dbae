"""A lab node's tree for role pcie_acs: the real setpci writes the ports' config space, a
systemctl stand-in runs the unit's ExecStart and ExecStop lines (tests/acs and the receipt
contract use it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from facts_support import boot_lab_node
from malformed_support import role_module, run_module

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.gpu import acs

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "lab" / "profiles" / "a6000-iommu-acs.yml"
SWITCH_PORTS = ["0000:18:00.0", "0000:18:01.0"]
ROOT_PORT = "0000:16:01.0"
PASSTHROUGH = "BOOT_IMAGE=/boot/vmlinuz ro quiet intel_iommu=on iommu=pt"
TRANSLATING = "BOOT_IMAGE=/boot/vmlinuz ro quiet intel_iommu=on"
GDIR = "/var/lib/lingbot-fleet/generations"
DIGEST = "d" * 64

SYSTEMCTL = """#!{python}
# systemctl for one unit: its state in a file, start/stop run the unit's ExecStart/ExecStop.
import json, os, subprocess, sys
unit_path = {unit_path!r}
state_path = {state_path!r}
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
state = {{"UnitFileState": "disabled", "ActiveState": "inactive"}}
if os.path.exists(state_path):
    state = json.load(open(state_path))
def run(key):
    for line in open(unit_path).read().splitlines():
        if line.startswith(key + "="):
            subprocess.run(line.split("=", 1)[1], shell=True, check=True)
verb, rest = sys.argv[1], sys.argv[2:]
if verb == "show":
    loaded = "loaded" if os.path.exists(unit_path) else "not-found"
    print(f"Id={{rest[-1]}}")
    print(f"LoadState={{loaded}}\\nUnitFileState={{state['UnitFileState']}}")
    print(f"ActiveState={{state['ActiveState']}}")
elif verb in ("start", "restart"):
    if verb == "restart" and state["ActiveState"] == "active":
        run("ExecStop")
    run("ExecStart")
    state["ActiveState"] = "active"
elif verb == "stop" or (verb == "disable" and "--now" in rest):
    if state["ActiveState"] == "active":
        run("ExecStop")
    state["ActiveState"] = "inactive"
if verb == "enable":
    state["UnitFileState"] = "enabled"
elif verb == "disable":
    state["UnitFileState"] = "disabled"
elif verb == "is-active":
    sys.exit(0 if state["ActiveState"] == "active" else 3)
json.dump(state, open(state_path, "w"))
"""


class Node:
    """A lab node's tree with the commands the module and the rollback run."""

    def __init__(self, tmp_path: Path, cmdline: str, monkeypatch: pytest.MonkeyPatch) -> None:
        raw = yaml.safe_load(PROFILE.read_text())
        self.lab = boot_lab_node(raw, tmp_path, cmdline=cmdline)
        self.root = self.lab.root
        (self.root / "etc/systemd/system").mkdir(parents=True)
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        self.log = tmp_path / "systemctl.log"
        (bin_dir / "systemctl").write_text(
            SYSTEMCTL.format(
                python=sys.executable,
                unit_path=str(self.root / acs.UNIT_PATH.lstrip("/")),
                state_path=str(tmp_path / "unit-state.json"),
                log=str(self.log),
            )
        )
        # The real setpci, reading and writing the node tree's config space files.
        self.setpci = bin_dir / "setpci"
        self.setpci.write_text(
            f'#!/bin/sh\nexec {shutil.which("setpci")} -O sysfs.path={self.root}/sys/bus/pci "$@"\n'
        )
        for stub in bin_dir.iterdir():
            stub.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    def facts(self) -> dict[str, Any]:
        return gather_facts(self.root, use_nvml=False, smi_command=["false"])

    def acs_word(self, bdf: str) -> int:
        read = subprocess.run(
            [str(self.setpci), "-s", bdf, acs.ACS_CONTROL_REGISTER],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(read.stdout.strip(), 16)

    def run(
        self,
        monkeypatch: pytest.MonkeyPatch,
        facts: dict[str, Any],
        *,
        check_mode: bool = False,
        **args: Any,
    ) -> dict[str, Any]:
        arguments = {
            "facts": facts,
            "root": str(self.root),
            "setpci": str(self.setpci),
            "generation_run_id": "run-1",
            "receipt_digest": DIGEST,
            **args,
        }
        return run_module(
            monkeypatch, role_module("pcie_acs", "pcie_acs"), arguments, check_mode=check_mode
        )

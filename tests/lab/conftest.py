"""A booted lab for the integration tests: every profile, one node each.

The lab is brought up once per test session and taken down at the end; the teardown
asserts that nothing the lab started is left behind (processes, mounts).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from lingbot_fleet.lab import layout
from lingbot_fleet.lab.manager import Lab, NodeSpec, _mounts_under, available_profiles

pytestmark = pytest.mark.lab
EXTRA_FAULT_NODES = ("a6000-gen3", "a6000-x8")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/lab/" in str(item.fspath):
            item.add_marker(pytest.mark.lab)


class BootedLab:
    def __init__(self, lab: Lab, specs: list[NodeSpec]) -> None:
        self.lab = lab
        self.specs = specs

    def node(self, profile: str) -> NodeSpec:
        return next(spec for spec in self.specs if spec.profile == profile)

    def nodes(self, profile: str) -> list[NodeSpec]:
        return [spec for spec in self.specs if spec.profile == profile]

    def inside(self, spec: NodeSpec, command: str, check: bool = True):
        """Run a command in the node without SSH (nsenter into its init), for faults that
        take SSH away."""
        init = None
        for pid in self.lab._nspawn_pids(spec):
            try:
                if b"systemd-nspawn" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            if children:
                init = int(children[0])
                break
        assert init is not None, f"{spec.name}: no init process found"
        result = subprocess.run(
            ["nsenter", "-t", str(init), "-m", "-u", "-i", "-n", "-p", "--", "sh", "-c", command],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{spec.name}: {command!r} exited {result.returncode}: {result.stderr}"
            )
        return result

    def run(self, spec: NodeSpec, command: str, check: bool = True, timeout: float = 60):
        result = subprocess.run(
            self.lab.ssh_argv(spec, command),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{spec.name}: {command!r} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def python(self, spec: NodeSpec, script: str) -> dict:
        """Run a Python script on the node; it prints one JSON document."""
        result = self.run(spec, f"python3 -c {shlex.quote(script)}")
        return json.loads(result.stdout)

    def boot_id(self, spec: NodeSpec) -> str:
        return self.run(spec, "cat /proc/sys/kernel/random/boot_id").stdout.strip()

    def reboot(self, spec: NodeSpec, timeout_s: float = 90) -> str:
        before = self.boot_id(spec)
        self.run(spec, "systemctl reboot", check=False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                now = self.boot_id(spec)
            except (AssertionError, subprocess.TimeoutExpired):
                continue
            if now and now != before:
                return now
        raise AssertionError(f"{spec.name} did not come back from reboot in {timeout_s} s")


@pytest.fixture(scope="session")
def booted_lab():
    lab = Lab()
    # Every profile once, and two more nodes that only the fault tests break and mend.
    specs = lab.up([*available_profiles(), *EXTRA_FAULT_NODES])
    yield BootedLab(lab, specs)
    if os.environ.get("LINGBOT_KEEP_LAB"):
        return
    lab.down()
    leftovers = _mounts_under(layout.LAB_HOME / "nodes")
    assert not leftovers, f"lab down left mounts behind: {leftovers}"
    for spec in specs:
        assert not lab._nspawn_pids(spec), f"lab down left {spec.machine} running"
    assert not Path(layout.LAB_HOME / "nodes").exists()

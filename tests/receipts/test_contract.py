"""The contract of answering for a module on the controller (docs/converged-runs.md), checked
the same way for every role whose action answers from a receipt:

- the answer is the module's own: a receipt's replayed result equals a real module call on
  the converged node, every key (only ``receipt``, where the answer came from, differs);
- the receipt watches everything the call depended on: every node path the module opened or
  listed in a call that changed nothing is in the receipt (its paths, its listings, or a
  reading that covers it), so a file a module starts to read or write outside NodeChanges
  fails here;
- every path the receipt watches takes it down when it moves.

topo_monitor_install's no-op call needs the monitor's zipapp and systemd-analyze; its role
test (tests/monitor/test_role.py) runs it through Ansible.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plan_support
import pytest
from acs_support import PASSTHROUGH, SWITCH_PORTS
from acs_support import Node as AcsNode
from malformed_support import role_module, run_module
from module_support import SERVICE_CODE, FakeSystemd, node_arguments
from module_support import run as run_service

from lingbot_fleet.boot import bootfiles, kernel_options
from lingbot_fleet.controller.receipt_action import RUN_OPTIONS, digest_options
from lingbot_fleet.gpu import acs
from lingbot_fleet.lingbot import service_options
from lingbot_fleet.lingbot.service_reading import ANSWERS_READING
from lingbot_fleet.monitor.install_options import INSTALL_ARGUMENT_SPEC
from lingbot_fleet.node import nodefiles, receipts
from lingbot_fleet.node import systemd as systemd_show

REPO = Path(__file__).resolve().parents[2]
DIGEST = "c" * 64
# Toolkit state, not what a module decides from: receipts, generations, backups.
TOOLKIT_STATE = "/var/lib/lingbot-fleet/"


class _Accesses:
    """Every path opened or listed while ``recording`` (one audit hook for the session:
    Python cannot remove one)."""

    def __init__(self) -> None:
        self.active = False
        self.opened: set[str] = set()
        self.listed: set[str] = set()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.active or not args or not isinstance(args[0], str):
            return
        if event == "open":
            self.opened.add(os.path.abspath(args[0]))
        elif event in ("os.listdir", "os.scandir"):
            self.listed.add(os.path.abspath(args[0]))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        self.opened.clear()
        self.listed.clear()
        self.active = True
        try:
            yield
        finally:
            self.active = False


ACCESSES = _Accesses()


@dataclass
class Scenario:
    """A converged node of one role: ``call(recording)`` runs its module once (with the
    digest), inside ``recording`` (what gpu_facts reads before is outside)."""

    role: str
    root: Path
    call: Callable[[contextlib.AbstractContextManager], dict[str, Any]]
    show_units: Callable[[list[str]], dict[str, dict[str, str]]] = lambda _units: {}
    readers: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    # Node paths a reading of the receipt covers (kernel_cmdline's boot_state).
    read_by_readings: Callable[[], set[str]] = set

    def reading(self) -> dict[str, Any]:
        found = receipts.read_receipts(str(self.root), self.show_units, time.time(), self.readers)
        return found[self.role]


# --- the roles ---------------------------------------------------------------------------


def run_in(
    recording: contextlib.AbstractContextManager, call: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    with recording:
        return call()


def kernel_cmdline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scenario:
    root = tmp_path / "node"
    (root / "etc/default/grub.d").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    samples = REPO / "tests/unit/grub_samples"
    (root / "etc/default/grub").write_text((samples / "debian12.grub").read_text())
    (root / "etc/os-release").write_text('ID=debian\nPRETTY_NAME="test"\n')
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/boot/vmlinuz ro quiet pci=noacpi\n")
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    module = role_module("kernel_cmdline", "kernel_cmdline")
    args = {
        "present": {"iommu": "pt"},
        "absent": ["pci=noacpi"],
        "bootloader": "grub_d",
        "update_bootloader": False,
        "backup_dir": "/var/lib/lingbot-fleet/backup",
        "root": str(root),
        "receipt_digest": DIGEST,
    }

    def read_by_readings() -> set[str]:
        paths = {*bootfiles.boot_file_paths(str(root)), *bootfiles.BOOT_STATE_EXTRA_PATHS}
        # The boot files' directories: which files they hold is in the digest too.
        return paths | {bootfiles.GRUB_D_DIR, bootfiles.BLS_ENTRIES_DIR}

    return Scenario(
        role="kernel_cmdline",
        root=root,
        call=lambda recording: run_in(recording, lambda: run_module(monkeypatch, module, args)),
        readers={
            bootfiles.BOOT_STATE_READING: lambda _recorded: bootfiles.boot_state_digest(str(root))
        },
        read_by_readings=read_by_readings,
    )


def pcie_acs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scenario:
    node = AcsNode(tmp_path, PASSTHROUGH, monkeypatch)
    systemctl = shutil.which("systemctl") or "systemctl"

    def call(recording: contextlib.AbstractContextManager) -> dict[str, Any]:
        facts = node.facts()  # read by gpu_facts before the module runs
        with recording:
            return node.run(
                monkeypatch, facts, redirect_off_bridges=SWITCH_PORTS, receipt_digest=DIGEST
            )

    return Scenario(
        role=acs.RECEIPT_ROLE,
        root=node.root,
        call=call,
        show_units=receipts.show_units(systemctl),
    )


def lingbot_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Scenario:
    if os.geteuid() != 0:
        pytest.skip("writes root-owned files")
    arguments = node_arguments(tmp_path)
    root = Path(arguments["root"])
    (root / "etc/systemd/system/multi-user.target.wants").mkdir(parents=True)
    for name in ("passwd", "group"):
        (root / "etc" / name).write_text("root:x:0:0::/root:/bin/sh\n")
    monkeypatch.setattr(
        SERVICE_CODE, "readiness_once", lambda params, instance, state: ("ready", "")
    )
    facts, probe = plan_support.lab_inputs("a6000-phb")
    inputs = {"facts": facts, "probe": probe, "policy": {}, "findings": []}
    systemd = FakeSystemd()
    args = {
        **arguments,
        "plan_inputs": inputs,
        "receipt_digest": DIGEST,
        "api_key": "a-secret",
    }

    def call(recording: contextlib.AbstractContextManager) -> dict[str, Any]:
        with recording:
            done = run_service(monkeypatch, args, systemd)
        if not done.result["warnings"]:
            del done.result["warnings"]  # Ansible returns warnings only when there are some
        return {"failed": done.failed, **done.result}

    def show(units: list[str]) -> dict[str, dict[str, str]]:
        return systemd_show.parse_units(systemd(["systemctl", "show", "--", *units]).stdout)

    return Scenario(
        role=service_options.RECEIPT_ROLE,
        root=root,
        call=call,
        show_units=show,
        readers={ANSWERS_READING: lambda recorded: dict.fromkeys(recorded, True)},
    )


ROLES = {"kernel_cmdline": kernel_cmdline, "pcie_acs": pcie_acs, "lingbot_service": lingbot_service}


@pytest.fixture(params=sorted(ROLES))
def converged(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Scenario:
    """The role's node after a call that converged and one that changed nothing."""
    scenario = ROLES[request.param](tmp_path, monkeypatch)
    first = scenario.call(contextlib.nullcontext())
    assert first["failed"] is False, first
    assert first["changed"] is True and first["receipt"] in ("none", "removed")
    second = scenario.call(contextlib.nullcontext())
    assert second["failed"] is False and second["changed"] is False, second
    assert second["receipt"] == "written"
    return scenario


# Durations a call measured (how long lingbot_service waited for readiness): a replay
# gives those of the call that kept the receipt; their presence and type are compared.
MEASURED = frozenset({"waited_s"})


def _measured_blank(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: type(item).__name__ if key in MEASURED else _measured_blank(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_measured_blank(item) for item in value]
    return value


def answerable(result: dict[str, Any]) -> dict[str, Any]:
    """A module's result as an action answers it: less ``failed`` (Ansible's) and less
    ``receipt`` (where the answer came from), durations by their type."""
    return _measured_blank(
        {key: value for key, value in result.items() if key not in ("failed", "receipt")}
    )


# --- the contract ------------------------------------------------------------------------


def test_the_answer_is_a_real_module_call_every_key(converged: Scenario) -> None:
    entry = converged.reading()
    assert receipts.unchanged(entry, DIGEST, time.time()) is None
    answer = receipts.replay(entry["receipt"])
    assert answer is not None and answer["receipt"] == "stands"
    again = converged.call(contextlib.nullcontext())
    assert again["failed"] is False and again["changed"] is False
    assert answerable(answer) == answerable(again)


def unwatched(
    root: Path, receipt: dict[str, Any], read_by_readings: set[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """The node paths opened, and the directories listed, while ``ACCESSES`` recorded that
    the receipt does not watch (toolkit state aside)."""

    def node_path(real: str) -> str | None:
        if real == str(root) or not real.startswith(f"{root}/"):
            return None
        return "/" + os.path.relpath(real, root)

    covered = set(receipt["paths"]) | read_by_readings
    listed = set(receipt.get("listings", {})) | read_by_readings
    opened = {node_path(path) for path in ACCESSES.opened} - {None}
    listings = {node_path(path) for path in ACCESSES.listed} - {None}
    return (
        sorted(p for p in opened if p not in covered and not p.startswith(TOOLKIT_STATE)),
        sorted(p for p in listings if p not in listed and not p.startswith(TOOLKIT_STATE)),
    )


def test_the_receipt_watches_every_path_the_module_opened_or_listed(
    converged: Scenario,
) -> None:
    again = converged.call(ACCESSES.recording())
    assert again["changed"] is False and again["receipt"] in ("written", "unchanged")
    receipt = converged.reading()["receipt"]
    assert unwatched(converged.root, receipt, converged.read_by_readings()) == ([], [])


def test_a_read_outside_node_changes_is_found_unwatched(tmp_path: Path) -> None:
    """The check above can fail: a module (a test double) that reads one file and lists one
    directory past its NodeChanges leaves them out of its receipt, and they are named."""
    root = tmp_path / "node"
    (root / "etc/double.d").mkdir(parents=True)
    (root / "etc/double.conf").write_text("watched\n")
    (root / "etc/stray.conf").write_text("not watched\n")
    changes = nodefiles.NodeChanges(check_mode=False, root=str(root))
    with ACCESSES.recording():
        changes.read("/etc/double.conf")
        changes.write_file(
            "/etc/double.conf", "watched\n", owner=os.getuid(), group=os.getgid(), mode=0o644
        )
        (root / "etc/stray.conf").read_text()
        os.listdir(root / "etc/double.d")
    result = {"changed": changes.changed, **changes.result()}
    assert receipts.keep("double", DIGEST, changes, result, lambda _u: {}, root=str(root)) == (
        "written"
    )
    receipt = receipts.read_receipts(str(root), lambda _u: {}, time.time())["double"]["receipt"]
    assert unwatched(root, receipt) == (["/etc/stray.conf"], ["/etc/double.d"])


def test_every_watched_path_moving_takes_the_receipt_down(converged: Scenario) -> None:
    receipt = converged.reading()["receipt"]
    assert receipt["paths"] or receipt.get("readings")
    for path, recorded in receipt["paths"].items():
        real = converged.root / path.lstrip("/")
        if recorded is None:
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_text("appeared\n")
        elif real.is_dir():
            real.chmod(real.stat().st_mode ^ 0o001)
        elif path.startswith(receipts.PSEUDO_FILE_PREFIXES):
            real.write_text(real.read_text() + "moved\n")
        else:
            os.utime(real, ns=(1, 1))
        entry = converged.reading()
        assert entry["current"]["paths"][path] != recorded, path
        assert receipts.unchanged(entry, DIGEST, time.time()) is not None, path


SPECS = {
    "kernel_cmdline": kernel_options.ARGUMENT_SPEC,
    "pcie_acs": acs.ARGUMENT_SPEC,
    "topo_monitor_install": INSTALL_ARGUMENT_SPEC,
    "lingbot_service": service_options.ARGUMENT_SPEC,
}


@pytest.mark.parametrize("module", sorted(SPECS))
def test_one_digest_rule_every_option_but_the_run_and_the_secrets(module: str) -> None:
    spec = SPECS[module]
    params = {name: option.get("default") for name, option in spec.items()}
    options = digest_options(spec, params)
    secrets = {name for name, option in spec.items() if option.get("no_log")}
    assert set(options) == set(spec) - RUN_OPTIONS - secrets
    if module == "lingbot_service":
        assert secrets == {"api_key"}


def test_no_value_of_the_api_key_is_in_the_receipt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = lingbot_service(tmp_path, monkeypatch)
    scenario.call(contextlib.nullcontext())
    assert scenario.call(contextlib.nullcontext())["receipt"] == "written"
    text = (scenario.root / "var/lib/lingbot-fleet/receipts/lingbot_service.json").read_text()
    assert "a-secret" not in text
    # The file the key is written into is watched: an edit there takes the receipt down.
    assert any(path.endswith("/secrets.env") for path in json.loads(text)["paths"])
